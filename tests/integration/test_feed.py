"""The forecast feed over real HTTP from a real ClickHouse server, read exactly the way KEDA's metrics-api scaler
reads it: an HTTP GET of the URL in the sample ScaledObject, then its valueLocation as a GJSON path."""
import json
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_demand import T0, fleet, runner, store_fleet

from gpufleet import feed, web
from gpufleet.streams.forecast_events import ForecastEvent

pytestmark = pytest.mark.integration
SCALED_OBJECT = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "keda-scaledobject.yaml"


def gjson(document: bytes, path: str):
    """What KEDA's metrics-api scaler does with valueLocation (gjson.GetBytes): a dotted path of object keys
    (``\\.`` for a dot inside a key) and array indexes; the value must be a number (or a numeric string)."""
    value = json.loads(document)
    for part in re.split(r"(?<!\\)\.", path):
        part = part.replace("\\.", ".")
        value = value[int(part)] if isinstance(value, list) else value[part]
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"value at {path} is not a number: {value!r}")
    return float(value)


def keda_trigger() -> tuple[str, str]:
    text = SCALED_OBJECT.read_text()
    url = re.search(r'^\s+url:\s*"([^"]+)"', text, re.M).group(1)
    location = re.search(r'^\s+valueLocation:\s*"([^"]+)"', text, re.M).group(1)
    assert re.search(r"^\s+- type: metrics-api$", text, re.M)
    return url, location


def get(url: str) -> tuple[int, bytes, str]:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})    # as KEDA sends it
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers.get("Content-Type", "")


@pytest.fixture
def served(server_store):
    """A store with forecasts and decisions for pools p1 and p2 (p2 a dry run), and the feed serving it."""
    store_fleet(server_store, fleet(pool2=True))
    runner(server_store, []).run_once()
    router = web.Router()
    feed.mount(router, server_store)
    server = web.make_server(router, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server_store, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def latest_decision(store, pool: str) -> tuple:
    return store.query("SELECT action, current_gpus, target_gpus, dry_run FROM scale_events FINAL WHERE pool = "
                       "%(p)s ORDER BY at DESC LIMIT 1", {"p": pool})[0]


def test_keda_metrics_api_reads_the_target_at_the_documented_value_location(served):
    store, base = served
    url, location = keda_trigger()
    assert location == feed.KEDA_VALUE_LOCATION
    path = url.split("://", 1)[1].split("/", 1)[1]                # the sample's path and query, on our server
    assert path == "v1/scale?pool=h100-sxm-east"
    for pool in ("p1", "p2"):
        status, body, kind = get(f"{base}/{path.replace('h100-sxm-east', pool)}")
        assert status == 200 and kind.startswith("application/json")
        action, current, target, dry_run = latest_decision(store, pool)
        value = gjson(body, location)
        # a dry run holds the GPUs present; otherwise the decision's target
        assert value == (current if dry_run else target), (pool, body)
        assert gjson(body, "would_target_gpus") == target and gjson(body, "lead_time_s") == 900
        assert bool(dry_run) is (pool == "p2")
        # when the decision was made, what the pool has (no target above it) and nothing asked beyond it
        doc = json.loads(body)
        at, capacity, reason = store.query("SELECT toUnixTimestamp(max(at)), argMax(capacity_gpus, at), "
                                           "argMax(reason, at) FROM scale_events FINAL WHERE pool = %(p)s",
                                           {"p": pool})[0]
        assert doc["decided_at"] == doc["at"] == at and doc["reason"] == reason
        assert doc["capacity_gpus"] == capacity == {"p1": 8, "p2": 1}[pool] >= doc["would_target_gpus"]
        # p2's one GPU is rented and 10% headroom rounds to 2 of its 2-GPU steps: one more step is asked for, on
        # the demand observed (half an hour of history is short of the day a request on the forecast needs), from
        # now through the lead time and the next decision (900 + 600 s)
        assert doc["capacity_request"] == (None if pool == "p1" else {
            "gpus": 2, "from": at, "until": at + 1500, "p90": 1.0}) and doc["reason"].endswith(".")


def test_the_latest_forecast_and_the_errors(served):
    store, base = served
    status, body, _ = get(f"{base}/v1/forecast?pool=p1")
    assert status == 200
    ev = ForecastEvent.model_validate(json.loads(body))
    assert ev.pool == "p1" and ev.made_at == T0 + 1800 and len(ev.points) == 12
    stored = store.query("SELECT demand_gpus, p10, p90 FROM forecasts FINAL WHERE pool = 'p1' AND "
                         "toUnixTimestamp(made_at) = %(t)s ORDER BY ts", {"t": int(T0 + 1800)})
    assert [(p.demand_gpus, p.p10, p.p90) for p in ev.points] == stored
    assert json.loads(get(f"{base}/v1/pools")[1]) == {"pools": ["p1", "p2"]}
    for url, code, words in ((f"{base}/v1/forecast", 400, "pool is required"),
                             (f"{base}/v1/scale?pool=", 400, "pool is required"),
                             (f"{base}/v1/forecast?pool=nope", 404, "no forecast for pool 'nope'"),
                             (f"{base}/v1/scale?pool=nope", 404, "no scale decision"),
                             (f"{base}/v2/elsewhere", 404, "no such path")):
        status, body, kind = get(url)
        assert status == code and words in json.loads(body)["error"] and kind.startswith("application/json"), url
    assert get(f"{base}/health")[0] == 200


def test_metrics_carry_the_forecast_and_the_target(served):
    store, base = served
    assert get(f"{base}/v1/scale?pool=p1")[0] == 200
    status, body, kind = get(f"{base}/metrics")
    assert status == 200 and kind.startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(body.decode()) for s in family.samples}
    _, current, target, _ = latest_decision(store, "p1")
    assert samples[("gpufleet_scale_target_gpus", (("pool", "p1"),))] == target
    assert samples[("gpufleet_scale_current_gpus", (("pool", "p1"),))] == current
    assert samples[("gpufleet_scale_dry_run", (("pool", "p2"),))] == 1
    assert samples[("gpufleet_scale_capacity_gpus", (("pool", "p1"),))] == 8
    assert samples[("gpufleet_scale_capacity_request_gpus", (("pool", "p1"),))] == 0
    assert samples[("gpufleet_forecast_made_at_seconds", (("pool", "p1"),))] == T0 + 1800
    hour = store.query("SELECT demand_gpus, p90 FROM forecasts FINAL WHERE pool = 'p1' AND toUnixTimestamp(made_at) "
                       "= %(t)s AND toUnixTimestamp(ts) = %(ts)s", {"t": int(T0 + 1800), "ts": int(T0 + 1800 + 3300)})
    labels = (("band", "demand"), ("horizon", "1h"), ("pool", "p1"))
    assert samples[("gpufleet_forecast_demand_gpus", labels)] == hour[0][0]
    assert samples[("gpufleet_forecast_demand_gpus", (("band", "p90"),) + labels[1:])] == hour[0][1]
    assert samples[("gpufleet_feed_requests_total", (("code", "200"), ("path", "/v1/scale")))] == 1


def test_gpufleet_serve_binds_loopback_serves_the_feed_and_stops_on_sigterm(served, clickhouse_url):
    store, _ = served
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet", "serve", "--port", "0", "--dsn", clickhouse_url,
                             "--database", store.database], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.match(r"serving on http://127\.0\.0\.1:(\d+): ", line)
        assert m, line + proc.stderr.read() if proc.poll() is not None else line
        status, body, _ = get(f"http://127.0.0.1:{m.group(1)}/v1/scale?pool=p1")
        assert status == 200 and gjson(body, "target_gpus") == latest_decision(store, "p1")[2]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_capacity_request_is_served_beside_the_target_never_as_it(server_store):
    """Demand beyond the pool: /v1/scale keeps target_gpus within capacity_gpus (what KEDA reads) and carries the
    rest as capacity_request, from when and until when, with the forecast's p90 behind it."""
    store_fleet(server_store, fleet())
    r = runner(server_store, [])
    r.scale = r.scale.model_copy(update={"headroom_pct": 150.0})
    r.run_once()
    router = web.Router()
    registry = feed.mount(router, server_store)
    server = web.make_server(router, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        status, body, _ = get(f"http://127.0.0.1:{server.server_address[1]}/v1/scale?pool=p1")
        assert status == 200
        doc = json.loads(body)
        assert gjson(body, feed.KEDA_VALUE_LOCATION) == doc["capacity_gpus"] == 8
        req = doc["capacity_request"]
        stored = server_store.query("SELECT request_gpus, toUnixTimestamp(request_from), "
                                    "toUnixTimestamp(request_until), request_p90 FROM scale_events FINAL "
                                    "WHERE pool = 'p1' ORDER BY at DESC LIMIT 1")
        assert (req["gpus"], req["from"], req["until"], req["p90"]) == stored[0] and req["gpus"] >= 2
        assert req["from"] == doc["decided_at"] and req["until"] > req["from"]
        assert registry.get_sample_value("gpufleet_scale_capacity_request_gpus", {"pool": "p1"}) == req["gpus"]
    finally:
        server.shutdown()
        server.server_close()
