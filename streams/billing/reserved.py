"""Reserved: a price per GPU and calendar month, for GPUs held by the month.

The monthly price is spread over the seconds of its month (a 31-day month makes a cheaper hour than a 28-day
one) and every rented second is billed, idle ones too.
"""
from __future__ import annotations

import calendar
import datetime as dt
from decimal import Decimal

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


def hourly(price, period_start: int) -> Decimal:
    return price.per_gpu_month * 3_600_000 / month_ms(period_start)


def charge(price, m: Metered) -> tuple[Decimal, Decimal]:
    month = month_ms(m.period_start)
    return price.per_gpu_month * m.rented_ms / month, price.per_gpu_month * m.idle_ms / month
