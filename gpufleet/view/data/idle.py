"""The reads behind the page's section: idle GPUs: the idle section, the idlest rented GPUs now."""
from __future__ import annotations

from decimal import Decimal

from .alerts import AlertReads
from .common import Window, money


class IdleReads(AlertReads):
    # -- idle -----------------------------------------------------------------------
    def idle(self, w: Window) -> dict:
        """The idle runs that overlap the window: stored idle windows, and idle incidents still firing at its end
        (a running idle window is stored only when it ends). Each with its price per GPU-hour as the idle alert
        priced it (setting billing.prices), what its time inside the window cost, and what it cost so far."""
        return self._once(("idle", w), lambda: self._idle(w))

    def _idle(self, w: Window) -> dict:
        rows = self._rows(
            "SELECT gpu_uuid, node, gpu_index, pool, tenant, job, toUnixTimestamp64Milli(started_at), "
            "toUnixTimestamp64Milli(ended_at), open FROM idle_windows FINAL "
            "WHERE ended_at > toDateTime64(%(start_s)s, 3, 'UTC') AND started_at < toDateTime64(%(end_s)s, 3, 'UTC')"
            f"{w.tenant_filter()}", w.params())
        runs: dict[tuple[str, int], dict] = {}
        for uuid, node, index, pool, tenant, job, started, ended, open_ in rows:
            runs[(uuid, started)] = {"gpu_uuid": uuid, "node": node, "gpu_index": int(index), "pool": pool,
                                     "tenant": tenant, "job": job or None, "start": started / 1000,
                                     "end": min(ended / 1000, w.end), "ongoing": bool(open_) and ended / 1000 >= w.end,
                                     "incident": None}
        prices: dict[tuple[str, int], tuple[str | None, str | None, str]] = {}
        for a in self.incidents(w):
            if a["kind"] != "idle" or a["gpu_uuid"] is None:
                continue
            key = (a["gpu_uuid"], round(a["started_at"] * 1000))
            ev = a["evidence"]
            prices[key] = (ev.get("price_per_gpu_hour"), ev.get("currency"), a["id"])
            if a["status"] == "firing":      # still idle at the window's end
                runs[key] = {**runs.get(key, {"gpu_uuid": a["gpu_uuid"], "node": a["node"], "gpu_index": None,
                                              "pool": a["pool"], "tenant": a["tenant"], "job": a["job"],
                                              "start": a["started_at"]}), "end": w.end, "ongoing": True}
        missing = [k for k in runs if k not in prices]
        if missing:       # idle since before the incidents read: their alerts, found by when they started
            since = min(k[1] for k in missing) / 1000
            for uuid, started, price, currency, id_ in self._rows(
                    "SELECT gpu_uuid, toUnixTimestamp64Milli(started_at), JSONExtractString(evidence, "
                    "'price_per_gpu_hour'), JSONExtractString(evidence, 'currency'), id FROM alerts "
                    "WHERE kind = 'idle' AND status = 'firing' AND detected_at >= toDateTime64(%(since)s, 3, 'UTC') "
                    "AND started_at <= toDateTime64(%(until)s, 3, 'UTC')",
                    {"since": since, "until": max(k[1] for k in missing) / 1000}):
                prices.setdefault((uuid, started), (price or None, currency or None, id_))
        indexes = self._gpu_indexes([r["gpu_uuid"] for r in runs.values() if r.get("gpu_index") is None], w)
        out, currency = [], None
        for key, r in runs.items():
            price, cur, id_ = prices.get(key, (None, None, None))
            currency = currency or cur
            if r.get("gpu_index") is None:
                r["gpu_index"] = indexes.get(r["gpu_uuid"])
            inside = max(0.0, min(r["end"], w.end) - max(r["start"], w.start))
            r.update({"idle_s": round(r["end"] - r["start"], 3), "idle_s_in_window": round(inside, 3),
                      "price_per_gpu_hour": money(price) if price else None, "incident": id_,
                      "cost_so_far": money(Decimal(price) * Decimal(str(round(r["end"] - r["start"], 3))) / 3600)
                      if price else None,
                      "cost_in_window": money(Decimal(price) * Decimal(str(round(inside, 3))) / 3600)
                      if price else None})
            out.append(r)
        out.sort(key=lambda r: (not r["ongoing"], -(r["idle_s"])))
        return {"start": w.start, "end": w.end, "runs": out, "currency": currency or self.currency}

    def idlest(self, end: float, minutes: int = 15, limit: int = 10) -> list[dict]:
        """The rented GPUs idle now (longest idle first, with their idle time and its cost), then those with the lowest
        mean utilization over the last ``minutes``."""
        w = Window(end - minutes * 60, end)
        running = {r["gpu_uuid"]: r for r in self.idle(w)["runs"] if r["ongoing"]}
        rows = self._rows(
            "SELECT gpu_uuid, any(node), any(gpu_index), any(pool), argMax(tenant, minute) AS t, argMax(job, minute), "
            "avg(util_pct_mean) AS u FROM gpu_rollup_1m WHERE minute >= toDateTime(%(start)s) "
            "AND minute < toDateTime(%(end)s) GROUP BY gpu_uuid HAVING t != '' AND (u IS NOT NULL OR has(%(idle)s, "
            "gpu_uuid)) ORDER BY has(%(idle)s, gpu_uuid) DESC, u, gpu_uuid LIMIT %(limit)s",
            {**w.params(), "limit": limit, "idle": sorted(running)})
        rows.sort(key=lambda r: (r[0] not in running, running[r[0]]["start"] if r[0] in running else 0.0))
        out = []
        for uuid, node, index, pool, tenant, job, util in rows:
            run = running.get(uuid)
            out.append({"gpu_uuid": uuid, "node": node, "gpu_index": int(index), "pool": pool, "tenant": tenant,
                        "job": job or None, "util_pct": None if util is None else round(float(util), 1),
                        "idle_since": run["start"] if run else None,
                        "cost_so_far": run["cost_so_far"] if run else None,
                        "price_per_gpu_hour": run["price_per_gpu_hour"] if run else None})
        return out
