"""The fleet gauges' own logic over given waste and incidents: tenants bounded with the rest summed, values cached
between computations, and an empty store. That they equal the store's answers is tests/integration/test_views.py."""
import math

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.view.gauges import OTHER, FleetGauges


def tenant(name, rented, idle=0, underused=0, per_hour="0"):
    return {"tenant": name, "gpus": rented, "rented": rented, "busy": rented - idle, "idle": idle,
            "underused": underused, "waste_per_hour": per_hour}


class Data:
    reads = 0

    def __init__(self, latest=1000.0):
        self._latest = latest
        Data.reads += 1

    def latest(self):
        return self._latest

    def waste(self, end):
        assert end == self._latest
        span = {"tenant_waste_amount": "3.5", "unsold_amount": "1.25", "currency": "USD"}
        return {"currency": "USD",
                "pools": [{"pool": "east", "gpus": 8, "rented": 6, "busy": 4, "idle": 2, "underused": 1,
                           "waste_per_hour": "5.5", "today": span, "month": span}],
                "tenants": [tenant(f"t{i:02d}", 1 + i % 3, idle=i % 2, per_hour="1.5") for i in range(7)]}

    def incidents(self, w):
        return [{"kind": "idle", "severity": "warning", "status": "firing"},
                {"kind": "idle", "severity": "warning", "status": "firing"},
                {"kind": "straggler", "severity": "critical", "status": "resolved"}]


def scrape(gauges) -> dict:
    registry = CollectorRegistry()
    registry.register(gauges)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}


def test_tenants_beyond_the_limit_are_summed_as_other_and_the_rest_is_as_given():
    got = scrape(FleetGauges(Data, tenants=3, clock=lambda: 1030.0))
    tenants = {dict(k)["tenant"] for (name, k) in got if name == "gpufleet_tenant_gpus"}
    # the three with the most rented GPUs (3, 3, 2: t02, t05, then t01 before t04 by name), and the rest
    assert tenants == {"t02", "t05", "t01", OTHER}
    assert got[("gpufleet_tenant_gpus", (("state", "rented"), ("tenant", OTHER)))] == 1 + 2 + 1 + 1   # t00 t03 t04 t06
    assert got[("gpufleet_tenant_waste_per_hour", (("currency", "USD"), ("tenant", OTHER)))] == 6.0
    assert got[("gpufleet_gpus", (("pool", "east"), ("state", "installed")))] == 8
    assert got[("gpufleet_waste_amount", (("currency", "USD"), ("paid_by", "provider"), ("period", "month"),
                                          ("pool", "east")))] == 1.25
    assert got[("gpufleet_alerts_firing", (("kind", "idle"), ("severity", "warning")))] == 2
    assert not any(name == "gpufleet_alerts_firing" and dict(k)["kind"] == "straggler" for (name, k) in got)
    assert got[("gpufleet_telemetry_age_seconds", ())] == 30.0


def test_scrapes_within_the_cache_time_read_the_store_once():
    Data.reads = 0
    gauges = FleetGauges(Data, cache_s=3600)
    for _ in range(5):
        scrape(gauges)
    assert Data.reads == 1
    gauges.cache_s = 0
    scrape(gauges)
    assert Data.reads == 2


def test_an_empty_store_gives_no_fleet_and_an_unknown_age():
    got = scrape(FleetGauges(lambda: Data(latest=None)))
    assert math.isnan(got[("gpufleet_telemetry_age_seconds", ())])
    assert not any(name == "gpufleet_gpus" for (name, _) in got)
