"""The reads behind the page's section: utilization by pool and tenant."""
from __future__ import annotations

from decimal import Decimal

from gpufleet.contracts.tables import BILLING_LEDGER

from .common import Window, _round, money
from .idle import IdleReads


class UsageReads(IdleReads):
    # -- utilization and idle cost by pool and tenant ----------------------------------------
    def usage(self, w: Window) -> dict:
        """By pool and by tenant over the window: GPUs, GPU-hours, mean utilization, idle hours and their cost.
        GPU-hours and rented GPU-hours count minutes of telemetry (a GPU rented in a minute counts the minute);
        ``billed_rented_hours`` is the billing records' rented time of the periods that start in the window (or at
        its end: a last sample's time may run into the next period), to the millisecond, as the billing section and
        ``gpufleet bill`` sum it."""
        minutes = max((w.end - w.start) / 60, 1)
        pools = self._rows(
            "SELECT pool, uniqExact(gpu_uuid), count(), countIf(tenant != ''), avg(util), avgIf(util, tenant != '') "
            "FROM usage_gpu_1m FINAL WHERE minute >= toDateTime(%(start)s) AND minute < toDateTime(%(end)s)"
            f"{w.tenant_filter()} GROUP BY pool ORDER BY pool", w.params())
        tenants = self._rows(
            "SELECT tenant, uniqExact(gpu_uuid), count(), avg(util) FROM usage_gpu_1m FINAL "
            "WHERE minute >= toDateTime(%(start)s) AND minute < toDateTime(%(end)s) AND tenant != ''"
            f"{w.tenant_filter()} GROUP BY tenant ORDER BY tenant", w.params())
        billed = {dim: {k: round(float(v) / 3600, 3) for k, v in self._rows(
            f"SELECT {dim}, sum(rented_s) FROM {BILLING_LEDGER.name} FINAL WHERE period_start >= toDateTime(%(start)s) "
            f"AND period_start <= toDateTime(%(end)s){w.tenant_filter()} GROUP BY {dim}", w.params())}
            for dim in ("pool", "tenant")}
        idle = self.idle(w)
        by: dict[str, dict[str, list]] = {"pool": {}, "tenant": {}}
        for r in idle["runs"]:
            for dim in ("pool", "tenant"):
                acc = by[dim].setdefault(r[dim], [0.0, Decimal(0), False])
                acc[0] += r["idle_s_in_window"]
                if r["cost_in_window"] is not None:
                    acc[1] += Decimal(r["cost_in_window"])
                else:
                    acc[2] = True        # an idle run without a price: its cost is not known

        def idle_of(dim, key):
            s, cost, unknown = by[dim].get(key, [0.0, Decimal(0), False])
            return {"idle_gpu_hours": round(s / 3600, 3), "idle_cost": money(cost), "idle_cost_partial": unknown}

        out = {"start": w.start, "end": w.end, "currency": idle["currency"],
               "pools": [{"pool": p, "gpus": int(g), "gpus_mean": round(n / minutes, 2),
                          "gpu_hours": round(n / 60, 2), "rented_gpu_hours": round(r / 60, 2),
                          "util_pct": _round(u), "rented_util_pct": _round(ru),
                          "billed_rented_hours": billed["pool"].get(p, 0.0), **idle_of("pool", p)}
                         for p, g, n, r, u, ru in pools],
               "tenants": [{"tenant": t, "gpus": int(g), "gpus_mean": round(n / minutes, 2),
                            "gpu_hours": round(n / 60, 2), "util_pct": _round(u),
                            "billed_rented_hours": billed["tenant"].get(t, 0.0), **idle_of("tenant", t)}
                           for t, g, n, u in tenants]}
        if not pools:
            out["empty"] = self._no_telemetry(w)
        return out
