"""On demand: a price per GPU-hour, billed by the second, with a minimum per rental.

Every rented second is billed, idle ones too (the tenant holds the GPU). A rental (a GPU held by one tenant
without a break) shorter than ``minimum_s`` is billed for ``minimum_s``: the difference is added to the
record of the period in which the rental ended.
"""
from __future__ import annotations

from fractions import Fraction

from .metered import Metered, hours

NAME = "on_demand"
WORDS = "on-demand, per second"


def check(price) -> str | None:
    if price.per_gpu_hour is None:
        return "an on_demand price needs per_gpu_hour"
    return None


def hourly(price, period_start: int) -> Fraction:
    return Fraction(price.per_gpu_hour)


def charge(price, m: Metered) -> tuple[Fraction, Fraction]:
    """Amount and idle amount for one whole GPU, exact (rounded later, once)."""
    rate = Fraction(price.per_gpu_hour)
    return rate * hours(m.rented_ms + m.topup_ms), rate * hours(m.idle_priced_ms)
