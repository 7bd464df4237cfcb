"""The billing ledger's closed months and adjustments, as every writer of the ledger sees them.

A closed month (``billing_months``, written by ``gpufleet bill close``) is frozen: its ledger rows never change
again. A billing record of a closed month that the ledger does not hold yet (data that arrived after the close)
goes to ``billing_adjustments`` as late usage, invoiced in the first open month after it; a record whose key the
ledger holds is dropped as every repeat is. A record priced differently from the row in force for its key (the
ledger's, or the latest adjustment's) is counted, so that a replay at other prices says so instead of silently
keeping the old amounts (``gpufleet bill rerate`` prices stored rows again).
"""
from __future__ import annotations

import calendar
import datetime as dt
import time
from collections.abc import Sequence
from decimal import Decimal

from gpufleet.contracts import tables

LEDGER_COLUMNS = tables.BILLING_LEDGER.columns
ADJUSTMENTS = tables.BILLING_ADJUSTMENTS
ADJUSTMENT_ONLY = tuple(c for c in ADJUSTMENTS.columns if c not in LEDGER_COLUMNS)
LATE, RERATE = "late usage", "rerate"
_AT = {c: i for i, c in enumerate(LEDGER_COLUMNS)}


def unix(t) -> int:
    """Unix seconds of a time: seconds already, or a datetime (one without a zone is UTC, as the store's are)."""
    if isinstance(t, dt.datetime):
        return calendar.timegm(t.utctimetuple()) if t.tzinfo else calendar.timegm(t.timetuple())
    return int(t)


def month_of(period_start) -> dt.date:
    """The month (its first day) of a period start: Unix seconds or a datetime."""
    t = dt.datetime.fromtimestamp(unix(period_start), dt.UTC)
    return dt.date(t.year, t.month, 1)


def next_month(month: dt.date) -> dt.date:
    return dt.date(month.year + month.month // 12, month.month % 12 + 1, 1)


def invoice_month(month: dt.date, closed: set[dt.date]) -> dt.date:
    """The first open month after ``month``: where a change to the closed ``month`` is invoiced."""
    m = next_month(month)
    while m in closed:
        m = next_month(m)
    return m


def closed_months(store) -> set[dt.date]:
    return {m for (m,) in store.query(f"SELECT month FROM {store.table('billing_months')} FINAL")}


def adjustment(row: dict, kind: str, adjustment_id: str, invoice: dt.date, reason: str, amount_change: Decimal,
               idle_amount_change: Decimal, at: float | None = None) -> tuple:
    """A ``billing_adjustments`` row: the ledger row ``row`` (by column name) with what the adjustment adds."""
    extra = {"adjustment_id": adjustment_id, "kind": kind, "invoice_month": invoice,
             "at": round((time.time() if at is None else at) * 1000), "reason": reason,
             "amount_change": amount_change, "idle_amount_change": idle_amount_change}
    return tuple(extra[c] if c in extra else row[c] for c in ADJUSTMENTS.columns)


def in_force(store, keys: Sequence[tuple]) -> dict[tuple, tuple[str, Decimal]]:
    """The price version and amount in force for each key (gpu_uuid, tenant, job, period start in Unix seconds)
    the store holds: the latest adjustment's, else the ledger row's."""
    if not keys:
        return {}
    params = {"g": sorted({k[0] for k in keys}), "lo": min(k[3] for k in keys), "hi": max(k[3] for k in keys)}
    where = "gpu_uuid IN %(g)s AND toUnixTimestamp(period_start) BETWEEN %(lo)s AND %(hi)s"
    found: dict[tuple, tuple[str, Decimal]] = {}
    for sql in (f"SELECT gpu_uuid, tenant, job, toUnixTimestamp(period_start), price_version, amount "
                f"FROM {store.table('billing_ledger')} FINAL WHERE {where}",
                f"SELECT gpu_uuid, tenant, job, toUnixTimestamp(period_start), argMax(price_version, at), "
                f"argMax(amount, at) FROM {store.table('billing_adjustments')} FINAL WHERE {where} "
                f"GROUP BY gpu_uuid, tenant, job, period_start"):
        for g, t, j, p, version, amount in store.query(sql, params):
            found[(g, t, j, int(p))] = (version, amount)
    wanted = set(keys)
    return {k: v for k, v in found.items() if k in wanted}


def key_of(row: tuple) -> tuple:
    """The ledger key of a ``LEDGER_COLUMNS`` row: gpu_uuid, tenant, job, period start (Unix seconds)."""
    return (row[0], row[1], row[2], unix(row[_AT["period_start"]]))


def priced_differently(stored: dict[tuple, tuple[str, Decimal]], rows: Sequence[tuple]) -> list[tuple]:
    """The rows whose key is stored with another price version or amount."""
    out = []
    for r in rows:
        found = stored.get(key_of(r))
        if found is None:
            continue
        version, amount = found
        if Decimal(amount) != Decimal(r[_AT["amount"]]) or (version and version != (r[_AT["price_version"]] or "")):
            out.append(r)
    return out


def as_dict(row: tuple) -> dict:
    return dict(zip(LEDGER_COLUMNS, row))
