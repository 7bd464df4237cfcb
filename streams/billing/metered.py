"""What metering measured for one billing record: the quantities every billing mode prices.

The modes compute with exact fractions (prices are Decimal, converted exactly), so an amount is rounded once,
at the end, and always the same way, whatever the order of the operations.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

MS_PER_HOUR = 3_600_000


@dataclass(frozen=True, slots=True)
class Metered:
    """One GPU's time in one period for one tenant and job, in milliseconds (integers: sums are exact).

    ``busy_weighted_ms`` and ``idle_weighted_ms`` weigh each millisecond by the GPU's utilization (a second at
    40 % counts 0.4 s); time estimated across a telemetry gap counts at its neighbours' mean utilization, other
    time without a utilization reading in full. ``gap_idle_ms`` is the part of ``busy_ms`` estimated across a
    gap between two idle samples: busy for the idle rule (a gap ends an idle window), idle for pricing and waste
    (its weighted time is in ``idle_weighted_ms``).
    """

    period_start: int            # Unix seconds
    period_s: int
    rented_ms: int
    busy_ms: int
    idle_ms: int
    topup_ms: int                # added to a rental shorter than the on-demand minimum, where it ended
    busy_weighted_ms: Fraction
    idle_weighted_ms: Fraction
    gap_idle_ms: int = 0

    @property
    def idle_priced_ms(self) -> int:
        """Idle time for pricing: the idle windows' time and the gaps between idle samples."""
        return self.idle_ms + self.gap_idle_ms

    @property
    def busy_priced_ms(self) -> int:
        return self.busy_ms - self.gap_idle_ms


def hours(ms: int | Fraction) -> Fraction:
    """Milliseconds as GPU-hours, exactly."""
    return Fraction(ms) / MS_PER_HOUR
