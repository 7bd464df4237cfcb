"""Spot and off-peak: a price per GPU-hour with a discount by hour of day (UTC).

``hour_discounts`` maps an hour (``"3"``) or a range of hours (``"0-6"``, both ends included) to the share taken
off (``"0.40"`` = 40 % off). Billing periods never span two hours, so each period has one discount. Every
rented second is billed, idle ones too.
"""
from __future__ import annotations

from fractions import Fraction

from .metered import Metered, hours

NAME = "spot"
WORDS = "spot / off-peak"


def hour_range(key: str) -> range:
    """``"7"`` or ``"0-6"`` as the UTC hours it names; ValueError when it names none."""
    lo, _, hi = key.partition("-")
    first, last = int(lo), int(hi) if hi else int(lo)
    if not 0 <= first <= last <= 23:
        raise ValueError(f"hour_discounts: {key!r} is not an hour 0-23 or a range such as 0-6")
    return range(first, last + 1)


def discount(price, period_start: int) -> Fraction:
    hour = period_start % 86_400 // 3_600
    for key, off in price.hour_discounts.items():
        if hour in hour_range(key):
            return Fraction(off)
    return Fraction(0)


def check(price) -> str | None:
    if price.per_gpu_hour is None:
        return "a spot price needs per_gpu_hour"
    seen: set[int] = set()
    for key, off in price.hour_discounts.items():
        try:
            hours_ = set(hour_range(key))
        except ValueError as err:
            return str(err)
        if hours_ & seen:
            return f"hour_discounts: {key!r} overlaps another range"
        seen |= hours_
        if not 0 <= off <= 1:
            return f"hour_discounts: {key!r}: {off} is not a share between 0 and 1"
    return None


def hourly(price, period_start: int) -> Fraction:
    return Fraction(price.per_gpu_hour) * (1 - discount(price, period_start))


def charge(price, m: Metered) -> tuple[Fraction, Fraction]:
    rate = hourly(price, m.period_start)
    return rate * hours(m.rented_ms), rate * hours(m.idle_priced_ms)
