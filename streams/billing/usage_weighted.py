"""Usage-weighted: a price per GPU-hour applied to what the GPU did, not to how long it was held.

``weight = "busy"`` bills busy seconds only (idle ones, as the idle rule finds them, are free, and so is time
billed across a telemetry gap between two idle samples); ``weight = "utilization"`` bills each rented second by
the GPU's utilization in it (a second at 40 % costs 0.4 s; time billed across a gap costs its neighbours' mean
utilization, never full use; seconds of a sample without a reading are billed in full).
"""
from __future__ import annotations

from fractions import Fraction

from .metered import Metered, hours

NAME = "usage"
WORDS = "usage-weighted"


def check(price) -> str | None:
    if price.per_gpu_hour is None:
        return "a usage price needs per_gpu_hour"
    return None


def hourly(price, period_start: int) -> Fraction:
    return Fraction(price.per_gpu_hour)


def charge(price, m: Metered) -> tuple[Fraction, Fraction]:
    rate = Fraction(price.per_gpu_hour)
    if price.weight == "busy":
        return rate * hours(m.busy_priced_ms), Fraction(0)
    return rate * hours(m.busy_weighted_ms + m.idle_weighted_ms), rate * hours(m.idle_weighted_ms)
