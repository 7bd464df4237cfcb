"""What metering measured for one billing record: the quantities every billing mode prices."""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

MS_PER_HOUR = 3_600_000


@dataclass(frozen=True, slots=True)
class Metered:
    """One GPU's time in one period for one tenant and job, in milliseconds (integers: sums are exact).

    ``busy_weighted_ms`` and ``idle_weighted_ms`` weigh each millisecond by the GPU's utilization (a second at
    40 % counts 0.4 s); time without a utilization reading counts in full.
    """

    period_start: int            # Unix seconds
    period_s: int
    rented_ms: int
    busy_ms: int
    idle_ms: int
    topup_ms: int                # added to a rental shorter than the on-demand minimum, where it ended
    busy_weighted_ms: Decimal
    idle_weighted_ms: Decimal


def hours(ms: int | Decimal) -> Decimal:
    """Milliseconds as GPU-hours, exactly (a decimal fraction of an integer)."""
    return Decimal(ms) / MS_PER_HOUR
