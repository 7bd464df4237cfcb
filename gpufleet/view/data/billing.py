"""The reads behind the page's section: what the window cost, by tenant."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

from gpufleet.contracts.tables import BILLING_LEDGER

from .common import Reads, Window, iso, money, month_start, next_month


class BillingReads(Reads):
    # -- billing ----------------------------------------------------------------------
    def billing(self, w: Window, month: bool = False) -> dict:
        """Billing totals from the ledger for the periods that start in the window (or, with ``month``, in the
        calendar month of its end), by tenant and pool."""
        start, end = (month_start(w.end - 1), next_month(w.end - 1)) if month else (w.start, w.end)
        rows = self._rows(
            "SELECT tenant, pool, currency, sum(amount), sum(idle_amount), sum(rented_s), sum(busy_s), sum(idle_s), "
            f"uniqExact(gpu_uuid), toUnixTimestamp(max(period_end)) FROM {BILLING_LEDGER.name} FINAL "
            "WHERE period_start >= toDateTime(%(b0)s) AND period_start < toDateTime(%(b1)s)"
            f"{w.tenant_filter()} GROUP BY tenant, pool, currency ORDER BY tenant, pool",
            {**w.params(), "b0": int(start), "b1": int(end)})
        lines = [{"tenant": t, "pool": p, "currency": c, "amount": money(a), "idle_amount": money(i),
                  "rented_hours": round(float(r) / 3600, 3), "busy_hours": round(float(b) / 3600, 3),
                  "idle_hours": round(float(s) / 3600, 3), "gpus": int(g)} for t, p, c, a, i, r, b, s, g, _ in rows]
        totals: dict[str, dict] = {}
        for line, row in zip(lines, rows):
            key = line["tenant"]
            acc = totals.setdefault(key, {"tenant": key, "currency": line["currency"], "amount": Decimal(0),
                                          "idle_amount": Decimal(0), "rented_hours": 0.0, "idle_hours": 0.0})
            acc["amount"] += Decimal(line["amount"])
            acc["idle_amount"] += Decimal(line["idle_amount"])
            acc["rented_hours"] += float(row[5]) / 3600          # from the exact seconds, rounded once
            acc["idle_hours"] += float(row[7]) / 3600
        tenants = sorted(totals.values(), key=lambda t: -t["amount"])
        currencies = sorted({t["currency"] for t in tenants})
        out = {"start": start, "end": end, "month": dt.datetime.fromtimestamp(start, dt.UTC).strftime("%Y-%m")
               if month else None, "lines": lines,
               "tenants": [{**t, "amount": money(t["amount"]), "idle_amount": money(t["idle_amount"]),
                            "rented_hours": round(t["rented_hours"], 3), "idle_hours": round(t["idle_hours"], 3)}
                           for t in tenants],
               "totals": [{"currency": c, "amount": money(sum((t["amount"] for t in tenants if t["currency"] == c),
                                                              Decimal(0))),
                           "idle_amount": money(sum((t["idle_amount"] for t in tenants if t["currency"] == c),
                                                    Decimal(0)))} for c in currencies],
               "billed_through": max((float(r[-1]) for r in rows), default=None)}
        if not lines:
            what = f"for {out['month']}" if month else f"for periods from {iso(start)} to {iso(end)}"
            out["empty"] = (f"no billing records {what}{' of tenant ' + w.tenant if w.tenant else ''} yet: a record is "
                            "written once its billing period (billing.period_s) has closed in event time, and only "
                            "while billing.enabled is true")
        return out
