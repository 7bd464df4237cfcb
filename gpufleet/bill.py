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

from gpufleet.summary import table

MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
HOUR = Decimal(3600)
MILLI = Decimal("0.001")

LINES = """
SELECT tenant, currency, pool, gpu_model, uniqExact(gpu_uuid) AS gpus, sum(rented_s) AS rented_s,
       sum(busy_s) AS busy_s, sum(idle_s) AS idle_s, sum(idle_amount) AS idle_amount,
       sum(estimated_s) AS estimated_s, sum(amount) AS amount
FROM billing_ledger FINAL
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


def invoice(store, month: str, tenant: str | None = None, compare_modes: bool = False) -> dict:
    """The month's invoices: ``{"month": ..., "invoices": [...]}``, one per tenant and currency."""
    params: dict = {"month": month_start(month)}
    where = ""
    if tenant is not None:
        params["tenant"] = tenant
        where = "AND tenant = %(tenant)s"
    invoices: dict[tuple[str, str], dict] = {}
    names, rows = store.select(LINES.format(tenant=where), params)
    for r in (dict(zip(names, row)) for row in rows):
        inv = invoices.setdefault((r["tenant"], r["currency"]), {
            "tenant": r["tenant"], "currency": r["currency"], "lines": [],
            "total": {k: Decimal(0) for k in ("rented_s", "busy_s", "idle_s", "idle_amount", "estimated_s",
                                              "amount")},
            "waste": {"low_utilization": None, "overprovisioned": []}})
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
    if compare_modes:
        names, rows = store.select(MODES.format(tenant=where), params)
        for r in (dict(zip(names, row)) for row in rows):
            found = invoices.get((r["tenant"], r["currency"]))
            if found is not None:
                found.setdefault("modes", []).append(
                    {k: r[k] for k in ("mode", "amount", "billed_amount", "difference", "priced_hours",
                                       "rented_hours")})
        for inv in invoices.values():
            complete = [m for m in inv.get("modes", []) if m["priced_hours"] == m["rented_hours"]]
            cheapest = min(complete, key=lambda m: m["amount"], default=None)
            for m in inv.get("modes", []):
                m["cheapest"] = m is cheapest
    for inv in invoices.values():
        t = inv["total"]
        inv["total"] = {"rented_hours": hours(t["rented_s"]), "busy_hours": hours(t["busy_s"]),
                        "idle_hours": hours(t["idle_s"]), "idle_amount": t["idle_amount"],
                        "estimated_hours": hours(t["estimated_s"]), "amount": t["amount"]}
    return {"month": month, "invoices": list(invoices.values())}


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
            for k in ("amount", "billed_amount", "difference"):
                m[k] = _money(m[k])
    return json.dumps(_plain(bill), indent=2)


LINE_COLUMNS = ("pool", "gpu_model", "gpus", "rented_hours", "busy_hours", "idle_hours", "idle_amount",
                "estimated_hours", "amount")
MODE_COLUMNS = ("mode", "amount", "billed_amount", "difference", "priced_hours", "rented_hours", "cheapest")


def _csv_cell(column: str, v):
    """A CSV cell: money with its 6 decimals, booleans as true/false (as spreadsheets and SQL loaders read them)."""
    if column in ("idle_amount", "amount", "billed_amount", "difference"):
        return _money(v)
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
                        *(_csv_cell(c, line[c]) for c in columns)))
    return buf.getvalue()


def as_table(bill: dict, compare_modes: bool = False, underuse_pct: float = 60.0) -> str:
    if not bill["invoices"]:
        return f"no billing records for {bill['month']}"
    parts = []
    for inv in bill["invoices"]:
        cur = inv["currency"]
        rows = [tuple(_cents(line[c]) if c in ("idle_amount", "amount") else line[c] for c in LINE_COLUMNS)
                for line in inv["lines"]]
        t = inv["total"]
        rows.append(("total", "", None, t["rented_hours"], t["busy_hours"], t["idle_hours"], _cents(t["idle_amount"]),
                     t["estimated_hours"], _cents(t["amount"])))
        text = [f"{inv['tenant']}: {bill['month']}, {cur}",
                table(["pool", "GPU model", "GPUs", "rented h", "busy h", "idle h", "idle cost", "estimated h",
                       "amount"], rows)]
        waste = []
        low = inv["waste"]["low_utilization"]
        if low:
            waste.append(f"  underused (busy below {underuse_pct:g} % utilization in a billing period): "
                         f"{low['rentals']} rentals, {low['busy_hours']} busy hours; the unused share paid by the "
                         f"tenant {_money(low['unused_amount'])} {cur}")
            if Decimal(low["unsold_amount"]):
                waste.append(f"  not paid by the tenant (billed by use), the provider's unsold capacity: "
                             f"{_money(low['unsold_amount'])} {cur}")
        for job in inv["waste"]["overprovisioned"]:
            waste.append(f"  over-provisioned: job {job['job']} left {job['idle_gpus']} of its {job['gpus']} GPUs "
                         f"idle, {job['idle_gpu_hours']} GPU-hours, {_money(job['idle_gpu_amount'])} {cur}")
        text.append("waste beyond idle:\n" + ("\n".join(waste) if waste else "  none"))
        if compare_modes:
            modes = inv.get("modes", [])
            text.append("in each billing mode:\n" + (table(
                ["mode", "amount", "billed", "difference", "priced h", "rented h", ""],
                [(m["mode"], _cents(m["amount"]), _cents(m["billed_amount"]), _cents(m["difference"]),
                  m["priced_hours"], m["rented_hours"], "cheapest" if m["cheapest"] else "") for m in modes])
                if modes else "  (no modes priced)"))
        parts.append("\n".join(text))
    return "\n\n".join(parts)
