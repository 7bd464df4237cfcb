import json
import math

import pytest
from helpers import gpu, message
from pydantic import ValidationError

from gpufleet.contracts.telemetry import MAX_GPUS, Telemetry, TelemetryError, check_clock, parse


def test_minimal_message_with_nulls_is_valid():
    m = parse({"schema": "gpufleet.telemetry.v1", "ts": 1.7e9, "node": "n1",
               "gpus": [{"uuid": "GPU-a", "index": 0, "util_pct": None, "tenant": None}]})
    assert m.gpus[0].util_pct is None and m.host is None and m.gpus[0].processes == []


def test_unknown_fields_are_ignored_not_rejected():
    m = parse(json.dumps(message(1.7e9, future_field={"x": 1}, gpus=[gpu(0, new_metric=3)])))
    assert m.node == "n1"
    assert "future_field" not in m.to_dict()


def test_round_trip_keeps_wire_names():
    text = parse(message(1.7e9)).to_json()
    assert json.loads(text)["schema"] == "gpufleet.telemetry.v1"
    assert parse(text) == parse(message(1.7e9))


@pytest.mark.parametrize("mutate, path", [
    (lambda m: m.pop("node"), "node"),
    (lambda m: m.pop("ts"), "ts"),
    (lambda m: m.update(schema="gpufleet.telemetry.v2"), "schema"),
    (lambda m: m["gpus"][0].pop("uuid"), "gpus.0.uuid"),
    (lambda m: m["gpus"][0].pop("index"), "gpus.0.index"),
    (lambda m: m["gpus"][0].update(util_pct=100.5), "gpus.0.util_pct"),
    (lambda m: m["gpus"][0].update(power_w=-1), "gpus.0.power_w"),
    (lambda m: m["gpus"][0].update(util_pct="high"), "gpus.0.util_pct"),
    (lambda m: m.update(seq=-1), "seq"),
    (lambda m: m.update(interval_s=0), "interval_s"),
    (lambda m: m.update(node="x" * 254), "node"),
    (lambda m: m["gpus"][0].update(tenant=""), "gpus.0.tenant"),
    (lambda m: m["gpus"][0].update(attribution="guess"), "gpus.0.attribution"),
    (lambda m: m["gpus"][0].update(xid_events=[79] * 65), "gpus.0.xid_events"),
    (lambda m: m["gpus"][0].update(processes=[{"pid": -3}]), "gpus.0.processes.0.pid"),
    (lambda m: m.update(host={"iowait_pct": 101}), "host.iowait_pct"),
])
def test_invalid_field_is_named_in_the_error(mutate, path):
    m = message(1.7e9)
    mutate(m)
    with pytest.raises(TelemetryError) as err:
        parse(json.dumps(m))
    assert err.value.reason_code == "invalid"
    assert err.value.reason.startswith(path + ":"), err.value.reason


def test_memory_used_cannot_exceed_total():
    with pytest.raises(TelemetryError, match="gpus.0: .*mem_used_bytes exceeds mem_total_bytes"):
        parse(message(1.7e9, gpus=[gpu(0, mem_used_bytes=9e10, mem_total_bytes=8e10)]))
    with pytest.raises(TelemetryError, match="host: .*exceeds"):
        parse(message(1.7e9, host={"mem_used_bytes": 2, "mem_total_bytes": 1}))


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_rejected(literal):
    text = json.dumps(message(1.7e9)).replace('"power_w": 300.0', f'"power_w": {literal}')
    assert literal in text
    with pytest.raises(TelemetryError, match="gpus.0.power_w"):
        parse(text)
    with pytest.raises(TelemetryError):
        parse(message(1.7e9, gpus=[gpu(0, temp_c=math.nan)]))


def test_list_sizes_and_duplicate_gpus_are_bounded():
    with pytest.raises(TelemetryError, match="gpus"):
        parse(message(1.7e9, gpus=[gpu(i) for i in range(MAX_GPUS + 1)]))
    with pytest.raises(TelemetryError, match="same uuid"):
        parse(message(1.7e9, gpus=[gpu(0, uuid="GPU-x"), gpu(1, uuid="GPU-x")]))


def test_oversized_and_unparsable_payloads():
    with pytest.raises(TelemetryError) as err:
        parse(b"{" + b" " * (2 << 20) + b"}")
    assert err.value.reason_code == "too_large"
    with pytest.raises(TelemetryError) as err:
        parse("not json at all")
    assert err.value.reason_code == "invalid" and "JSON" in err.value.reason


def test_clock_skew_rule():
    m = parse(message(1000.0))
    check_clock(m, now=800.0, max_skew_s=300)              # 200 s ahead: fine
    check_clock(m, now=5000.0, max_skew_s=300)             # behind is never skew
    with pytest.raises(TelemetryError) as err:
        check_clock(m, now=600.0, max_skew_s=300)          # 400 s ahead
    assert err.value.reason_code == "clock_skew" and err.value.reason.startswith("ts:")


def test_model_is_frozen():
    m = parse(message(1.7e9))
    with pytest.raises(ValidationError):
        m.ts = 5.0
    assert isinstance(m, Telemetry)
