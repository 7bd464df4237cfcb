"""The reads behind the page's section: demand, its forecast and the scale decisions."""
from __future__ import annotations

from .common import Reads, Window


class DemandReads(Reads):
    # -- demand, forecasts and scale decisions ----------------------------------------
    def demand(self, w: Window, ahead_s: float, pool: str | None = None) -> dict:
        """Each pool's demand per 5 minutes over the window, its latest forecast made by the window's end (up to
        ``ahead_s`` past it) and its scale decisions within the window."""
        p = {**w.params(), "ahead": int(w.end + ahead_s), "pool": pool or ""}
        only = " AND pool = %(pool)s" if pool else ""
        pools: dict[str, dict] = {}

        def of(name):
            return pools.setdefault(name, {"pool": name, "demand": [], "forecast": None, "scale_events": []})
        for name, bucket, total, rented, busy in self._rows(
                "SELECT pool, toUnixTimestamp(bucket), total_gpus, rented_gpus, busy_gpus FROM pool_demand_5m "
                f"WHERE bucket >= toDateTime(%(start)s) AND bucket < toDateTime(%(end)s){only} ORDER BY pool, bucket",
                p):
            of(name)["demand"].append({"ts": float(bucket), "total_gpus": round(float(total), 3),
                                       "rented_gpus": round(float(rented), 3), "busy_gpus": round(float(busy), 3)})
        for name, made, step, ts, d, p10, p90 in self._rows(
                "SELECT pool, toUnixTimestamp(made_at), step_s, toUnixTimestamp(ts), demand_gpus, p10, p90 "
                "FROM forecasts FINAL WHERE (pool, made_at) IN (SELECT pool, max(made_at) FROM forecasts "
                f"WHERE made_at <= toDateTime(%(end)s){only} GROUP BY pool) AND ts <= toDateTime(%(ahead)s) "
                "ORDER BY pool, ts", p):
            f = of(name)
            if f["forecast"] is None:
                f["forecast"] = {"made_at": float(made), "step_s": int(step), "points": []}
            f["forecast"]["points"].append({"ts": float(ts), "demand_gpus": round(float(d), 3),
                                            "p10": round(float(p10), 3), "p90": round(float(p90), 3)})
        for (name, at, action, current, target, rented, dry_run, reason, capacity, req_gpus, req_from, req_until,
             req_p90) in self._rows(
                "SELECT pool, toUnixTimestamp(at), action, current_gpus, target_gpus, rented_gpus, dry_run, reason, "
                "capacity_gpus, request_gpus, toUnixTimestamp(request_from), toUnixTimestamp(request_until), "
                "request_p90 FROM scale_events FINAL WHERE at >= toDateTime(%(start)s) AND at <= toDateTime(%(end)s)"
                f"{only} ORDER BY pool, at", p):
            request = ({"gpus": int(req_gpus), "from": float(req_from), "until": float(req_until),
                        "p90": round(float(req_p90), 3)} if req_gpus else None)
            of(name)["scale_events"].append({"at": float(at), "action": action, "current_gpus": int(current),
                                             "target_gpus": int(target), "rented_gpus": int(rented),
                                             "capacity_gpus": int(capacity), "capacity_request": request,
                                             "dry_run": bool(dry_run), "reason": reason})
        out = {"start": w.start, "end": w.end, "ahead_s": ahead_s, "pools": [pools[k] for k in sorted(pools)]}
        if not any(x["demand"] for x in pools.values()):
            out["empty"] = self._no_telemetry(w)
        elif not any(x["forecast"] for x in pools.values()):
            out["no_forecast"] = ("no forecast yet: one is made every forecast.every_s (event time) once a pool has "
                                  "forecast.min_history_s of demand, by `gpufleet forecast run` beside the workers or "
                                  "by replay and demo at the end of their input")
        return out

    def tenant_demand(self, w: Window, bucket: int) -> dict:
        """One tenant's GPUs in use over the window, by pool (the demand its report shows)."""
        rows = self._rows(
            "SELECT pool, toUnixTimestamp(toStartOfInterval(minute, toIntervalSecond(%(bucket)s))) AS t, count() "
            "FROM usage_gpu_1m FINAL WHERE minute >= toDateTime(%(start)s) AND minute < toDateTime(%(end)s) "
            f"AND tenant != ''{w.tenant_filter()} GROUP BY pool, t ORDER BY pool, t", {**w.params(), "bucket": bucket})
        pools: dict[str, list] = {}
        for pool, t, n in rows:
            pools.setdefault(pool, []).append({"ts": float(t), "gpus": round(n / (bucket / 60), 3)})
        out = {"start": w.start, "end": w.end, "bucket_s": bucket, "tenant": w.tenant,
               "pools": [{"pool": k, "demand": v} for k, v in sorted(pools.items())]}
        if not pools:
            out["empty"] = self._no_telemetry(w)
        return out
