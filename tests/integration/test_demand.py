"""Demand per pool as ClickHouse computes it from the per-GPU rows and the idle windows, the tidal profile, and
the forecast process over it: what is due in event time, published before stored, made once, dry runs kept
off the bus, nothing lost when publishing fails."""
import json
import math

import numpy as np
import pytest
from helpers import gpu, message

from gpufleet.settings import ForecastSettings, ScaleSettings
from gpufleet.streams import embedded
from gpufleet.streams.forecast_events import ForecastEvent, ScaleEvent
from gpufleet.streams.forecasting import ForecastRunner
from gpufleet.streams.pipeline import Pipeline
from gpufleet.streams.sink import Sink

pytestmark = pytest.mark.integration
T0 = 1767571200.0          # 2026-01-05 00:00 UTC, a Monday


def fleet(minutes: float = 40, start: float = T0, pool2: bool = False) -> list[dict]:
    """Pool p1: node n1's 4 GPUs rented all along, n2's GPU 0 rented in minutes 10-29 and GPU 1 in minutes
    32-34; n1's GPU 3 idle in minutes 5-24, its GPU 2 from minute 27.5 on. Every 10 s."""
    out = []
    for i in range(int((minutes * 60 - (start - T0)) // 10)):
        ts = start + i * 10
        m = (ts - T0) / 60
        idle = {3: 5 <= m < 25, 2: m >= 27.5}
        g1 = [gpu(k, f"n1-{k}", tenant="a", job="j1", util_pct=0.0 if idle.get(k) else 50.0) for k in range(4)]
        rented = {0: 10 <= m < 30, 1: 32 <= m < 35}
        g2 = [gpu(k, f"n2-{k}", tenant="b" if rented.get(k) else None, job="j2" if rented.get(k) else None)
              for k in range(4)]
        out.append(message(ts, "n1", g1, interval_s=10.0, pool="p1"))
        out.append(message(ts, "n2", g2, interval_s=10.0, pool="p1"))
        if pool2:
            out.append(message(ts, "n3", [gpu(0, "n3-0", tenant="c")], interval_s=10.0, pool="p2"))
    return out


def store_fleet(store, messages) -> None:
    embedded.run(embedded.dict_source(messages), Pipeline(), Sink(store))


def test_demand_per_pool_and_5_minute_bucket(embedded_store):
    store_fleet(embedded_store, fleet())
    rows = embedded_store.query("SELECT toUnixTimestamp(bucket) - %(t0)s, minutes, total_gpus, total_gpus_max, "
                                "rented_gpus, rented_gpus_max, round(busy_gpus, 6) FROM pool_demand_5m "
                                "WHERE pool = 'p1' ORDER BY bucket", {"t0": int(T0)})
    assert rows == [
        (0, 5, 8.0, 8, 4.0, 4, 4.0),
        (300, 5, 8.0, 8, 4.0, 4, 3.0),           # GPU 3 idle the whole bucket
        (600, 5, 8.0, 8, 5.0, 5, 4.0),           # n2's GPU 0 rented
        (900, 5, 8.0, 8, 5.0, 5, 4.0),
        (1200, 5, 8.0, 8, 5.0, 5, 4.0),
        (1500, 5, 8.0, 8, 5.0, 5, 4.5),          # GPU 2 idle from 27:30: half the bucket
        (1800, 5, 8.0, 8, 4.6, 5, 3.6),          # n2's GPU 1 rented 3 of the 5 minutes
        (2100, 5, 8.0, 8, 4.0, 4, 3.0),
    ]
    profile = embedded_store.query("SELECT hour_of_week, day_of_week, hour, buckets, rented_mean, rented_p10, "
                                   "rented_p90, round(busy_mean, 6), total_mean FROM pool_tidal_profile "
                                   "WHERE pool = 'p1'")
    assert profile == [(0, 1, 0, 8, pytest.approx(4.575), 4.0, 5.0, round(30.1 / 8, 6), 8.0)]


def runner(store, published: list, **forecast) -> ForecastRunner:
    cfg = ForecastSettings(**{"step_s": 300, "every_s": 600, "horizon_s": 3600, "refit_every_s": 3600,
                              "min_history_s": 0, "settle_s": 60, **forecast})
    scale = ScaleSettings(step_gpus=2, cooldown_s=0, scale_in_after_s=600, pools={"p2": {"dry_run": True}})
    return ForecastRunner(cfg, scale, store, Sink(store), published.extend)


def test_forecasts_and_decisions_in_event_time_published_then_stored_once(embedded_store):
    store_fleet(embedded_store, fleet(pool2=True))
    published: list[dict] = []
    r = runner(embedded_store, published)
    report = r.run_once()
    # telemetry up to 40:00, settled 60 s: forecasts at 10, 20 and 30 min, for both pools
    assert [t - T0 for t in report.made_at] == [600, 1200, 1800]
    forecasts = [ForecastEvent.model_validate(e) for e in published if e["schema"] == "gpufleet.forecast.v1"]
    scales = [ScaleEvent.model_validate(e) for e in published if e["schema"] == "gpufleet.scale.v1"]
    assert sorted((f.pool, f.made_at - T0) for f in forecasts) == [(p, t) for p in ("p1", "p2")
                                                                    for t in (600, 1200, 1800)]
    assert all(len(f.points) == 12 and f.step_s == 300 and f.points[0].ts == f.made_at for f in forecasts)
    assert {s.pool for s in scales} == {"p1"}          # p2's policy is a dry run: stored, not published
    stored = embedded_store.query("SELECT pool, toUnixTimestamp(at) - %(t0)s, action, current_gpus, target_gpus, "
                                  "rented_gpus, dry_run FROM scale_events FINAL ORDER BY pool, at", {"t0": int(T0)})
    assert [(p, t, d) for p, t, *_, d in stored] == [("p1", 600, 0), ("p1", 1200, 0), ("p1", 1800, 0),
                                                     ("p2", 600, 1), ("p2", 1200, 1), ("p2", 1800, 1)]
    assert all(target >= rented for *_, target, rented, _ in stored)
    p1 = [s for s in scales]
    assert [(s.current_gpus, s.target_gpus) for s in p1] == [(row[3], row[4]) for row in stored[:3]]
    # the stored points are the published ones
    rows = embedded_store.query("SELECT pool, toUnixTimestamp(made_at), toUnixTimestamp(ts), demand_gpus, p10, p90 "
                                "FROM forecasts FINAL ORDER BY pool, made_at, ts")
    assert rows == [(f.pool, int(f.made_at), int(p.ts), p.demand_gpus, p.p10, p.p90)
                    for f in sorted(forecasts, key=lambda f: (f.pool, f.made_at)) for p in f.points]
    # made once: a second look finds nothing due
    published.clear()
    assert r.run_once().made_at == [] and published == []
    # more telemetry: only the new times
    store_fleet(embedded_store, fleet(minutes=60, start=T0 + 2400, pool2=True))
    assert [t - T0 for t in runner(embedded_store, published).run_once().made_at] == [2400, 3000]


def test_a_failed_publish_stores_nothing_and_the_next_run_makes_the_same_again(embedded_store):
    store_fleet(embedded_store, fleet())
    published: list[dict] = []
    calls = {"n": 0}

    def flaky(events: list[dict]) -> None:
        calls["n"] += 1
        if calls["n"] == 2:                              # the second time's events do not reach the bus
            raise ConnectionError("broker unreachable")
        published.extend(events)

    r = ForecastRunner(runner(embedded_store, []).cfg, runner(embedded_store, []).scale, embedded_store,
                       Sink(embedded_store), flaky)
    with pytest.raises(ConnectionError):
        r.run_once()
    # the first time was published and stored, the second neither
    assert embedded_store.query("SELECT DISTINCT toUnixTimestamp(made_at) - %(t0)s FROM forecasts",
                                {"t0": int(T0)}) == [(600,)]
    r.run_once()
    made = [e["made_at"] - T0 for e in published if e["schema"] == "gpufleet.forecast.v1"]
    assert made == [600, 1200, 1800]
    assert embedded_store.query("SELECT count(), uniqExact(made_at, ts) FROM forecasts FINAL")[0] == (36, 36)
    # the same input, the same forecasts: a fresh runner over a copy would publish these very events
    again: list[dict] = []
    embedded_store.command("TRUNCATE TABLE forecasts")
    embedded_store.command("TRUNCATE TABLE scale_events")
    runner(embedded_store, again).run_once()
    assert json.dumps(again, sort_keys=True) == json.dumps(published, sort_keys=True)


def test_forecast_run_publishes_stores_and_stops_on_sigterm(server_store, clickhouse_url, kafka_bootstrap):
    """`gpufleet forecast run` as an operator starts it: events on the topics, rows in the store, then SIGTERM."""
    import os
    import signal
    import subprocess
    import sys
    import uuid

    from gpufleet.streams.kafka import consume

    store_fleet(server_store, fleet(pool2=True))
    prefix = f"f{uuid.uuid4().hex[:8]}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")},
           "GPUFLEET_KAFKA__BOOTSTRAP": kafka_bootstrap, "GPUFLEET_KAFKA__TOPIC_PREFIX": prefix,
           "GPUFLEET_STORE__DSN": clickhouse_url, "GPUFLEET_STORE__DATABASE": server_store.database,
           "GPUFLEET_FORECAST__STEP_S": "300", "GPUFLEET_FORECAST__EVERY_S": "600",
           "GPUFLEET_FORECAST__HORIZON_S": "3600", "GPUFLEET_FORECAST__MIN_HISTORY_S": "0",
           "GPUFLEET_FORECAST__SETTLE_S": "60", "GPUFLEET_FORECAST__POLL_S": "1",
           "GPUFLEET_SCALE__POOLS": json.dumps({"p2": {"dry_run": True}})}
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet", "forecast", "run"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("made 6 forecasts and 6 scale decisions at 3 times"), line + proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert proc.stdout.read().strip() == "stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
    forecasts = [json.loads(v) for _, v in consume(kafka_bootstrap, f"{prefix}.forecast", "check", to_end=True)]
    scales = [json.loads(v) for _, v in consume(kafka_bootstrap, f"{prefix}.scale", "check", to_end=True)]
    assert sorted((e["pool"], e["made_at"] - T0) for e in forecasts) == [(p, t) for p in ("p1", "p2")
                                                                          for t in (600, 1200, 1800)]
    assert sorted((e["pool"], e["at"] - T0) for e in scales) == [("p1", 600), ("p1", 1200), ("p1", 1800)]
    assert server_store.query("SELECT count() FROM forecasts FINAL")[0][0] == 6 * 12
    assert server_store.query("SELECT countIf(dry_run = 1), count() FROM scale_events FINAL")[0] == (3, 6)


def test_targets_stay_within_the_gpus_the_pool_has_and_the_rest_is_a_request(embedded_store):
    """p1 shows 8 GPUs and rents 4 or 5; with 150% headroom it wants 10 or more: the target stops at the 8 it has,
    the rest is asked for, in the event and in the row, and every action reads against the GPUs present."""
    store_fleet(embedded_store, fleet())
    published: list[dict] = []
    r = runner(embedded_store, published)
    r.scale = ScaleSettings(step_gpus=2, cooldown_s=0, scale_in_after_s=600, headroom_pct=150)
    r.run_once()
    scales = [ScaleEvent.model_validate(e) for e in published if e["schema"] == "gpufleet.scale.v1"]
    assert len(scales) == 3
    for s in scales:
        assert s.capacity_gpus == 8 and s.current_gpus == 8 and s.target_gpus == 8, s
        assert s.action == "hold" and s.reason.startswith("Hold at 8 GPUs: ") and s.reason.endswith(".")
        assert "capped at the pool's 8 GPUs" in s.reason
        need = math.ceil(2.5 * s.rented_gpus / 2) * 2                  # at least what is rented now asks for
        assert s.capacity_request is not None and s.capacity_request.gpus >= need - 8 >= 2, s
        assert s.capacity_request.from_ == s.at and s.capacity_request.until > s.at
    rows = embedded_store.query("SELECT toUnixTimestamp(at), capacity_gpus, request_gpus, "
                                "toUnixTimestamp(request_from), toUnixTimestamp(request_until), request_p90, reason, "
                                "changed FROM scale_events FINAL ORDER BY at")
    assert rows == [(int(s.at), 8, s.capacity_request.gpus, int(s.capacity_request.from_),
                     int(s.capacity_request.until), s.capacity_request.p90, s.reason, 0) for s in scales]
    # a pool's own capacity (scale.pools.<pool>.capacity_gpus) bounds it below what telemetry shows
    embedded_store.command("TRUNCATE TABLE forecasts")
    embedded_store.command("TRUNCATE TABLE scale_events")
    published.clear()
    r.scale = ScaleSettings(step_gpus=2, cooldown_s=0, scale_in_after_s=600, pools={"p1": {"capacity_gpus": 6}})
    r.run_once()
    scales = [ScaleEvent.model_validate(e) for e in published if e["schema"] == "gpufleet.scale.v1"]
    assert [(s.capacity_gpus, s.target_gpus, s.action) for s in scales] == [(6, 6, "scale_down")] * 3
    assert [s.capacity_request.gpus if s.capacity_request else 0 for s in scales] == [0, 0, 0]


def test_the_rentals_are_each_gpu_s_runs_with_one_tenant(embedded_store):
    """What the forecaster's rentals candidate reads: each run of a GPU's minutes with one tenant, a telemetry gap
    of up to 10 minutes kept inside, one that reaches the end of the telemetry still running."""
    from gpufleet.streams.forecasting import read_rentals

    messages = fleet()
    for i in range(240):                       # n3's GPU: tenant c in minutes 0-9 and 15-19 (a 5-minute gap), 35-39
        ts = T0 + i * 10
        m = (ts - T0) / 60
        if m < 10 or 15 <= m < 20 or m >= 35:
            messages.append(message(ts, "n3", [gpu(0, "n3-0", tenant="c", job="j3")], interval_s=10.0, pool="p1"))
    store_fleet(embedded_store, messages)
    end = T0 + 2400
    r = read_rentals(embedded_store, "p1", T0, end, end)
    got = sorted((t, a - T0, b - T0) for a, b, t in zip(r.start, r.end, r.tenant))
    inf = float("inf")
    assert got == sorted([("a", 0, inf)] * 4 + [("b", 600, 1800), ("b", 1920, 2100), ("c", 0, 1200), ("c", 2100, inf)])
    assert r.gpus.tolist() == [1.0] * 8
    # held at each minute is the pool's rented GPUs (the demand the forecaster forecasts), but in the gap, where
    # the rental goes on unseen
    minutes = T0 + 60 * np.arange(40)
    rented = embedded_store.query("SELECT toUnixTimestamp(minute), countIf(tenant != '') FROM usage_gpu_1m FINAL "
                                  "WHERE pool = 'p1' GROUP BY minute ORDER BY minute")
    held = r.held(minutes + 30).tolist()
    assert [h - (10 <= i < 15) for i, h in enumerate(held)] == [float(n) for _, n in rented]


@pytest.mark.slow
def test_the_forecast_process_forecasts_with_the_rentals_it_reads(embedded_store):
    """A pool of tenants (two weeks of the simulator's rentals, each GPU of a rental on a GPU of its own) written
    as the per-GPU minutes the pipeline stores: the forecast process reads the rentals back, and the candidate
    built on them serves some horizons; without them (forecast.rentals false) none."""
    from gpufleet.collectors.simulator.demand import tenant_pool

    start = T0
    _, _, held = tenant_pool(2, seed=21, rentals_per_hour=6, start=start)
    runs = []                                # each rental's GPUs on GPUs free at its start
    ends: list[float] = []
    for a, b, g, tenant in sorted(held):
        for _ in range(int(g)):
            i = next((k for k, e in enumerate(ends) if e <= a), None)
            if i is None:
                ends.append(b)
                i = len(ends) - 1
            ends[i] = b
            runs.append((i, a, b, tenant))
    end = start + 14 * 86400
    rows = []
    for i, a, b, tenant in runs:
        for m in range(int(max(a, start) // 300 + 1) * 300, int(min(b, end)), 300):
            rows.append((m, "p9", tenant, f"g{i}", 50.0, 50.0, 300.0, 1e9))
    busy = {(r[0], r[3]) for r in rows}
    rows += [(m, "p9", "", f"g{i}", 0.0, 0.0, 60.0, 0.0) for m in range(int(start), int(end), 300)
             for i in range(len(ends)) if (m, f"g{i}") not in busy]
    embedded_store.write("usage_gpu_1m", ["minute", "pool", "tenant", "gpu_uuid", "util", "util_max", "power",
                                          "mem_used"], rows)
    methods = {}
    for rentals in (True, False):
        embedded_store.command("TRUNCATE TABLE forecasts")
        embedded_store.command("TRUNCATE TABLE scale_events")
        r = ForecastRunner(ForecastSettings(rentals=rentals), ScaleSettings(), embedded_store, Sink(embedded_store),
                           lambda events: None)
        assert r.run_once().forecasts == 25                         # the last day's, every hour
        methods[rentals] = dict(embedded_store.query("SELECT method, count() FROM forecasts FINAL GROUP BY method"))
    assert methods[True].get("rentals", 0) >= 25 * 6, methods[True]     # at least an hour of each forecast
    assert "rentals" not in methods[False]
