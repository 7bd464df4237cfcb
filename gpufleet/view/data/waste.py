"""The reads behind the page's section: waste now: idle and underused rentals, their cost."""
from __future__ import annotations

import math
from decimal import Decimal

from gpufleet.contracts.tables import BILLING_LEDGER

from .common import Window, money, month_start
from .idle import IdleReads

LEDGER = BILLING_LEDGER.name


class WasteReads(IdleReads):
    # -- waste: idle and underused GPUs, now and so far --------------------------------
    def waste(self, end: float, tenant: str | None = None, recent_s: float = 300, window_s: float = 3600) -> dict:
        """Waste by the one definition (gpufleet/contracts/waste.py), by pool and by tenant.

        Now (at ``end``): the GPUs that reported in the last ``recent_s``; rented ones are idle (in an idle run
        still open), underused (busy, and their rented minutes of the last ``window_s`` averaged below
        ``underuse_pct``) or busy; waste per hour is an idle GPU's price per GPU-hour and an underused one's
        unused share of it, at the price of its latest billing record. So far: today's and this month's billing
        records (closed periods) as the ledger holds them: idle and underused GPU-hours, what the tenants paid
        for them (``idle_amount + unused_amount``) and the provider's unsold capacity (``unsold_amount``)."""
        return self._once(("waste", end, tenant, recent_s, window_s),
                          lambda: self._waste(end, self.underuse_pct, tenant, recent_s, window_s))

    def _waste(self, end: float, underuse_pct: float, tenant: str | None, recent_s: float, window_s: float) -> dict:
        w = Window(end - window_s, end, tenant)
        by: dict[str, dict[str, dict]] = {"pool": {}, "tenant": {}}
        listed = self._waste_now(w, end, underuse_pct, recent_s, by)
        day = math.floor((end - 1) / 86400) * 86400          # the UTC day and month of the moment shown
        month = month_start(end - 1)
        self._waste_so_far(w, day, month, by)
        pools = [self._shown(a) for _, a in sorted(by["pool"].items())]
        tenants = sorted((self._shown(a) for a in by["tenant"].values()),
                         key=lambda a: (-Decimal(a["waste_per_hour"]), a["tenant"] or ""))
        listed.sort(key=lambda g: (-Decimal(g["waste_per_hour"] or 0), g["node"], g["gpu_index"]))
        total = {k: sum(a[k] for a in by["pool"].values()) for k in ("gpus", "rented", "busy", "idle", "underused",
                                                                      "price_unknown")}
        total["waste_per_hour"] = sum((a["waste_per_hour"] for a in by["pool"].values()), Decimal(0))
        for span in ("today", "month"):
            parts = [a[span] for a in by["pool"].values() if span in a]
            if parts:
                total[span] = {k: sum((p[k] for p in parts), type(parts[0][k])(0)) for k in
                               ("idle_hours", "underused_hours", "idle_amount", "unused_amount", "unsold_amount")}
                total[span]["currency"] = parts[0]["currency"]
        return {"at": end, "underuse_pct": underuse_pct, "recent_s": recent_s, "window_s": window_s,
                "day_start": day, "month_start": month, "currency": self.currency, "total": self._shown(total),
                "pools": pools, "tenants": tenants, "gpus": listed}

    def _installed(self, w: Window, recent_s: float) -> list[dict]:
        """The GPUs that reported in the last ``recent_s`` of the window, each as of its latest minute."""
        rows = self._rows(
            "SELECT gpu_uuid, tenant, any(node), any(gpu_index), any(pool), argMax(job, minute), "
            "toUnixTimestamp(max(minute)), count(), avg(util_pct_mean) FROM gpu_rollup_1m "
            "WHERE minute >= toDateTime(%(start)s) AND minute < toDateTime(%(end)s)"
            f"{w.tenant_filter()} GROUP BY gpu_uuid, tenant", w.params())
        gpus: dict[str, dict] = {}
        last: dict[str, float] = {}
        for uuid, ten, node, index, pool, job, at, n, util in rows:
            if uuid not in gpus or at > last[uuid]:
                last[uuid] = float(at)
                gpus[uuid] = {"gpu_uuid": uuid, "node": node, "gpu_index": int(index), "pool": pool,
                              "tenant": ten or None, "job": job or None,
                              "util_pct": None if util is None else round(float(util), 1), "minutes": int(n)}
        return [g for u, g in gpus.items() if last[u] + 60 > w.end - recent_s]

    def _waste_now(self, w: Window, end: float, underuse_pct: float, recent_s: float,
                   by: dict[str, dict[str, dict]]) -> list[dict]:
        """Each GPU installed now, its state (free, busy, underused, idle) and its waste per hour, added up by pool
        and tenant in ``by``; returns the idle and underused ones."""
        idle_now = {r["gpu_uuid"] for r in self.idle(Window(end - recent_s, end, w.tenant))["runs"] if r["ongoing"]}
        prices = dict(((u, (p, c)) for u, p, c in self._rows(
            "SELECT gpu_uuid, argMax(price_per_gpu_hour, period_start), argMax(currency, period_start) "
            f"FROM {LEDGER} WHERE period_start >= toDateTime(%(since)s) AND period_start < toDateTime(%(end)s) "
            f"{w.tenant_filter()} GROUP BY gpu_uuid", {**w.params(), "since": int(end - 2 * 86400)})))
        listed: list[dict] = []
        for g in self._installed(w, recent_s):
            rented = g["tenant"] is not None
            state = ("idle" if g["gpu_uuid"] in idle_now else
                     "underused" if g["util_pct"] is not None and g["util_pct"] < underuse_pct else "busy") \
                if rented else "free"
            price, currency = prices.get(g["gpu_uuid"], (None, None))
            per_hour = None
            if state in ("idle", "underused") and price is not None:
                share = Decimal(1) if state == "idle" else Decimal(1) - Decimal(str(g["util_pct"])) / 100
                per_hour = Decimal(price) * share
            g.update({"state": state, "price_per_gpu_hour": money(price) if price is not None else None,
                      "waste_per_hour": money(per_hour) if per_hour is not None else None,
                      "currency": currency or self.currency})
            for dim in ("pool",) + (("tenant",) if rented else ()):
                a = _acc(by, dim, g[dim])
                a["gpus"] += 1
                if rented:
                    a["rented"] += 1
                    a["busy" if state in ("busy", "underused") else "idle"] += 1
                    a["underused"] += state == "underused"
                if per_hour is not None:
                    a["waste_per_hour"] += per_hour
                elif state in ("idle", "underused"):
                    a["price_unknown"] += 1
            if state in ("idle", "underused"):
                listed.append(g)
        return listed

    def _waste_so_far(self, w: Window, day: float, month: float, by: dict[str, dict[str, dict]]) -> None:
        """Today's and this month's waste as the ledger holds it (closed periods), by pool and tenant in ``by``."""
        for dim in ("pool", "tenant"):
            for key, name, c, *sums in self._rows(
                    f"SELECT {dim}, toStartOfDay(period_start) >= toDateTime(%(day)s) AS today, currency, "
                    "sum(idle_s), sum(underused_s), sum(idle_amount), sum(unused_amount), sum(unsold_amount) "
                    f"FROM {LEDGER} FINAL WHERE period_start >= toDateTime(%(month)s) "
                    f"AND period_start < toDateTime(%(until)s){w.tenant_filter()} GROUP BY {dim}, today, currency",
                    {**w.params(), "day": int(day), "month": int(min(month, day)), "until": int(day + 86400)}):
                a = _acc(by, dim, key)
                for span in (("today", "month") if name else ("month",)):
                    t = a.setdefault(span, {"idle_hours": 0.0, "underused_hours": 0.0, "idle_amount": Decimal(0),
                                            "unused_amount": Decimal(0), "unsold_amount": Decimal(0),
                                            "currency": c})
                    t["idle_hours"] += float(sums[0]) / 3600
                    t["underused_hours"] += float(sums[1]) / 3600
                    t["idle_amount"] += Decimal(sums[2])
                    t["unused_amount"] += Decimal(sums[3])
                    t["unsold_amount"] += Decimal(sums[4])

    def _shown(self, a: dict) -> dict:
        """A pool's, a tenant's or the fleet's waste as the page and the JSON show it: money as decimal strings."""
        out = {**a, "waste_per_hour": money(a["waste_per_hour"])}
        for span in ("today", "month"):
            t = a.get(span) or {"idle_hours": 0.0, "underused_hours": 0.0, "idle_amount": 0, "unused_amount": 0,
                                "unsold_amount": 0, "currency": self.currency}
            out[span] = {"idle_hours": round(t["idle_hours"], 3), "underused_hours": round(t["underused_hours"], 3),
                         "idle_amount": money(t["idle_amount"]), "unused_amount": money(t["unused_amount"]),
                         "tenant_waste_amount": money(Decimal(t["idle_amount"]) + Decimal(t["unused_amount"])),
                         "unsold_amount": money(t["unsold_amount"]), "currency": t["currency"]}
        return out


def _acc(by: dict[str, dict[str, dict]], dim: str, key: str | None) -> dict:
    """The running sums of one pool or tenant."""
    return by[dim].setdefault(key or "", {dim: key, "gpus": 0, "rented": 0, "busy": 0, "idle": 0, "underused": 0,
                                          "waste_per_hour": Decimal(0), "price_unknown": 0})
