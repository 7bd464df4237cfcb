"""What the operator's view reads from the store: every chart's data as plain, JSON-ready values.

Every read is bounded: a time window on the tables' time keys, ``FINAL`` only where repeated rows would change
the answer, and limits on what can grow with the fleet (incidents, peers). Times are Unix seconds (UTC); money is a
decimal string with 6 decimals, never a float (as on the billing records).

"Now" is the fleet's event time: the end of the latest minute of telemetry in the store, so a replayed recording
shows as it was, and a live fleet shows the latest the workers have stored.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import threading
import time
from dataclasses import dataclass
from decimal import Decimal

from gpufleet.contracts.waste import UNDERUSE_PCT

CENT = Decimal("0.000001")
BUCKETS = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


class ViewError(ValueError):
    """A bad parameter (HTTP 400, exit code 2), with a message that names it."""


@dataclass(frozen=True)
class Window:
    """A period of the view: ``[start, end)`` in Unix seconds, optionally one tenant's only."""

    start: float
    end: float
    tenant: str | None = None

    def __post_init__(self):
        if not self.end > self.start:
            raise ViewError(f"the period must end after it starts ({iso(self.start)} to {iso(self.end)})")

    @property
    def hours(self) -> float:
        return (self.end - self.start) / 3600

    def params(self) -> dict:
        p: dict[str, object] = {"start": int(self.start), "end": int(math.ceil(self.end)), "start_s": float(self.start),
             "end_s": float(self.end)}
        if self.tenant is not None:
            p["tenant"] = self.tenant
        return p

    def tenant_filter(self, column: str = "tenant") -> str:
        return f" AND {column} = %(tenant)s" if self.tenant is not None else ""


def parse_time(text: str, name: str = "to") -> float:
    """``YYYY-MM-DD[THH:MM[:SS]]`` (UTC, a trailing ``Z`` allowed) or Unix seconds."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        try:
            parsed = dt.datetime.fromisoformat(text.removesuffix("Z").replace(" ", "T"))
        except ValueError:
            raise ViewError(f"{name}: {text!r} is neither YYYY-MM-DD[THH:MM] nor Unix seconds") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        value = parsed.timestamp()
    if not 0 < value < 4102444800:     # 2100-01-01
        raise ViewError(f"{name}: {text!r} is not a time between 1970 and 2100")
    return value


def parse_hours(text: str, name: str = "hours", most: float = 24 * 93) -> float:
    try:
        hours = float(text)
    except ValueError:
        raise ViewError(f"{name}: {text!r} is not a number of hours") from None
    if not 0 < hours <= most:
        raise ViewError(f"{name}: {hours:g} is not between 0 and {most:g} hours")
    return hours


def iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def month_start(ts: float) -> float:
    d = dt.datetime.fromtimestamp(ts, dt.UTC)
    return dt.datetime(d.year, d.month, 1, tzinfo=dt.UTC).timestamp()


def next_month(ts: float) -> float:
    d = dt.datetime.fromtimestamp(ts, dt.UTC)
    return dt.datetime(d.year + d.month // 12, d.month % 12 + 1, 1, tzinfo=dt.UTC).timestamp()


def money(value) -> str:
    return str(Decimal(value).quantize(CENT))


def bucket_for(seconds: float, columns: int) -> int:
    """The smallest bucket of :data:`BUCKETS` that cuts ``seconds`` into at most ``columns``."""
    for b in BUCKETS:
        if seconds / b <= columns:
            return b
    return int(math.ceil(seconds / columns / 86400)) * 86400


def _s(ms) -> float | None:
    return None if ms is None else ms / 1000


class FleetData:
    """The reads behind the fleet page, the report, the terminal view and their JSON.

    ``store`` is a :class:`gpufleet.sql.store.Store` (only ``query`` is used); ``currency`` names money where the
    store's records do not (setting billing.currency); incidents still firing are looked for ``alert_days`` back;
    ``underuse_pct`` is setting billing.underuse_pct (waste); ``price_note`` says that the prices are the default
    flat one, where they are.
    """

    def __init__(self, store, currency: str = "USD", alert_days: float = 7.0, lock: threading.Lock | None = None,
                 silent_after_s: float = 600.0, underuse_pct: float = UNDERUSE_PCT, price_note: str | None = None):
        self.store, self.currency, self.alert_days = store, currency, alert_days
        self.silent_after_s, self.underuse_pct, self.price_note = silent_after_s, underuse_pct, price_note
        self.lock = lock or threading.Lock()
        self._memo: dict[tuple, object] = {}

    def _rows(self, sql: str, params: dict | None = None) -> list[tuple]:
        with self.lock:
            return self.store.query(sql, params)

    def _once(self, key: tuple, make):
        """One read per ``key`` for the life of this object (a page asks for the incidents three times)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    # -- when -------------------------------------------------------------------
    def latest(self) -> float | None:
        """The end of the latest minute of telemetry stored (answered from the parts' min-max index)."""
        (value,) = self._rows("SELECT toUnixTimestamp(max(minute)) FROM gpu_rollup_1m")[0]
        return float(value) + 60 if value else None

    def window(self, to: float | None, hours: float, tenant: str | None = None) -> Window:
        """The ``hours`` up to ``to``, or up to the latest telemetry (the wall clock when there is none)."""
        if to is None:
            to = self.latest() or math.floor(time.time() / 60) * 60
        return Window(to - hours * 3600, to, tenant)

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

    def _no_telemetry(self, w: Window) -> str:
        latest = self.latest()
        who = f" for tenant {w.tenant}" if w.tenant else ""
        if latest is None:
            return ("no telemetry in the store yet: start the collectors and the workers, or fill it with "
                    "`gpufleet replay FILE` or `gpufleet demo`")
        return f"no telemetry{who} between {iso(w.start)} and {iso(w.end)} (the latest is of {iso(latest)})"

    # -- incidents ------------------------------------------------------------------
    def incidents(self, w: Window, limit: int = 20000) -> list[dict]:
        """Every incident (firing, and resolved with its resolution) detected from ``alert_days`` before the
        window to its end, as of the window's end: ``firing`` when no resolve came by then."""
        return self._once(("incidents", w, limit), lambda: self._incidents(w, limit))

    def _incidents(self, w: Window, limit: int) -> list[dict]:
        since = w.start - self.alert_days * 86400
        rows = self._rows(
            "SELECT id, status, kind, severity, node, gpu_uuid, job, tenant, pool, toUnixTimestamp64Milli(started_at), "
            "toUnixTimestamp64Milli(detected_at), toUnixTimestamp64Milli(resolved_at), score, summary, evidence "
            "FROM alerts WHERE detected_at >= toDateTime64(%(since)s, 3, 'UTC') "
            f"AND detected_at <= toDateTime64(%(end_s)s, 3, 'UTC'){w.tenant_filter()} "
            "ORDER BY detected_at DESC, id, status LIMIT 1 BY id, status LIMIT %(limit)s",
            {**w.params(), "since": float(since), "limit": limit})
        found: dict[str, dict] = {}
        for (id_, status, kind, severity, node, gpu, job, tenant, pool, started, detected, resolved, score, summary,
             evidence) in rows:
            inc = found.get(id_)
            if status == "resolved":
                at = _s(resolved)
                if at is None or at > w.end:
                    continue          # resolved after the moment shown: still firing then
                if inc is None:
                    inc = found[id_] = {"id": id_}
                inc["resolved_at"] = at
                inc["resolution"] = summary
                inc.setdefault("_fields", (kind, severity, node, gpu, job, tenant, pool, started, detected, score,
                                           summary, evidence))
            else:
                if inc is None:
                    inc = found[id_] = {"id": id_}
                inc["_fields"] = (kind, severity, node, gpu, job, tenant, pool, started, detected, score, summary,
                                  evidence)
                inc["_firing_row"] = True
        out = []
        for inc in found.values():
            kind, severity, node, gpu, job, tenant, pool, started, detected, score, summary, evidence = \
                inc.pop("_fields")
            try:
                ev = json.loads(evidence) if evidence else {}
            except ValueError:
                ev = {"text": evidence}
            resolved = inc.get("resolved_at")
            out.append({"id": inc["id"], "kind": kind, "severity": severity, "status":
                        "resolved" if resolved is not None else "firing", "node": node, "gpu_uuid": gpu or None,
                        "job": job or None, "tenant": tenant or None, "pool": pool or None, "started_at": _s(started),
                        "detected_at": _s(detected), "resolved_at": resolved, "score": float(score),
                        "summary": summary, "resolution": inc.get("resolution"), "evidence": ev})
        out.sort(key=lambda a: (a["status"] != "firing", SEVERITY_RANK.get(a["severity"], 9), -a["detected_at"]))
        return out

    def alerts(self, w: Window, limit: int = 200) -> dict:
        """Incidents firing at the window's end, and those resolved within the window."""
        incidents = self.incidents(w)
        firing = [a for a in incidents if a["status"] == "firing"]
        resolved = [a for a in incidents if a["status"] == "resolved" and a["resolved_at"] >= w.start]
        shown = [a for a in incidents if a["status"] == "firing" or a["resolved_at"] >= w.start]
        by_severity: dict[str, int] = {}
        for x in firing:
            by_severity[x["severity"]] = by_severity.get(x["severity"], 0) + 1
        out = {"start": w.start, "end": w.end, "firing": firing[:limit], "resolved": resolved[:limit],
               "counts": _count_kinds(shown), "firing_total": len(firing), "resolved_total": len(resolved),
               "firing_by_severity": by_severity}
        if not shown:
            out["empty"] = (f"no incident firing at {iso(w.end)} and none resolved since {iso(w.start)}"
                            f"{' for tenant ' + w.tenant if w.tenant else ''}: the detectors found nothing "
                            "(straggler, IO starvation, memory leak, idle) in the stored telemetry")
        return out

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

    def _gpu_indexes(self, uuids: list[str], w: Window) -> dict[str, int]:
        if not uuids:
            return {}
        rows = self._rows("SELECT gpu_uuid, any(gpu_index) FROM gpu_rollup_1m WHERE gpu_uuid IN %(uuids)s AND "
                          "minute >= toDateTime(%(start)s) AND minute < toDateTime(%(end)s) GROUP BY gpu_uuid",
                          {**w.params(), "uuids": tuple(sorted(set(uuids)))})
        return {u: int(i) for u, i in rows}

    def idlest(self, end: float, minutes: int = 15, limit: int = 10) -> list[dict]:
        """The rented GPUs with the lowest mean utilization over the last ``minutes``, with their idle run."""
        w = Window(end - minutes * 60, end)
        rows = self._rows(
            "SELECT gpu_uuid, any(node), any(gpu_index), any(pool), argMax(tenant, minute) AS t, argMax(job, minute), "
            "avg(util_pct_mean) AS u FROM gpu_rollup_1m WHERE minute >= toDateTime(%(start)s) "
            "AND minute < toDateTime(%(end)s) GROUP BY gpu_uuid HAVING t != '' AND u IS NOT NULL "
            "ORDER BY u, gpu_uuid LIMIT %(limit)s", {**w.params(), "limit": limit})
        running = {r["gpu_uuid"]: r for r in self.idle(w)["runs"] if r["ongoing"]}
        out = []
        for uuid, node, index, pool, tenant, job, util in rows:
            run = running.get(uuid)
            out.append({"gpu_uuid": uuid, "node": node, "gpu_index": int(index), "pool": pool, "tenant": tenant,
                        "job": job or None, "util_pct": round(float(util), 1),
                        "idle_since": run["start"] if run else None,
                        "cost_so_far": run["cost_so_far"] if run else None,
                        "price_per_gpu_hour": run["price_per_gpu_hour"] if run else None})
        return out

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
            f"SELECT {dim}, sum(rented_s) FROM billing_ledger FINAL WHERE period_start >= toDateTime(%(start)s) "
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

    # -- billing ----------------------------------------------------------------------
    def billing(self, w: Window, month: bool = False) -> dict:
        """Billing totals from the ledger for the periods that start in the window (or, with ``month``, in the
        calendar month of its end), by tenant and pool."""
        start, end = (month_start(w.end - 1), next_month(w.end - 1)) if month else (w.start, w.end)
        rows = self._rows(
            "SELECT tenant, pool, currency, sum(amount), sum(idle_amount), sum(rented_s), sum(busy_s), sum(idle_s), "
            "uniqExact(gpu_uuid), toUnixTimestamp(max(period_end)) FROM billing_ledger FINAL "
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
        rows = self._rows(
            "SELECT gpu_uuid, tenant, any(node), any(gpu_index), any(pool), argMax(job, minute), "
            "toUnixTimestamp(max(minute)), count(), avg(util_pct_mean) FROM gpu_rollup_1m "
            "WHERE minute >= toDateTime(%(start)s) AND minute < toDateTime(%(end)s)"
            f"{w.tenant_filter()} GROUP BY gpu_uuid, tenant", w.params())
        gpus: dict[str, dict] = {}
        for uuid, ten, node, index, pool, job, last, n, util in rows:
            g = gpus.get(uuid)
            if g is None or last > g["_last"]:
                gpus[uuid] = {"gpu_uuid": uuid, "node": node, "gpu_index": int(index), "pool": pool,
                              "tenant": ten or None, "job": job or None, "_last": float(last),
                              "util_pct": None if util is None else round(float(util), 1), "minutes": int(n)}
        installed = {u: g for u, g in gpus.items() if g["_last"] + 60 > end - recent_s}
        idle_now = {r["gpu_uuid"] for r in self.idle(Window(end - recent_s, end, tenant))["runs"] if r["ongoing"]}
        prices = dict(((u, (p, c)) for u, p, c in self._rows(
            "SELECT gpu_uuid, argMax(price_per_gpu_hour, period_start), argMax(currency, period_start) "
            "FROM billing_ledger WHERE period_start >= toDateTime(%(since)s) AND period_start < toDateTime(%(end)s) "
            f"{w.tenant_filter()} GROUP BY gpu_uuid", {**w.params(), "since": int(end - 2 * 86400)})))
        by: dict[str, dict[str, dict]] = {"pool": {}, "tenant": {}}
        listed: list[dict] = []

        def acc(dim: str, key: str | None) -> dict:
            return by[dim].setdefault(key or "", {dim: key, "gpus": 0, "rented": 0, "busy": 0, "idle": 0,
                                                  "underused": 0, "waste_per_hour": Decimal(0),
                                                  "price_unknown": 0})
        for g in installed.values():
            g.pop("_last")
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
                a = acc(dim, g[dim])
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
        day = math.floor((end - 1) / 86400) * 86400          # the UTC day and month of the moment shown
        month = month_start(end - 1)
        for dim in ("pool", "tenant"):
            for key, name, c, *sums in self._rows(
                    f"SELECT {dim}, toStartOfDay(period_start) >= toDateTime(%(day)s) AS today, currency, "
                    "sum(idle_s), sum(underused_s), sum(idle_amount), sum(unused_amount), sum(unsold_amount) "
                    "FROM billing_ledger FINAL WHERE period_start >= toDateTime(%(month)s) "
                    f"AND period_start < toDateTime(%(until)s){w.tenant_filter()} GROUP BY {dim}, today, currency",
                    {**w.params(), "day": int(day), "month": int(min(month, day)), "until": int(day + 86400)}):
                a = acc(dim, key)
                for span in (("today", "month") if name else ("month",)):
                    t = a.setdefault(span, {"idle_hours": 0.0, "underused_hours": 0.0, "idle_amount": Decimal(0),
                                            "unused_amount": Decimal(0), "unsold_amount": Decimal(0),
                                            "currency": c})
                    t["idle_hours"] += float(sums[0]) / 3600
                    t["underused_hours"] += float(sums[1]) / 3600
                    t["idle_amount"] += Decimal(sums[2])
                    t["unused_amount"] += Decimal(sums[3])
                    t["unsold_amount"] += Decimal(sums[4])

        def shown(a: dict) -> dict:
            out = {**a, "waste_per_hour": money(a["waste_per_hour"])}
            for span in ("today", "month"):
                t = a.get(span) or {"idle_hours": 0.0, "underused_hours": 0.0, "idle_amount": 0, "unused_amount": 0,
                                    "unsold_amount": 0, "currency": self.currency}
                out[span] = {"idle_hours": round(t["idle_hours"], 3), "underused_hours": round(t["underused_hours"], 3),
                             "idle_amount": money(t["idle_amount"]), "unused_amount": money(t["unused_amount"]),
                             "tenant_waste_amount": money(Decimal(t["idle_amount"]) + Decimal(t["unused_amount"])),
                             "unsold_amount": money(t["unsold_amount"]), "currency": t["currency"]}
            return out
        pools = [shown(a) for _, a in sorted(by["pool"].items())]
        tenants = sorted((shown(a) for a in by["tenant"].values()),
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
        total = shown(total)
        return {"at": end, "underuse_pct": underuse_pct, "recent_s": recent_s, "window_s": window_s,
                "day_start": day, "month_start": month, "currency": self.currency, "total": total, "pools": pools,
                "tenants": tenants, "gpus": listed}

    # -- one incident ---------------------------------------------------------------
    def incident(self, id_: str, pad_s: float = 1800, most_s: float = 12 * 3600, peers: int = 48) -> dict | None:
        """An incident and the telemetry around it: its GPU's (or its job's GPUs on its node) utilization, SM
        clock, memory and power per minute, the job's other GPUs beside it (a straggler's peers), and the node's
        host metrics."""
        rows = self._rows(
            "SELECT status, kind, severity, node, gpu_uuid, job, tenant, pool, toUnixTimestamp64Milli(started_at), "
            "toUnixTimestamp64Milli(detected_at), toUnixTimestamp64Milli(resolved_at), score, summary, evidence "
            "FROM alerts WHERE id = %(id)s ORDER BY status LIMIT 1 BY status", {"id": id_})
        if not rows:
            return None
        by = {r[0]: r for r in rows}
        first = by.get("firing") or by["resolved"]
        _, kind, severity, node, gpu, job, tenant, pool, started, detected, _, score, summary, evidence = first
        resolved = _s(by["resolved"][10]) if "resolved" in by else None
        latest = self.latest() or detected / 1000
        alert = {"id": id_, "kind": kind, "severity": severity, "status": "resolved" if resolved else "firing",
                 "node": node, "gpu_uuid": gpu or None, "job": job or None, "tenant": tenant or None,
                 "pool": pool or None, "started_at": started / 1000, "detected_at": detected / 1000,
                 "resolved_at": resolved, "score": float(score), "summary": summary,
                 "resolution": by["resolved"][12] if "resolved" in by else None,
                 "evidence": json.loads(evidence) if evidence else {}}
        t0 = started / 1000 - pad_s
        t1 = (resolved if resolved is not None else latest) + pad_s
        if t1 - t0 > most_s:
            t0, t1 = detected / 1000 - most_s / 2, detected / 1000 + most_s / 2
        t0, t1 = math.floor(t0 / 60) * 60, math.ceil(t1 / 60) * 60
        p = {"t0": int(t0), "t1": int(t1), "gpu": gpu, "job": job, "node": node, "peers": peers}
        if gpu and job:
            who = "(gpu_uuid = %(gpu)s OR job = %(job)s)"
        elif gpu:
            who = "gpu_uuid = %(gpu)s"
        elif job:
            who = "job = %(job)s AND node = %(node)s"
        else:
            who = "node = %(node)s"
        series = self._rows(
            "SELECT gpu_uuid, node, gpu_index, toUnixTimestamp(minute), util_pct_mean, sm_clock_mhz_mean, "
            "mem_used_bytes_mean, power_w_mean FROM gpu_rollup_1m "
            "WHERE minute >= toDateTime(%(t0)s) AND minute < toDateTime(%(t1)s) AND gpu_uuid IN ("
            "  SELECT gpu_uuid FROM gpu_rollup_1m WHERE minute >= toDateTime(%(t0)s) AND minute < toDateTime(%(t1)s)"
            f"  AND {who} GROUP BY gpu_uuid ORDER BY gpu_uuid = %(gpu)s DESC, gpu_uuid LIMIT %(peers)s) "
            f"AND {who} ORDER BY gpu_uuid, minute LIMIT 1 BY gpu_uuid, minute", {**p, "gpu": gpu or ""})
        gpus: dict[str, dict] = {}
        for uuid, gnode, index, minute, util, clock, mem, power in series:
            g = gpus.setdefault(uuid, {"gpu_uuid": uuid, "node": gnode, "gpu_index": int(index),
                                       "role": "incident" if uuid == gpu or (not gpu and gnode == node) else "peer",
                                       "minute": [], "util_pct": [], "sm_clock_mhz": [], "mem_used_bytes": [],
                                       "power_w": []})
            g["minute"].append(float(minute))
            for name, v in (("util_pct", util), ("sm_clock_mhz", clock), ("mem_used_bytes", mem), ("power_w", power)):
                g[name].append(None if v is None else round(float(v), 2))
        host = self._rows(
            "SELECT toUnixTimestamp(minute), host_cpu_util_pct_mean, host_iowait_pct_mean, "
            "host_disk_read_bytes_per_s_mean, gpu_util_pct_mean FROM node_rollup_1m WHERE node = %(node)s AND "
            "minute >= toDateTime(%(t0)s) AND minute < toDateTime(%(t1)s) ORDER BY minute LIMIT 1 BY minute", p)
        out = {"alert": alert, "start": t0, "end": t1,
               "gpus": sorted(gpus.values(), key=lambda g: (g["role"] != "incident", g["node"], g["gpu_index"])),
               "host": {"node": node, "minute": [float(r[0]) for r in host],
                        "cpu_util_pct": [_round(r[1]) for r in host], "iowait_pct": [_round(r[2]) for r in host],
                        "disk_read_bytes_per_s": [_round(r[3]) for r in host],
                        "gpu_util_pct": [_round(r[4]) for r in host]}}
        if not gpus:
            out["empty"] = f"no telemetry of this incident's GPUs stored between {iso(t0)} and {iso(t1)}"
        return out


def _round(v, digits: int = 2):
    return None if v is None else round(float(v), digits)


def _count_kinds(incidents: list[dict]) -> dict:
    counts: dict[str, dict[str, int]] = {}
    for a in incidents:
        c = counts.setdefault(a["kind"], {"firing": 0, "resolved": 0})
        c[a["status"]] += 1
    return counts
