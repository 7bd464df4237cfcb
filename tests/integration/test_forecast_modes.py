"""Demand and forecasts are the same in both modes for the same input.

A simulated fleet of 30 hours goes through `gpufleet replay` (embedded: chdb in-process, forecasts made at the
end of the input) and through the distributed mode (published to Kafka, a Faust worker writing to a
ClickHouse server, then `gpufleet forecast run --once` publishing to the forecast and scale topics). The
demand views, the tidal profile, the forecasts and the scale decisions stored, and the forecast and scale
events (replay's output against the topics), must be equal.
"""
import json
import os
import subprocess
import sys

import pytest
from test_parity import same_rows
from test_workers import FAR, Workers, gpufleet

from gpufleet.collectors.simulator import DEFAULT_START, FleetSpec, Simulation
from gpufleet.sql.store import Store
from gpufleet.streams.forecast_events import ForecastEvent, ScaleEvent
from gpufleet.streams.kafka import consume

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUERIES = {
    "pool_demand_5m": "SELECT * FROM pool_demand_5m ORDER BY pool, bucket",
    "pool_tidal_profile": "SELECT * FROM pool_tidal_profile ORDER BY pool, hour_of_week",
    "forecasts": "SELECT * FROM forecasts FINAL ORDER BY pool, made_at, ts",
    "scale_events": "SELECT * FROM scale_events FINAL ORDER BY pool, at",
}


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """The recording, and what `gpufleet replay` stores and writes of it."""
    tmp = tmp_path_factory.mktemp("modes")
    sim = Simulation(FleetSpec(nodes=4, gpus_per_node=4, hours=30, interval_s=60, seed=3, faults_per_kind=0,
                               start=DEFAULT_START))
    path = tmp / "telemetry.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in sim.messages()))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}, **FAR}
    dsn = f"chdb://{tmp / 'replay'}"
    out = gpufleet("replay", str(path), "--events", str(tmp / "events.jsonl"), "--dsn", dsn, env=env)
    assert out.returncode == 0, out.stderr
    assert "forecasts: " in out.stdout, out.stdout
    reader = subprocess.run([sys.executable, "-c", "import json\nfrom gpufleet.sql.store import Store\n"
                             f"s = Store.connect({dsn!r}, 'gpufleet')\n"
                             f"print(json.dumps({{t: s.query(q) for t, q in {QUERIES!r}.items()}}, default=str))"],
                            capture_output=True, text=True, timeout=300)
    assert reader.returncode == 0, reader.stderr
    events = [json.loads(x) for x in (tmp / "events.jsonl").read_text().splitlines()]
    return path, json.loads(reader.stdout), events


def test_demand_and_forecasts_are_the_same_in_both_modes(replayed, kafka_bootstrap, clickhouse_url, tmp_path):
    path, expected, events = replayed
    forecasts = [e for e in events if e["schema"] == "gpufleet.forecast.v1"]
    scales = [e for e in events if e["schema"] == "gpufleet.scale.v1"]
    for e in forecasts:
        ForecastEvent.model_validate(e)
    for e in scales:
        ScaleEvent.model_validate(e)
    # a day of forecasts (forecast.backfill_s) every hour for the three pools, and a decision with each
    assert len(forecasts) == len(scales) == 3 * 25, (len(forecasts), len(scales))
    assert len({e["made_at"] for e in forecasts}) == 25
    assert len(expected["forecasts"]) == 75 * 288
    # within what each pool has; the words agree with the numbers (no pool here grows: every target is bounded)
    assert len({e["action"] for e in scales}) >= 2
    for e in scales:
        assert e["target_gpus"] <= e["capacity_gpus"] and e["rented_gpus"] <= e["target_gpus"], e
        assert e["action"] == ("scale_up" if e["target_gpus"] > e["current_gpus"] else "scale_down"
                               if e["target_gpus"] < e["current_gpus"] else "hold"), e

    workers = Workers(kafka_bootstrap, clickhouse_url, tmp_path)
    try:
        assert gpufleet("topics", env=workers.env).returncode == 0
        workers.start("a")
        sender = workers.publish(path)
        sender.join()
        assert sender.result["out"].returncode == 0, sender.result["out"].stderr
        workers.processed()
    finally:
        workers.stop_all()
    out = gpufleet("forecast", "run", "--once", env=workers.env)
    assert out.returncode == 0, out.stderr
    assert "made 75 forecasts and 75 scale decisions at 25 times" in out.stdout, out.stdout

    store = Store.connect(clickhouse_url, workers.database)
    try:
        for table, sql in QUERIES.items():
            got = json.loads(json.dumps(store.query(sql), default=str))
            assert len(got) == len(expected[table]) > 0, table
            assert same_rows(got, expected[table]), (table, [(g, e) for g, e in zip(got, expected[table])
                                                             if g != e][:2])
    finally:
        store.close()

    def topic(name: str) -> list[dict]:
        return [json.loads(v) for _, v in consume(kafka_bootstrap, f"{workers.prefix}.{name}",
                                                  f"check-{name}", idle_timeout_s=5, to_end=True)]
    key = lambda e: (e["pool"], e.get("made_at", e.get("at")))          # noqa: E731
    # the very same events: forecasts to the last digit
    assert sorted(topic("forecast"), key=key) == sorted(forecasts, key=key)
    assert sorted(topic("scale"), key=key) == sorted(scales, key=key)
