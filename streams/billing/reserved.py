"""Reserved: a price per GPU and calendar month, for GPUs held by the month.

The monthly price is spread over the seconds of its month (a 31-day month makes a cheaper hour than a 28-day
one) and every rented second is billed, idle ones too.
"""
from __future__ import annotations

import calendar
import datetime as dt
from fractions import Fraction

from .metered import Metered

NAME = "reserved"
WORDS = "reserved, monthly"


def check(price) -> str | None:
    if price.per_gpu_month is None:
        return "a reserved price needs per_gpu_month"
    return None


def month_ms(period_start: int) -> int:
    day = dt.datetime.fromtimestamp(period_start, dt.UTC)
    return calendar.monthrange(day.year, day.month)[1] * 86_400_000


def hourly(price, period_start: int) -> Fraction:
    return Fraction(price.per_gpu_month) * Fraction(3_600_000, month_ms(period_start))


def charge(price, m: Metered) -> tuple[Fraction, Fraction]:
    monthly, month = Fraction(price.per_gpu_month), month_ms(m.period_start)
    return monthly * Fraction(m.rented_ms, month), monthly * Fraction(m.idle_priced_ms, month)
