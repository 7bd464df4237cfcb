"""Fleet gauges for Prometheus on ``gpufleet serve``'s ``/metrics``: what the fleet page shows now, as numbers to
graph and alert on (``deploy/prometheus/`` holds recording and alerting rules over them).

Computed from the store (the waste, the firing incidents and the newest telemetry, as the page reads them) at most
once per ``cache_s``: a scrape between two computations gets the last values, so a scrape every few seconds
costs the store nothing more. Labels are bounded: pools as the fleet has them, tenants the ``tenants`` with the
most rented GPUs (the rest summed as ``tenant="(other)"``), kinds and severities as the detectors name them.
"""
from __future__ import annotations

import threading
import time

from prometheus_client.core import GaugeMetricFamily

from gpufleet.view.data import FleetData, Window

STATES = ("installed", "rented", "busy", "idle", "underused")
OTHER = "(other)"


class FleetGauges:
    """A prometheus_client collector; ``reader()`` gives a fresh :class:`FleetData` over the store."""

    def __init__(self, reader, cache_s: float = 15.0, tenants: int = 50, clock=time.time):
        self.reader, self.cache_s, self.tenants = reader, cache_s, tenants
        self.clock = clock
        self.lock = threading.Lock()
        self._at = -1e18
        self._families: list[GaugeMetricFamily] = []

    def collect(self):
        with self.lock:
            now = time.monotonic()
            if now - self._at >= self.cache_s:
                self._families = self._compute()
                self._at = now
            yield from self._families

    def _compute(self) -> list[GaugeMetricFamily]:
        data: FleetData = self.reader()
        latest = data.latest()
        gpus = GaugeMetricFamily(
            "gpufleet_gpus", "GPUs now, by pool and state: installed (reporting in the last 5 min), rented, busy "
            "(rented and not idle; underused ones included), idle (in an idle window), underused (busy, below "
            "billing.underuse_pct utilization over the last hour)", labels=["pool", "state"])
        tenant_gpus = GaugeMetricFamily("gpufleet_tenant_gpus", "GPUs rented now, by tenant and state (rented, busy, "
                                        "idle, underused)", labels=["tenant", "state"])
        per_hour = GaugeMetricFamily("gpufleet_waste_per_hour", "Money wasted per hour now: idle GPUs at their "
                                     "price per GPU-hour, underused ones at its unused share", labels=["pool",
                                                                                                        "currency"])
        tenant_per_hour = GaugeMetricFamily("gpufleet_tenant_waste_per_hour", "Money wasted per hour now, by tenant",
                                            labels=["tenant", "currency"])
        amount = GaugeMetricFamily(
            "gpufleet_waste_amount", "Waste on the closed billing records of today and of this month (UTC): "
            "paid_by=tenant is idle_amount + unused_amount, paid_by=provider the unsold capacity (unsold_amount)",
            labels=["pool", "period", "paid_by", "currency"])
        firing = GaugeMetricFamily("gpufleet_alerts_firing", "Incidents firing now, by kind and severity",
                                   labels=["kind", "severity"])
        age = GaugeMetricFamily("gpufleet_telemetry_age_seconds", "Wall-clock seconds since the end of the newest "
                                "minute of telemetry in the store (NaN when there is none)")
        newest = GaugeMetricFamily("gpufleet_telemetry_newest_seconds", "Event time of the end of the newest minute "
                                   "of telemetry in the store")
        families = [gpus, tenant_gpus, per_hour, tenant_per_hour, amount, firing, age, newest]
        if latest is None:
            age.add_metric([], float("nan"))
            return families
        age.add_metric([], max(0.0, self.clock() - latest))
        newest.add_metric([], latest)
        waste = data.waste(latest)
        for p in waste["pools"]:
            pool = p["pool"] or ""
            for state in STATES:
                gpus.add_metric([pool, state], p["gpus" if state == "installed" else state])
            per_hour.add_metric([pool, waste["currency"]], float(p["waste_per_hour"]))
            for period in ("today", "month"):
                t = p[period]
                amount.add_metric([pool, period, "tenant", t["currency"]], float(t["tenant_waste_amount"]))
                amount.add_metric([pool, period, "provider", t["currency"]], float(t["unsold_amount"]))
        ranked = sorted((t for t in waste["tenants"] if t["rented"]), key=lambda t: (-t["rented"], t["tenant"]))
        kept, rest = ranked[:self.tenants], ranked[self.tenants:]
        rows = [(t["tenant"], t) for t in kept]
        if rest:
            rows.append((OTHER, {k: sum(t[k] for t in rest) for k in ("rented", "busy", "idle", "underused")}
                         | {"waste_per_hour": sum(float(t["waste_per_hour"]) for t in rest)}))
        for name, t in rows:
            for state in ("rented", "busy", "idle", "underused"):
                tenant_gpus.add_metric([name, state], t[state])
            tenant_per_hour.add_metric([name, waste["currency"]], float(t["waste_per_hour"]))
        counts: dict[tuple[str, str], int] = {}
        for a in data.incidents(Window(latest - 3600, latest)):
            if a["status"] != "firing":
                continue
            counts[(a["kind"], a["severity"])] = counts.get((a["kind"], a["severity"]), 0) + 1
        for (kind, severity), n in sorted(counts.items()):
            firing.add_metric([kind, severity], n)
        return families
