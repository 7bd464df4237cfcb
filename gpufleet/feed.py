"""The forecast feed: the latest forecast and scale target of each pool, read from the store, over HTTP.

Routes (mounted on ``gpufleet serve``'s router):

- ``GET /v1/forecast?pool=P``: the latest ``gpufleet.forecast.v1`` of pool P;
- ``GET /v1/scale?pool=P``: the value for KEDA's ``metrics-api`` scaler (``valueLocation: target_gpus``):
  the GPUs the pool should have from now through the lead time, from the latest scale decision (made at
  ``decided_at``), never more than the pool's ``capacity_gpus``; in a dry run it stays at the GPUs present
  (``would_target_gpus`` holds the decision); demand beyond the pool is ``capacity_request``
  (``{"gpus", "from", "until", "p90"}`` or null), never a target;
- ``GET /v1/pools``: the pools with a forecast;
- ``GET /metrics``: Prometheus gauges (forecast per horizon and band, scale target, current, rented and
  capacity GPUs, the capacity request, when each was made);
- ``GET /health``: 200 while the store answers, 503 otherwise.

Only reads: the store is opened as the read-only commands open it.
"""
from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily

from gpufleet.web import Request, Response, Router, error, json_response

KEDA_VALUE_LOCATION = "target_gpus"
HORIZONS = (("1h", 3600), ("6h", 6 * 3600), ("24h", 86400), ("48h", 2 * 86400))


class FeedReader:
    """The queries behind the feed; one at a time through the store."""

    def __init__(self, store):
        self.store = store
        self.lock = threading.Lock()

    def _query(self, sql: str, params: dict | None = None) -> list[tuple]:
        with self.lock:
            return self.store.query(sql, params)

    def pools(self) -> list[str]:
        return [p for (p,) in self._query("SELECT DISTINCT pool FROM forecasts ORDER BY pool")]

    def forecasts(self, pool: str | None = None) -> dict[str, dict]:
        """The latest forecast of each pool (or of ``pool``) as ``gpufleet.forecast.v1`` events."""
        where = "WHERE pool = %(pool)s" if pool is not None else ""
        rows = self._query(
            "SELECT pool, toUnixTimestamp(made_at), step_s, toUnixTimestamp(ts), demand_gpus, p10, p90 "
            "FROM forecasts FINAL WHERE (pool, made_at) IN "
            f"(SELECT pool, max(made_at) FROM forecasts {where} GROUP BY pool) ORDER BY pool, ts",
            {"pool": pool} if pool is not None else None)
        out: dict[str, dict] = {}
        for p, made_at, step_s, ts, demand, p10, p90 in rows:
            ev = out.setdefault(p, {"schema": "gpufleet.forecast.v1", "pool": p, "made_at": float(made_at),
                                    "step_s": float(step_s), "points": []})
            ev["points"].append({"ts": float(ts), "demand_gpus": demand, "p10": p10, "p90": p90})
        return out

    def decisions(self, pool: str | None = None) -> dict[str, dict]:
        """The latest scale decision of each pool (or of ``pool``)."""
        where = "WHERE pool = %(pool)s" if pool is not None else ""
        rows = self._query(
            "SELECT pool, toUnixTimestamp(max(at)), argMax(action, at), argMax(current_gpus, at), "
            "argMax(target_gpus, at), argMax(rented_gpus, at), argMax(reason, at), argMax(dry_run, at), "
            "argMax(lead_time_s, at), argMax(capacity_gpus, at), argMax(request_gpus, at), "
            "toUnixTimestamp(argMax(request_from, at)), toUnixTimestamp(argMax(request_until, at)), "
            f"argMax(request_p90, at) FROM scale_events FINAL {where} GROUP BY pool ORDER BY pool",
            {"pool": pool} if pool is not None else None)
        out = {}
        for (p, at, action, current, target, rented, reason, dry_run, lead, capacity, req_gpus, req_from, req_until,
             req_p90) in rows:
            request = ({"gpus": int(req_gpus), "from": float(req_from), "until": float(req_until),
                        "p90": float(req_p90)} if req_gpus else None)
            out[p] = {"pool": p, "at": float(at), "decided_at": float(at),
                      "target_gpus": int(current if dry_run else target), "would_target_gpus": int(target),
                      "current_gpus": int(current), "rented_gpus": int(rented), "capacity_gpus": int(capacity),
                      "capacity_request": request, "action": action, "dry_run": bool(dry_run),
                      "lead_time_s": int(lead), "reason": reason}
        return out


class FeedCollector:
    """Prometheus gauges read from the store at each scrape."""

    def __init__(self, reader: FeedReader):
        self.reader = reader

    def collect(self):
        demand = GaugeMetricFamily("gpufleet_forecast_demand_gpus",
                                   "Forecast GPUs rented in a pool, at a horizon from when it was made, by band "
                                   "(p10, demand, p90)", labels=["pool", "horizon", "band"])
        made = GaugeMetricFamily("gpufleet_forecast_made_at_seconds", "Event time of the latest forecast",
                                 labels=["pool"])
        for pool, ev in self.reader.forecasts().items():
            made.add_metric([pool], ev["made_at"])
            for label, seconds in HORIZONS:
                k = int(seconds // ev["step_s"]) - 1
                if 0 <= k < len(ev["points"]):
                    point = ev["points"][k]
                    for band in ("p10", "demand_gpus", "p90"):
                        demand.add_metric([pool, label, band.removesuffix("_gpus")], point[band])
        target = GaugeMetricFamily("gpufleet_scale_target_gpus", "GPUs the pool should have (the KEDA value)",
                                   labels=["pool"])
        current = GaugeMetricFamily("gpufleet_scale_current_gpus", "GPUs present at the latest decision",
                                    labels=["pool"])
        rented = GaugeMetricFamily("gpufleet_scale_rented_gpus", "GPUs rented at the latest decision", labels=["pool"])
        dry = GaugeMetricFamily("gpufleet_scale_dry_run", "1 when the pool's policy only records", labels=["pool"])
        at = GaugeMetricFamily("gpufleet_scale_decided_at_seconds", "Event time of the latest decision",
                               labels=["pool"])
        capacity = GaugeMetricFamily("gpufleet_scale_capacity_gpus", "GPUs the pool has: no target exceeds it",
                                     labels=["pool"])
        request = GaugeMetricFamily("gpufleet_scale_capacity_request_gpus",
                                    "GPUs to add beyond the pool's capacity for the demand forecast (0: none)",
                                    labels=["pool"])
        for pool, d in self.reader.decisions().items():
            target.add_metric([pool], d["target_gpus"])
            current.add_metric([pool], d["current_gpus"])
            rented.add_metric([pool], d["rented_gpus"])
            dry.add_metric([pool], float(d["dry_run"]))
            at.add_metric([pool], d["at"])
            capacity.add_metric([pool], d["capacity_gpus"])
            request.add_metric([pool], d["capacity_request"]["gpus"] if d["capacity_request"] else 0)
        yield from (demand, made, target, current, rented, dry, at, capacity, request)


def mount(router: Router, store) -> CollectorRegistry:
    """Add the feed's routes to ``router``; returns the registry behind ``/metrics``."""
    reader = FeedReader(store)
    registry = CollectorRegistry()
    registry.register(FeedCollector(reader))
    requests = Counter("gpufleet_feed_requests", "Requests answered by the feed", ["path", "code"],
                       registry=registry)

    def counted(path, handler):
        def wrapped(request: Request) -> Response:
            response = handler(request)
            requests.labels(path, str(response.status)).inc()
            return response
        return wrapped

    def pool_of(request: Request) -> str | None:
        pool = request.query.get("pool", "").strip()
        return pool or None

    def forecast(request: Request) -> Response:
        pool = pool_of(request)
        if pool is None:
            return error(400, "query parameter pool is required, e.g. /v1/forecast?pool=h100-sxm-east")
        ev = reader.forecasts(pool).get(pool)
        return json_response(ev) if ev else error(404, f"no forecast for pool {pool!r}")

    def scale(request: Request) -> Response:
        pool = pool_of(request)
        if pool is None:
            return error(400, "query parameter pool is required, e.g. /v1/scale?pool=h100-sxm-east")
        d = reader.decisions(pool).get(pool)
        return json_response(d) if d else error(404, f"no scale decision for pool {pool!r}")

    def pools(request: Request) -> Response:
        return json_response({"pools": reader.pools()})

    def metrics(request: Request) -> Response:
        return Response(200, generate_latest(registry), "text/plain; version=0.0.4; charset=utf-8")

    def health(request: Request) -> Response:
        try:
            reader._query("SELECT 1")
        except Exception as err:     # the store's own error types stay in sql/
            return error(503, f"store unavailable: {str(err).splitlines()[0]}")
        return json_response({"status": "ok"})

    for path, handler, what in (
            ("/v1/forecast", forecast, "latest gpufleet.forecast.v1 of ?pool="),
            ("/v1/scale", scale, f"KEDA metrics-api value of ?pool= (valueLocation {KEDA_VALUE_LOCATION})"),
            ("/v1/pools", pools, "pools with a forecast"),
            ("/metrics", metrics, "Prometheus metrics"),
            ("/health", health, "200 while the store answers")):
        router.add("GET", path, counted(path, handler), what)
    return registry
