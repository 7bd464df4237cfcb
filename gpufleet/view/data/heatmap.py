"""The reads behind the page's section: the heat map and the silent nodes."""
from __future__ import annotations

import math

from .common import Window, bucket_for
from .idle import IdleReads


class HeatmapReads(IdleReads):
    # -- the heat map -------------------------------------------------------------
    def heatmap(self, w: Window, columns: int = 144) -> dict:
        """Mean utilization of every GPU in buckets of the window, whether it was rented, and its idle share."""
        bucket = bucket_for(w.end - w.start, columns)
        start = math.floor(w.start / bucket) * bucket
        end = math.ceil(w.end / bucket) * bucket
        n = int((end - start) // bucket)
        rows = self._rows(
            "SELECT gpu_uuid, any(node), any(gpu_index), any(pool), argMax(tenant, minute), "
            "intDiv(toUnixTimestamp(minute) - %(b0)s, %(bucket)s) AS col, avg(util_pct_mean), max(tenant != ''), "
            "argMaxIf(tenant, minute, tenant != '') "
            "FROM gpu_rollup_1m FINAL WHERE minute >= toDateTime(%(b0)s) AND minute < toDateTime(%(b1)s)"
            f"{w.tenant_filter()} GROUP BY gpu_uuid, col",
            {**w.params(), "b0": int(start), "b1": int(end), "bucket": bucket})
        gpus: dict[str, dict] = {}
        tenants: dict[str, int] = {}
        for uuid, node, index, pool, tenant, col, util, rented, cell_tenant in rows:
            g = gpus.get(uuid)
            if g is None:
                g = gpus[uuid] = {"gpu_uuid": uuid, "node": node, "gpu_index": int(index), "pool": pool,
                                  "tenant": tenant, "util_pct": [None] * n, "rented": [0] * n,
                                  "tenant_col": [-1] * n, "idle_share": [0.0] * n, "_last": -1}
            if cell_tenant:
                g["tenant_col"][col] = tenants.setdefault(cell_tenant, len(tenants))
            if col > g["_last"]:
                g["tenant"], g["_last"] = tenant, col
            g["util_pct"][col] = None if util is None else round(float(util), 1)
            g["rented"][col] = int(rented)
        idle = self.idle(w)
        for run in idle["runs"]:
            g = gpus.get(run["gpu_uuid"])
            if g is None:
                continue
            first = max(0, int((run["start"] - start) // bucket))
            last = min(n - 1, int((run["end"] - start) // bucket))
            for col in range(first, last + 1):
                b0 = start + col * bucket
                share = (min(run["end"], b0 + bucket) - max(run["start"], b0)) / bucket
                g["idle_share"][col] = round(min(1.0, g["idle_share"][col] + max(share, 0.0)), 3)
        ordered = sorted(gpus.values(), key=lambda g: (g["node"], g["gpu_index"], g["gpu_uuid"]))
        for g in ordered:
            del g["_last"]
        out = {"start": start, "end": end, "bucket_s": bucket, "columns": n, "gpus": ordered,
               "tenants": list(tenants),
               "idle_now": [r for r in idle["runs"] if r["ongoing"]], "currency": idle["currency"],
               "silent": self.silent(w) if ordered else []}
        if not ordered:
            out["empty"] = self._no_telemetry(w)
        return out

    def silent(self, w: Window) -> list[dict]:
        """Nodes that reported in the window but not for ``silent_after_s`` before its end (or before the latest
        telemetry, where that is earlier: a replayed fleet is not silent for having ended): their alerts resolved
        as silent, their GPUs unwatched."""
        latest = self.latest()
        if latest is None:
            return []
        ref = min(w.end, latest)
        rows = self._rows(
            "SELECT node, any(pool), uniqExact(gpu_uuid), toUnixTimestamp(max(minute)) FROM gpu_rollup_1m "
            "WHERE minute >= toDateTime(%(start)s) AND minute < toDateTime(%(end)s) GROUP BY node "
            "HAVING max(minute) < toDateTime(%(before)s) ORDER BY node",
            {"start": int(w.start), "end": int(math.ceil(ref)), "before": int(ref - self.silent_after_s - 60)})
        return [{"node": node, "pool": pool, "gpus": int(gpus), "last_seen": float(last) + 60,
                 "silent_s": round(ref - float(last) - 60, 1)} for node, pool, gpus, last in rows]
