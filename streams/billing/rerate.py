"""Pricing a stored ledger row again under the current price book (``gpufleet bill rerate``).

A ledger row keeps every quantity its money depends on: rented, busy, idle and top-up seconds (milliseconds
exactly), the utilization-weighted busy and idle seconds usage billing prices (exact, 8 decimals), the time
billed across gaps between idle samples, the GPU model and MIG profile (its share), the tenant and the period.
:func:`reprice` rebuilds the metered quantities from them and bills them with the tariff exactly as metering
does, so a re-rated row equals the row a fresh replay under the new prices writes.

Rows written before migration 0011 carry no weighted seconds (``price_version`` is empty): their busy and idle
time is weighted by their mean utilizations (``busy_util_pct``, ``util_pct``) instead, an approximation only
usage billing by utilization notices.
"""
from __future__ import annotations

import calendar
import datetime as dt
from decimal import Decimal
from fractions import Fraction

from .metered import Metered
from .prices import Tariff, money

MONEY_FIELDS = ("billing_mode", "price_per_gpu_hour", "amount", "idle_amount", "mode_amounts", "underused_s",
                "unused_amount", "unsold_amount", "price_version")


def unix(t) -> int:
    """Unix seconds of a time: seconds already, or a datetime (one without a zone is UTC, as the store's are)."""
    if isinstance(t, dt.datetime):
        return calendar.timegm(t.utctimetuple()) if t.tzinfo else calendar.timegm(t.timetuple())
    return int(t)


def _ms(seconds) -> int:
    return int(Decimal(seconds) * 1000)


def metered_of(row: dict) -> Metered:
    """The metered quantities of a ledger row (a dict by column name, as the store returns it)."""
    start, end = unix(row["period_start"]), unix(row["period_end"])
    rented, busy, idle = _ms(row["rented_s"]), _ms(row["busy_s"]), _ms(row["idle_s"])
    if row.get("price_version"):
        busy_w = Fraction(Decimal(row["busy_weighted_s"])) * 1000
        idle_w = Fraction(Decimal(row["idle_weighted_s"])) * 1000
    else:                                                   # a row from before migration 0011
        busy_util = row.get("busy_util_pct")
        busy_w = Fraction(busy) * (Fraction(busy_util) / 100 if busy_util is not None else 1)
        util = row.get("util_pct")
        total = Fraction(rented) * Fraction(util) / 100 if util is not None else Fraction(rented)
        idle_w = max(total - busy_w, Fraction(0)) if idle else Fraction(0)
    return Metered(period_start=start, period_s=end - start, rented_ms=rented, busy_ms=busy, idle_ms=idle,
                   topup_ms=_ms(row["minimum_topup_s"]), busy_weighted_ms=busy_w, idle_weighted_ms=idle_w,
                   gap_idle_ms=_ms(row.get("estimated_idle_s") or 0))


def reprice(tariff: Tariff, row: dict) -> dict:
    """The money columns of a ledger row priced under ``tariff``: ``MONEY_FIELDS``, as the ledger holds them
    (Decimal amounts, a map of mode to amount, seconds as Decimal)."""
    m = metered_of(row)
    model, profile = row.get("gpu_model") or None, row.get("mig_profile") or None
    share = tariff.share(model, profile)
    pool = row.get("pool") or None
    bill = tariff.bill(m, row["tenant"], pool, model, share)
    return {"billing_mode": bill["billing_mode"], "price_per_gpu_hour": Decimal(bill["price_per_gpu_hour"]),
            "amount": Decimal(bill["amount"]), "idle_amount": Decimal(bill["idle_amount"]),
            "mode_amounts": {k: Decimal(v) for k, v in bill["amounts_by_mode"].items()},
            "underused_s": Decimal(bill["underused_ms"]) / 1000, "unused_amount": Decimal(bill["unused_amount"]),
            "unsold_amount": Decimal(bill["unsold_amount"]),
            "price_version": tariff.version(row["tenant"], pool, model, m.period_start)}


def differs(row: dict, new: dict) -> bool:
    """Whether the row's money or version is not what ``new`` (from :func:`reprice`) says."""
    for k in MONEY_FIELDS:
        old, now = row.get(k), new[k]
        if k == "mode_amounts":
            if {a: Decimal(b) for a, b in (old or {}).items()} != now:
                return True
        elif k in ("billing_mode", "price_version"):
            if (old or "") != now:
                return True
        elif Decimal(old if old is not None else 0) != now:
            return True
    return False


__all__ = ["MONEY_FIELDS", "differs", "metered_of", "money", "reprice"]
