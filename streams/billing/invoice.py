"""``gpufleet bill``: a month's invoice-like summary per tenant, read from the billing ledger and its views.

Per tenant (and currency): one line per pool and GPU model with rented, busy and idle hours, the idle
time's cost, the hours billed across telemetry gaps, and the amount; the total; waste beyond idle (rentals
busy at low utilization, over-provisioned multi-GPU jobs); and, on request, what the month would have cost
in each billing mode the price table prices. Money stays Decimal from the store to the output.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from decimal import Decimal

from gpufleet.contracts import tables

from .prices import money

MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
HOUR = Decimal(3600)
MILLI = Decimal("0.001")

LINES = """
SELECT tenant, currency, pool, gpu_model, uniqExact(gpu_uuid) AS gpus, sum(rented_s) AS rented_s,
       sum(busy_s) AS busy_s, sum(idle_s) AS idle_s, sum(idle_amount) AS idle_amount,
       sum(estimated_s) AS estimated_s, sum(amount) AS amount
FROM {ledger} FINAL
WHERE toStartOfMonth(period_start) = %(month)s {tenant}
GROUP BY tenant, currency, pool, gpu_model
ORDER BY tenant, currency, pool, gpu_model"""

LOW = """
SELECT tenant, currency, count() AS rentals, sum(low_busy_s) AS busy_s, sum(unused_amount) AS unused_amount,
       sum(unsold_amount) AS unsold_amount
FROM billing_low_utilization WHERE month = %(month)s {tenant}
GROUP BY tenant, currency"""

OVER = """
SELECT tenant, currency, job, gpus, idle_gpus, idle_gpu_hours, idle_gpu_amount
FROM billing_overprovisioned WHERE month = %(month)s {tenant}
ORDER BY tenant, currency, idle_gpu_amount DESC, job"""

MODES = """
SELECT tenant, currency, mode, amount, billed_amount, difference, priced_hours, rented_hours
FROM billing_mode_comparison WHERE month = %(month)s {tenant}
ORDER BY tenant, currency, amount, mode"""


def month_start(text: str) -> dt.date:
    """``YYYY-MM`` as the first day of that month; ValueError otherwise."""
    m = MONTH.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a month as YYYY-MM")
    return dt.date(int(m.group(1)), int(m.group(2)), 1)


def hours(seconds: Decimal) -> Decimal:
    return (Decimal(seconds) / HOUR).quantize(MILLI)


def _money(v) -> str:
    return str(_cents(v))


def _cents(v) -> Decimal:
    return Decimal(v).quantize(Decimal("0.000001"))


def _invoice_of(invoices: dict, tenant: str, currency: str) -> dict:
    return invoices.setdefault((tenant, currency), {
        "tenant": tenant, "currency": currency, "lines": [],
        "total": {k: Decimal(0) for k in ("rented_s", "busy_s", "idle_s", "idle_amount", "estimated_s", "amount")},
        "waste": {"low_utilization": None, "overprovisioned": []}, "commitments": [], "adjustments": []})


def invoice(store, month: str, tenant: str | None = None, compare_modes: bool = False, tariff=None) -> dict:
    """The month's invoices: ``{"month": ..., "invoices": [...]}``, one per tenant and currency: the usage lines
    (the ledger's amounts in the tenant's mode), the commitments (billed whether used or not; the usage they cover
    comes off), the adjustments to closed months invoiced this month, and what is due."""
    from . import finance
    from .prices import Tariff
    tariff = tariff or Tariff()
    first = month_start(month)
    params: dict = {"month": first}
    where = ""
    if tenant is not None:
        params["tenant"] = tenant
        where = "AND tenant = %(tenant)s"
    invoices: dict[tuple[str, str], dict] = {}
    names, rows = store.select(LINES.format(tenant=where, ledger=tables.BILLING_LEDGER.name), params)
    for r in (dict(zip(names, row)) for row in rows):
        inv = _invoice_of(invoices, r["tenant"], r["currency"])
        inv["lines"].append({"pool": r["pool"], "gpu_model": r["gpu_model"], "gpus": r["gpus"],
                             "rented_hours": hours(r["rented_s"]), "busy_hours": hours(r["busy_s"]),
                             "idle_hours": hours(r["idle_s"]), "idle_amount": r["idle_amount"],
                             "estimated_hours": hours(r["estimated_s"]), "amount": r["amount"]})
        for k in inv["total"]:
            inv["total"][k] += r[k]
    names, rows = store.select(LOW.format(tenant=where), params)
    for r in (dict(zip(names, row)) for row in rows):
        if (r["tenant"], r["currency"]) in invoices:
            invoices[(r["tenant"], r["currency"])]["waste"]["low_utilization"] = {
                "rentals": r["rentals"], "busy_hours": hours(r["busy_s"]), "unused_amount": r["unused_amount"],
                "unsold_amount": r["unsold_amount"]}
    names, rows = store.select(OVER.format(tenant=where), params)
    for r in (dict(zip(names, row)) for row in rows):
        if (r["tenant"], r["currency"]) in invoices:
            invoices[(r["tenant"], r["currency"])]["waste"]["overprovisioned"].append(
                {k: r[k] for k in ("job", "gpus", "idle_gpus", "idle_gpu_hours", "idle_gpu_amount")})
    for (t, cur), found in finance.commitment_months(store, tariff, first, tenant).items():
        _invoice_of(invoices, t, cur)["commitments"] = [
            {k: c[k] for k in ("commitment", "pool", "gpus", "committed_hours", "used_hours", "billed_amount",
                               "amortized_amount", "unused_amount", "covered_amount")} for c in found]
    for a in finance.adjustments_invoiced(store, first, tenant):
        _invoice_of(invoices, a["tenant"], a["currency"])["adjustments"].append(
            {"usage_month": a["usage_month"].strftime("%Y-%m"), "kind": a["kind"], "rows": a["rows"],
             "amount": a["amount"]})
    if compare_modes:
        _compare(store, tariff, first, where, params, invoices, tenant)
    for inv in invoices.values():
        t = inv["total"]
        inv["total"] = {"rented_hours": hours(t["rented_s"]), "busy_hours": hours(t["busy_s"]),
                        "idle_hours": hours(t["idle_s"]), "idle_amount": t["idle_amount"],
                        "estimated_hours": hours(t["estimated_s"]), "amount": t["amount"]}
        covered = sum((c["covered_amount"] for c in inv["commitments"]), Decimal(0))
        fees = sum((c["billed_amount"] for c in inv["commitments"]), Decimal(0))
        adjusted = sum((a["amount"] for a in inv["adjustments"]), Decimal(0))
        inv["due"] = {"usage": t["amount"], "covered_by_commitments": -covered, "commitments": fees,
                      "adjustments": adjusted, "total": t["amount"] - covered + fees + adjusted}
    return {"month": month, "invoices": [invoices[k] for k in sorted(invoices)]}


def _compare(store, tariff, first: dt.date, where: str, params: dict, invoices: dict, tenant: str | None) -> None:
    """Each invoice's ``modes``: what the month would have cost on demand, with the commitment size that costs
    least for the usage seen (at the price table's reserved price per GPU-month), on spot with the expected
    interruptions (billing.spot_interruption_pct) and billed by use; the cheapest complete one marked."""
    from fractions import Fraction

    from . import finance
    from .commitments import best_size
    p = Fraction(tariff.config.spot_interruption_pct) / 100
    names, rows = store.select(MODES.format(tenant=where), params)
    usage = finance.usage_by_period(store, first, tenant)
    at = dt.datetime.combine(first, dt.time(), dt.UTC).timestamp()
    for r in (dict(zip(names, row)) for row in rows):
        found = invoices.get((r["tenant"], r["currency"]))
        if found is None or r["mode"] == "reserved":        # reserved (a monthly rate, no commitment): see below
            continue
        m = {k: r[k] for k in ("mode", "amount", "billed_amount", "difference", "priced_hours", "rented_hours")}
        m["detail"] = ""
        if r["mode"] == "spot":
            m["amount"] = Decimal(money(Fraction(r["amount"]) / (1 - p)))
            m["difference"] = m["amount"] - r["billed_amount"]
            m["detail"] = (f"interruptible: priced with {tariff.config.spot_interruption_pct:g} % of its GPU-hours "
                           "expected to be interrupted and run again (billing.spot_interruption_pct)")
        found.setdefault("modes", []).append(m)
    for (t, cur), by_period in usage.items():
        found = invoices.get((t, cur))
        if found is None:
            continue
        billed = found["total"]["amount"]
        cost, priced, sizes = Fraction(0), Fraction(0), []
        for pool in sorted({k[0] for k in by_period}):
            mine = {k[1]: (v[0], v[2]) for k, v in by_period.items() if k[0] == pool}
            entry = tariff.price("reserved", pool or None, None, at)
            if entry is None or entry.per_gpu_month is None:
                continue
            n, c = best_size(Fraction(entry.per_gpu_month), tariff.config.period_s, mine)
            on_demand = sum((v[1] for v in mine.values()), Fraction(0))
            cost += c
            priced += sum((v[0] for v in mine.values()), Fraction(0))
            sizes.append(f"{pool or '(no pool)'}: {n} GPUs at {entry.per_gpu_month} a GPU-month, saving "
                         f"{money(on_demand - c)} against on demand")
        if not sizes:
            continue
        rented = Decimal(money(sum((v[0] for v in by_period.values()), Fraction(0)) / 3600))
        amount = Decimal(money(cost))
        found.setdefault("modes", []).append({
            "mode": "commitment", "amount": amount, "billed_amount": billed, "difference": amount - billed,
            "priced_hours": Decimal(money(priced / 3600)), "rented_hours": rented,
            "detail": "the commitment that costs least for this usage, the rest on demand; " + "; ".join(sizes)})
    for inv in invoices.values():
        modes = inv.get("modes", [])
        # what the tenant pays for the month's usage as billed: the ledger's amount, less what its commitments
        # covered, plus their fees (adjustments of earlier months aside)
        paid = inv["total"]["amount"] + sum((c["billed_amount"] - c["covered_amount"] for c in inv["commitments"]),
                                            Decimal(0))
        for m in modes:
            m["billed_amount"], m["difference"] = paid, m["amount"] - paid
        modes.sort(key=lambda m: m["amount"])
        on_demand = next((m["amount"] for m in modes if m["mode"] == "on_demand"), None)
        for m in modes:
            m["saving"] = None if on_demand is None else on_demand - m["amount"]
        complete = [m for m in modes if m["priced_hours"] == m["rented_hours"]]
        cheapest = min(complete, key=lambda m: m["amount"], default=None)
        for m in modes:
            m["cheapest"] = m is cheapest


# -- output -----------------------------------------------------------------------------------------------
def _plain(v):
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def as_json(bill: dict) -> str:
    """Money and hours as decimal strings, never floats."""
    for inv in bill["invoices"]:
        for line in [*inv["lines"], inv["total"]]:
            for k in ("idle_amount", "amount"):
                line[k] = _money(line[k])
        low = inv["waste"]["low_utilization"]
        if low:
            low["unused_amount"] = _money(low["unused_amount"])
            low["unsold_amount"] = _money(low["unsold_amount"])
        for job in inv["waste"]["overprovisioned"]:
            job["idle_gpu_amount"] = _money(job["idle_gpu_amount"])
        for m in inv.get("modes", []):
            for k in ("amount", "billed_amount", "difference", "saving"):
                m[k] = None if m.get(k) is None else _money(m[k])
        for c in inv["commitments"]:
            for k in ("billed_amount", "amortized_amount", "unused_amount", "covered_amount"):
                c[k] = _money(c[k])
        for a in inv["adjustments"]:
            a["amount"] = _money(a["amount"])
        inv["due"] = {k: _money(v) for k, v in inv["due"].items()}
    return json.dumps(_plain(bill), indent=2)


LINE_COLUMNS = ("pool", "gpu_model", "gpus", "rented_hours", "busy_hours", "idle_hours", "idle_amount",
                "estimated_hours", "amount")
MODE_COLUMNS = ("mode", "amount", "billed_amount", "difference", "saving", "priced_hours", "rented_hours", "cheapest",
                "detail")


def _csv_cell(column: str, v):
    """A CSV cell: money with its 6 decimals, booleans as true/false (as spreadsheets and SQL loaders read them)."""
    if column in ("idle_amount", "amount", "billed_amount", "difference", "saving"):
        return "" if v is None else _money(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else v


def as_csv(bill: dict, compare_modes: bool = False) -> str:
    """One row per invoice line (or, with ``compare_modes``, per tenant and billing mode)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    columns = MODE_COLUMNS if compare_modes else LINE_COLUMNS
    w.writerow(("month", "tenant", "currency", *columns))
    for inv in bill["invoices"]:
        for line in inv.get("modes", []) if compare_modes else inv["lines"]:
            w.writerow((bill["month"], inv["tenant"], inv["currency"],
                        *(_csv_cell(c, line.get(c)) for c in columns)))
    return buf.getvalue()


def capacity_lines(rows: list[dict], hourly: bool) -> tuple[list[dict], list[dict]]:
    """``bill capacity``'s lines: per pool and day (or hour), installed, rented and unsold GPU-hours and the unsold
    ones at list price; and each pool's month."""
    keys = CAPACITY_KEYS
    groups: dict[tuple[str, str], dict] = {}
    for r in rows:
        when = r["hour"].strftime("%Y-%m-%d %H:00" if hourly else "%Y-%m-%d")
        g = groups.setdefault((r["pool"], when), {"pool": r["pool"], "when": when, "gpus": 0,
                                                  **{k: Decimal(0) for k in keys}})
        g["gpus"] = max(g["gpus"], r["gpus"])
        for k in keys:
            g[k] += r[k]
    lines = list(groups.values())
    totals: dict[str, dict] = {}
    for g in lines:
        t = totals.setdefault(g["pool"], {"pool": g["pool"], "when": "", "gpus": 0, **{k: Decimal(0) for k in keys}})
        t["gpus"] = max(t["gpus"], g["gpus"])
        for k in keys:
            t[k] += g[k]
    return lines, list(totals.values())


CAPACITY_KEYS = ("installed_gpu_hours", "rented_gpu_hours", "unsold_gpu_hours", "unsold_amount")
CAPACITY_COLUMNS = ("pool", "when", "gpus", *CAPACITY_KEYS)


def capacity_json(lines: list[dict], pools: list[dict], month: dt.date, currency: str) -> str:
    return json.dumps({"month": f"{month:%Y-%m}", "currency": currency, "lines": _plain(lines),
                       "pools": _plain([{**p, "when": f"{month:%Y-%m}"} for p in pools])}, indent=2) + "\n"


def capacity_csv(lines: list[dict], currency: str) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow((*CAPACITY_COLUMNS, "currency"))
    for g in lines:
        w.writerow((*(g[c] for c in CAPACITY_COLUMNS), currency))
    return buf.getvalue()
