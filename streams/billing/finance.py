"""Finance over the ledger: re-rating with its audit trail, month close and adjustments, commitments on the
invoice, unsold capacity at list prices. ``gpufleet bill rerate`` and ``gpufleet bill close`` write; everything
else here reads.

- **Re-rating** (:func:`rerate`) prices the stored rows of a time range again under the current price book. A
  row whose money or price version changes is written again (the ledger is a ReplacingMergeTree on its key: the
  row written last is the one in force) with ``rerated_at``, and recorded in ``billing_rerate_audit`` with its
  old and new amounts and versions, when and why. A row of a closed month is not changed: the change goes to
  ``billing_adjustments``, invoiced in the first open month after it. Running it again changes nothing.
- **Month close** (:func:`close`) freezes a month that is over: ``billing_months`` records it, and the month's
  commitments are written to ``billing_commitment_ledger`` as they stand. From then on late records and
  re-ratings of the month become adjustments (streams/billing/ledger.py).
"""
from __future__ import annotations

import datetime as dt
import time
import uuid
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction

from gpufleet.contracts import tables

from . import ledger
from .commitments import Month, allocate, month_seconds
from .prices import Tariff, money
from .rerate import MONEY_FIELDS, differs, reprice

LEDGER = tables.BILLING_LEDGER

AUDIT, COMMITMENT_LEDGER, MONTHS = tables.BILLING_RERATE_AUDIT, tables.BILLING_COMMITMENT_LEDGER, tables.BILLING_MONTHS
AUDIT_COLUMNS, COMMITMENT_COLUMNS = AUDIT.columns, COMMITMENT_LEDGER.columns
D6 = Decimal("0.000001")


def _dec(f: Fraction) -> Decimal:
    return Decimal(money(f))


def _rows(store, sql: str, params: dict) -> list[dict]:
    names, rows = store.select(sql, params)
    return [dict(zip(names, r)) for r in rows]


def in_force_rows(store, start: dt.datetime, end: dt.datetime, tenant: str | None = None) -> list[dict]:
    """Every row in force for a period start in [start, end): the ledger's, or the latest adjustment's for its key
    (late usage of a closed month included), as dicts by ledger column, each with ``_source`` (``ledger`` or
    ``adjustment``) and ``_month_closed``."""
    where = "period_start >= %(start)s AND period_start < %(end)s" + (" AND tenant = %(tenant)s" if tenant else "")
    params = {"start": start, "end": end, "tenant": tenant}
    cols = ", ".join(ledger.LEDGER_COLUMNS)
    by_key: dict[tuple, dict] = {}
    for r in _rows(store, f"SELECT {cols} FROM {LEDGER.name} FINAL WHERE {where}", params):
        r["_source"] = "ledger"
        by_key[ledger.key_of(tuple(r[c] for c in ledger.LEDGER_COLUMNS))] = r
    latest = (f"SELECT {', '.join(f'argMax({c}, at) AS {c}' for c in ledger.LEDGER_COLUMNS[4:])}, "
              f"gpu_uuid, tenant, job, period_start FROM billing_adjustments FINAL WHERE {where} "
              "GROUP BY gpu_uuid, tenant, job, period_start")
    for r in _rows(store, latest, params):
        r["_source"] = "adjustment"
        by_key[ledger.key_of(tuple(r[c] for c in ledger.LEDGER_COLUMNS))] = r
    closed = ledger.closed_months(store)
    for r in by_key.values():
        r["_month_closed"] = ledger.month_of(r["period_start"]) in closed
    return [by_key[k] for k in sorted(by_key)]


def rerate(store, tariff: Tariff, start: dt.datetime, end: dt.datetime, reason: str,
           progress=None, write: bool = True) -> dict:
    """Price the rows of [start, end) again under ``tariff``; returns what changed:
    ``{"rerate_id", "rows", "changed", "ledger", "adjustments", "by_tenant": {(tenant, currency): change}}``."""
    rerate_id = f"rr-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    now = time.time()
    rows = in_force_rows(store, start, end)
    closed = ledger.closed_months(store)
    audit, fresh, adjustments = [], [], []
    by_tenant: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for i, row in enumerate(rows):
        if progress is not None:
            progress(i + 1)
        new = reprice(tariff, row)
        if not differs(row, new):
            continue
        updated = {**row, **new}
        change = new["amount"] - Decimal(row["amount"])
        by_tenant[(row["tenant"], row["currency"])] += change
        to = "adjustment" if row["_month_closed"] else "ledger"
        audit.append((rerate_id, round(now * 1000), reason, row["gpu_uuid"], row["tenant"], row["job"],
                      row["period_start"], row["pool"], row["currency"], row.get("price_version") or "",
                      new["price_version"], row["billing_mode"], new["billing_mode"], Decimal(row["amount"]),
                      new["amount"], Decimal(row["idle_amount"]), new["idle_amount"], to))
        if to == "ledger":
            fresh.append((*(updated[c] for c in ledger.LEDGER_COLUMNS), round(now * 1000)))
        else:
            adjustments.append(ledger.adjustment(updated, ledger.Change(
                ledger.RERATE, rerate_id, ledger.invoice_month(ledger.month_of(row["period_start"]), closed), now,
                reason, change, new["idle_amount"] - Decimal(row["idle_amount"]))))
    if write:
        _write_rerate(store, audit, fresh, adjustments)
    return {"rerate_id": rerate_id, "rows": len(rows), "changed": len(audit), "ledger": len(fresh),
            "adjustments": len(adjustments), "by_tenant": dict(by_tenant)}


def _write_rerate(store, audit: list, fresh: list, adjustments: list) -> None:
    # the audit first: a re-rating cut short leaves an audit row too many, never a change without one
    store.write(AUDIT.name, AUDIT_COLUMNS, audit, dedup=False)
    store.write(LEDGER.name, (*ledger.LEDGER_COLUMNS, "rerated_at"), fresh, dedup=False)
    store.write(ledger.ADJUSTMENTS.name, ledger.ADJUSTMENTS.columns, adjustments, dedup=False)


def usage_by_period(store, month: dt.date, tenant: str | None = None) -> dict[tuple[str, str], dict]:
    """Per tenant and currency: (pool, period start) -> (GPU-seconds rented, amount, on-demand amount), from the
    rows in force in ``month``."""
    start = dt.datetime(month.year, month.month, 1, tzinfo=dt.UTC)
    end = dt.datetime.combine(ledger.next_month(month), dt.time(), dt.UTC)
    out: dict[tuple[str, str], dict] = defaultdict(dict)
    for r in in_force_rows(store, start, end, tenant):
        key = (r["pool"], ledger.unix(r["period_start"]))
        used = Fraction(Decimal(r["rented_s"])) * Fraction(Decimal(r["gpu_share"] or 1))
        od = r["mode_amounts"].get("on_demand", r["amount"])
        was = out[(r["tenant"], r["currency"])].get(key, (Fraction(0), Fraction(0), Fraction(0)))
        out[(r["tenant"], r["currency"])][key] = (was[0] + used, was[1] + Fraction(Decimal(r["amount"])),
                                                 was[2] + Fraction(Decimal(od)))
    return out


def commitment_months(store, tariff: Tariff, month: dt.date, tenant: str | None = None) -> dict:
    """Per (tenant, currency): the commitments' months (:class:`Month`), from the commitment ledger where the
    month is closed, else computed from the rows in force and ``billing.commitments``."""
    if month in ledger.closed_months(store):
        found: dict[tuple[str, str], list[dict]] = defaultdict(list)
        where = "month = %(m)s" + (" AND tenant = %(t)s" if tenant else "")
        for r in _rows(store, f"SELECT * FROM billing_commitment_ledger FINAL WHERE {where} ORDER BY commitment",
                       {"m": month, "t": tenant}):
            found[(r["tenant"], r["currency"])].append(r)
        return dict(found)
    usage = usage_by_period(store, month, tenant)
    out: dict[tuple[str, str], list[dict]] = {}
    period_s = tariff.config.period_s
    tenants = {c.tenant for c in tariff.config.commitments if c.active(month) and tenant in (None, c.tenant)}
    for t in sorted(tenants):
        keys = [k for k in usage if k[0] == t] or [(t, tariff.config.currency)]
        for key in keys:
            mine = {k: (v[0], v[1]) for k, v in usage.get(key, {}).items()}
            months = allocate(tariff.config.commitments, t, month, period_s, mine)
            out[key] = [commitment_row(m, key[1]) for m in months]
    return out


def commitment_row(m: Month, currency: str) -> dict:
    c = m.commitment
    return {"month": m.month, "commitment": c.name, "tenant": c.tenant, "pool": c.pool, "currency": currency,
            "gpus": c.gpus, "committed_hours": _dec(m.committed_s / 3600), "used_hours": _dec(m.used_s / 3600),
            "billed_amount": _dec(m.fee), "amortized_amount": _dec(m.amortized),
            "unused_amount": _dec(m.fee) - _dec(m.amortized),
            "covered_amount": _dec(m.covered)}


def adjustments_invoiced(store, month: dt.date, tenant: str | None = None) -> list[dict]:
    """The adjustments invoiced in ``month`` (changes to closed months), per tenant, currency, month of use and
    kind, with their amount."""
    where = "invoice_month = %(m)s AND amount_change != 0" + (" AND tenant = %(t)s" if tenant else "")
    return _rows(store, f"""
        SELECT tenant, currency, toStartOfMonth(period_start) AS usage_month, kind, count() AS rows,
               sum(amount_change) AS amount
        FROM billing_adjustments FINAL WHERE {where}
        GROUP BY tenant, currency, usage_month, kind ORDER BY tenant, currency, usage_month, kind""",
                 {"m": month, "t": tenant})


def close(store, tariff: Tariff, month: dt.date, reason: str, now: float | None = None) -> dict:
    """Close ``month`` (over by ``now``): record it and its commitments' months. Closing a closed month again
    changes nothing. Returns ``{"month", "already", "commitments", "rows"}``."""
    now = time.time() if now is None else now
    end = dt.datetime.combine(ledger.next_month(month), dt.time(), dt.UTC)
    if end.timestamp() > now:
        raise ValueError(f"{month:%Y-%m} is not over yet: it ends {end:%Y-%m-%d %H:%M} UTC")
    if month in ledger.closed_months(store):
        return {"month": month, "already": True, "commitments": 0, "rows": None}
    rows = store.query(f"SELECT count() FROM {LEDGER.name} FINAL WHERE toStartOfMonth(period_start) = %(m)s",
                       {"m": month})[0][0]
    commitments = [r for found in commitment_months(store, tariff, month).values() for r in found]
    at = round(now * 1000)
    store.write(COMMITMENT_LEDGER.name, COMMITMENT_COLUMNS,
                [tuple({**r, "closed_at": at}[c] for c in COMMITMENT_COLUMNS) for r in commitments])
    store.write(MONTHS.name, MONTHS.columns, [MONTHS.row(month=month, closed_at=at, reason=reason)])
    return {"month": month, "already": False, "commitments": len(commitments), "rows": rows}


def capacity(store, tariff: Tariff, month: dt.date, pool: str | None = None) -> list[dict]:
    """Per pool and hour of ``month``: installed, rented and unsold GPU-hours (billing_capacity_hourly), the
    unsold ones priced at list (the pool's on-demand price then)."""
    where = "toStartOfMonth(hour) = %(m)s" + (" AND pool = %(p)s" if pool else "")
    out = []
    for r in _rows(store, f"SELECT * FROM billing_capacity_hourly WHERE {where} ORDER BY pool, hour",
                   {"m": month, "p": pool}):
        price = tariff.price("on_demand", r["pool"] or None, None, ledger.unix(r["hour"]))
        assert price is not None and price.per_gpu_hour is not None      # the table has a catch-all entry
        r["list_price"] = price.per_gpu_hour
        r["unsold_amount"] = (Decimal(r["unsold_gpu_hours"]) * price.per_gpu_hour).quantize(D6)
        out.append(r)
    return out


def month_periods(month: dt.date, period_s: int) -> int:
    return month_seconds(month) // period_s


__all__ = ["MONEY_FIELDS", "adjustments_invoiced", "capacity", "close", "commitment_months", "in_force_rows",
           "rerate", "usage_by_period"]
