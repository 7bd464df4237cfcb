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
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from gpufleet.contracts import tables

LEDGER, ADJUSTMENTS = tables.BILLING_LEDGER, tables.BILLING_ADJUSTMENTS
LEDGER_COLUMNS = LEDGER.columns
ADJUSTMENT_ONLY = tuple(c for c in ADJUSTMENTS.columns if c not in LEDGER_COLUMNS)
LATE, RERATE = "late usage", "rerate"


def _seconds(s: float) -> Decimal:
    return Decimal(str(s))       # the event's seconds have at most 3 decimals: exact in Decimal(18, 3)


def row_of(e: dict) -> tuple:
    """A ``gpufleet.billing.v1`` event as a ledger row: money and seconds as Decimal, never floats."""
    return LEDGER.row(
        gpu_uuid=e["gpu_uuid"], tenant=e["tenant"], job=e["job"] or "", period_start=e["period_start"],
        period_end=e["period_end"], node=e.get("node") or "", pool=e["pool"] or "", gpu_index=e.get("gpu_index") or 0,
        gpu_model=e["gpu_model"] or "", mig_profile=e.get("mig_profile") or "",
        gpu_share=Decimal(e.get("gpu_share") or "1"),
        team=e.get("team") or "", billing_mode=e.get("billing_mode") or "", currency=e["currency"],
        samples=e.get("samples") or 0, interval_s=e.get("interval_s") or 0.0, rented_s=_seconds(e["rented_s"]),
        busy_s=_seconds(e["busy_s"]), idle_s=_seconds(e["idle_s"]), estimated_s=_seconds(e.get("estimated_s") or 0),
        unbilled_s=_seconds(e.get("unbilled_s") or 0), minimum_topup_s=_seconds(e.get("minimum_topup_s") or 0),
        util_pct=e.get("util_pct"), busy_util_pct=e.get("busy_util_pct"),
        price_per_gpu_hour=Decimal(e["price_per_gpu_hour"]), amount=Decimal(e["amount"]),
        idle_amount=Decimal(e["idle_amount"]),
        mode_amounts={k: Decimal(v) for k, v in (e.get("amounts_by_mode") or {}).items()},
        data_quality=e.get("data_quality") or "", underused_s=_seconds(e.get("underused_s") or 0),
        unused_amount=Decimal(e.get("unused_amount") or "0"), unsold_amount=Decimal(e.get("unsold_amount") or "0"),
        price_version=e.get("price_version") or "", busy_weighted_s=Decimal(e.get("busy_weighted_s") or 0),
        idle_weighted_s=Decimal(e.get("idle_weighted_s") or 0),
        estimated_idle_s=_seconds(e.get("estimated_idle_s") or 0))


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


@dataclass(frozen=True)
class Change:
    """What an adjustment adds to a ledger row: its kind (late usage, a re-rating) and id, the month it is
    invoiced in, when (Unix seconds), why, and the change of the amount and of its idle part."""

    kind: str
    adjustment_id: str
    invoice_month: dt.date
    at: float
    reason: str
    amount_change: Decimal
    idle_amount_change: Decimal


def adjustment(row: dict, change: Change) -> tuple:
    """A ``billing_adjustments`` row: the ledger row ``row`` (by column name) with what the adjustment adds."""
    extra = {**vars(change), "at": round(change.at * 1000)}
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
                f"FROM {store.table(LEDGER.name)} FINAL WHERE {where}",
                f"SELECT gpu_uuid, tenant, job, toUnixTimestamp(period_start), argMax(price_version, at), "
                f"argMax(amount, at) FROM {store.table('billing_adjustments')} FINAL WHERE {where} "
                f"GROUP BY gpu_uuid, tenant, job, period_start"):
        for g, t, j, p, version, amount in store.query(sql, params):
            found[(g, t, j, int(p))] = (version, amount)
    wanted = set(keys)
    return {k: v for k, v in found.items() if k in wanted}


def key_of(row: tuple) -> tuple:
    """The ledger key of a ledger row: gpu_uuid, tenant, job, period start (Unix seconds)."""
    r = LEDGER.record(*row)
    return (r.gpu_uuid, r.tenant, r.job, unix(r.period_start))


def priced_differently(stored: dict[tuple, tuple[str, Decimal]], rows: Sequence[tuple]) -> list[tuple]:
    """The rows whose key is stored with another price version or amount."""
    out = []
    for r in rows:
        found = stored.get(key_of(r))
        if found is None:
            continue
        version, amount = found
        row = LEDGER.record(*r)
        if Decimal(amount) != Decimal(row.amount) or (version and version != (row.price_version or "")):
            out.append(r)
    return out


def as_dict(row: tuple) -> dict:
    return LEDGER.record(*row)._asdict()
