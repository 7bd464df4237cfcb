"""The fleet page, the incident pages and the JSON behind every chart, mounted on ``gpufleet serve``'s router.

Pages: ``GET /`` (the fleet page), ``GET /incident?id=ID`` (one incident and the telemetry around it).
JSON: ``/v1/fleet/waste``, ``/v1/fleet/heatmap``, ``/v1/fleet/alerts``, ``/v1/fleet/idle``, ``/v1/fleet/usage``,
``/v1/fleet/demand``, ``/v1/fleet/billing``, ``/v1/incident?id=ID``. Every one takes ``to`` (UTC
``YYYY-MM-DD[THH:MM]`` or Unix seconds; default: the end of the latest telemetry stored) and ``hours`` (default:
setting serve.view_hours; for demand serve.demand_hours), and, except the incident, ``tenant``.
``/report?from=&to=`` and ``/v1/top`` are what ``gpufleet report`` and ``gpufleet top`` read through a running
server when it holds the embedded store. ``/metrics`` adds the fleet gauges (``gauges.py``). Only reads.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from gpufleet.contracts.waste import UNDERUSE_PCT
from gpufleet.view import pages, top
from gpufleet.view.charts import esc
from gpufleet.view.data import FleetData, ViewError, Window, parse_hours, parse_time
from gpufleet.view.gauges import FleetGauges
from gpufleet.web import Request, Response, Router, error, json_response

HTML = "text/html; charset=utf-8"


def html_error(status: int, message: str) -> Response:
    body = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
            f"<title>gpufleet: {status}</title></head><body><h1>{status}</h1><p>{esc(message)}</p>"
            '<p><a href="./">the fleet page</a></p></body></html>')
    return Response(status, body.encode(), HTML)


@dataclass(frozen=True)
class ViewConfig:
    """What the view needs of the settings: the serve section, the billing currency, when a node is silent, the
    underuse threshold, and the note that the prices are the default flat one (where they are)."""

    serve: Any
    currency: str = "USD"
    silent_after_s: float = 600.0
    underuse_pct: float = UNDERUSE_PCT
    price_note: str | None = None


def mount(router: Router, store, config: ViewConfig, registry: CollectorRegistry | None = None) -> None:
    """Add the view's routes to ``router``, reading ``store``; the request counts and page times, and the fleet
    gauges, go to ``registry`` (``/metrics``)."""
    registry = registry or CollectorRegistry()
    routes = Routes(store, config, registry)
    registry.register(FleetGauges(routes.reader))
    for path, name, what, page in ROUTES:
        router.add("GET", path, routes.handled(path, getattr(routes, name), page), what)


class Routes:
    """The handlers of the view's routes, over one store (each request reads through a fresh FleetData)."""

    def __init__(self, store, config: ViewConfig, registry: CollectorRegistry) -> None:
        self.store, self.config, self.serve = store, config, config.serve
        self.lock = threading.Lock()
        self.requests = Counter("gpufleet_view_requests", "Requests answered by the fleet view", ["path", "code"],
                                registry=registry)
        self.seconds = Histogram("gpufleet_view_seconds", "Time to answer a fleet view request (queries and "
                                 "drawing)", ["path"], registry=registry, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10))

    def reader(self) -> FleetData:       # one per request: its reads are shared by the sections of one answer
        c = self.config
        return FleetData(self.store, c.currency, self.serve.alert_days, self.lock, c.silent_after_s, c.underuse_pct,
                         c.price_note)

    def window(self, data: FleetData, request: Request, hours_default: float) -> Window:
        q = request.query
        to = parse_time(q["to"], "to") if q.get("to") else None
        hours = parse_hours(q["hours"]) if q.get("hours") else hours_default
        tenant = q.get("tenant", "").strip() or None
        return data.window(to, hours, tenant)

    def handled(self, path: str, handler, page: bool = False):
        def wrapped(request: Request) -> Response:
            began = time.perf_counter()
            try:
                response = handler(request)
            except ViewError as err:
                response = html_error(400, str(err)) if page else error(400, str(err))
            self.requests.labels(path, str(response.status)).inc()
            self.seconds.labels(path).observe(time.perf_counter() - began)
            return response
        return wrapped

    # -- pages ---------------------------------------------------------------------
    def fleet(self, request: Request) -> Response:
        data, serve = self.reader(), self.serve
        w = self.window(data, request, serve.view_hours)
        body = pages.fleet_page(data, w, serve.demand_hours, serve.forecast_ahead_hours, serve.refresh_s,
                                live="to" not in request.query)
        return Response(200, body.encode(), HTML)

    def incident(self, request: Request) -> Response:
        id_ = request.query.get("id", "").strip()
        if not id_:
            return html_error(400, "query parameter id is required: an alert's id, e.g. /incident?id=04e68fe3b528")
        found = self.reader().incident(id_)
        if found is None:
            return html_error(404, f"no incident with id {id_!r}")
        return Response(200, pages.incident_page(found).encode(), HTML)

    def report(self, request: Request) -> Response:
        q = request.query
        if not q.get("from") or not q.get("to"):
            raise ViewError("query parameters from and to are required, e.g. /report?from=2026-01-05&to=2026-01-06")
        start, end = parse_time(q["from"], "from"), parse_time(q["to"], "to")
        if end <= start:
            raise ViewError("to: must be after from")
        body = pages.report(self.reader(), Window(start, end, q.get("tenant", "").strip() or None),
                            self.serve.forecast_ahead_hours)
        return Response(200, body.encode(), HTML)

    # -- JSON ----------------------------------------------------------------------
    def incident_json(self, request: Request) -> Response:
        id_ = request.query.get("id", "").strip()
        if not id_:
            return error(400, "query parameter id is required, e.g. /v1/incident?id=04e68fe3b528")
        found = self.reader().incident(id_)
        return json_response(found) if found else error(404, f"no incident with id {id_!r}")

    def waste(self, request: Request) -> Response:
        data, q = self.reader(), request.query
        end = parse_time(q["to"], "to") if q.get("to") else data.latest()
        if end is None:
            return json_response({"empty": data._no_telemetry(Window(0, 1))})
        return json_response(data.waste(end, q.get("tenant", "").strip() or None))

    def heatmap(self, request: Request) -> Response:
        data = self.reader()
        return json_response(data.heatmap(self.window(data, request, self.serve.view_hours)))

    def alerts(self, request: Request) -> Response:
        data = self.reader()
        return json_response(data.alerts(self.window(data, request, self.serve.view_hours)))

    def idle(self, request: Request) -> Response:
        data = self.reader()
        return json_response(data.idle(self.window(data, request, self.serve.view_hours)))

    def usage(self, request: Request) -> Response:
        data = self.reader()
        return json_response(data.usage(self.window(data, request, self.serve.view_hours)))

    def demand(self, request: Request) -> Response:
        data, q = self.reader(), request.query
        ahead = (parse_hours(q["ahead_hours"], "ahead_hours") if q.get("ahead_hours")
                 else self.serve.forecast_ahead_hours)
        pool = q.get("pool", "").strip() or None
        return json_response(data.demand(self.window(data, request, self.serve.demand_hours), ahead * 3600, pool))

    def billing(self, request: Request) -> Response:
        data, q = self.reader(), request.query
        if q.get("month"):
            month = q["month"].strip()
            if len(month) != 7 or month[4] != "-":
                raise ViewError(f"month: {month!r} is not YYYY-MM")
            start = parse_time(month + "-01", "month")
            w = Window(start, start + 86400, q.get("tenant", "").strip() or None)
        else:
            w = self.window(data, request, self.serve.view_hours)
        return json_response(data.billing(w, month=True))

    def top_json(self, request: Request) -> Response:
        return json_response(dataclasses.asdict(top.snapshot(self.reader())))


ROUTES = (   # path, handler (a Routes method), what it answers, whether a page (errors as HTML)
    ("/", "fleet", "the fleet page (HTML)", True),
    ("/incident", "incident", "an incident and the telemetry around it (HTML), ?id=", True),
    ("/v1/incident", "incident_json", "an incident and the telemetry around it, ?id=", False),
    ("/v1/fleet/heatmap", "heatmap", "utilization by GPU and time bucket, idle windows, GPUs idle now, silent nodes",
     False),
    ("/v1/fleet/waste", "waste", "idle and underused GPUs now with the money per hour, and the waste billed today "
     "and this month, by pool and tenant", False),
    ("/v1/fleet/alerts", "alerts", "incidents firing, and resolved in the window", False),
    ("/v1/fleet/idle", "idle", "idle runs in the window with their cost", False),
    ("/v1/fleet/usage", "usage", "utilization and idle cost by pool and tenant", False),
    ("/v1/fleet/demand", "demand", "demand, latest forecast and scale decisions per pool", False),
    ("/v1/fleet/billing", "billing", "billing totals of a month (?month=YYYY-MM)", False),
    ("/report", "report", "the report of a period as one HTML file (?from=&to=[&tenant=]), as gpufleet report "
     "writes it", True),
    ("/v1/top", "top_json", "what gpufleet top shows, read now", False),
)
