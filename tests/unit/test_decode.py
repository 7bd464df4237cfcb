"""The stream's decoder (msgspec) against the contract (pydantic): the same verdict and the same values for every
message, valid or not, as bytes and as a dict."""
import json
import math
import random

import pytest
from helpers import gpu, message

from gpufleet.contracts import telemetry as contract
from gpufleet.contracts.telemetry import MAX_GPUS, TelemetryError
from gpufleet.streams import decode as fast

VALUES = [-1, 0, 1, 50, 100, 100.5, -50, 200, 201, 4096, 4097, 2**31, 2**31 + 1, 2**63 - 1, 2**63, 2**64, 3.0, 0.5,
          -0.0, 1e308, 32503680000, 3600, 3601, True, False, None, "", "x", "1.5", "7", "x" * 128, "x" * 129,
          "x" * 253, "x" * 254, "labels", "simulated", "bogus", "gpufleet.telemetry.v1", [], [1, 2], [-1], {},
          {"pid": 1}, [{"pid": 7, "mem_used_bytes": 1e9}], [{"pid": -1}], [{"mem_used_bytes": 1}], "\u00e9\u4e2d"]
TOP = ["schema", "ts", "node", "collector_id", "seq", "interval_s", "pool", "dropped", "host", "gpus"]
HOST = ["cpu_util_pct", "iowait_pct", "disk_read_bytes_per_s", "net_rx_bytes_per_s", "mem_used_bytes",
        "mem_total_bytes"]
GPU = ["uuid", "parent_uuid", "mig_profile", "index", "model", "tenant", "job", "attribution", "util_pct",
       "mem_util_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "power_limit_w", "temp_c", "sm_clock_mhz",
       "sm_clock_max_mhz", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "throttle_reasons", "ecc_dbe_total",
       "xid_events", "processes"]


def base() -> dict:
    host = {"cpu_util_pct": 40.0, "iowait_pct": 2.0, "disk_read_bytes_per_s": 1e8, "net_rx_bytes_per_s": 2e8,
            "mem_used_bytes": 1e11, "mem_total_bytes": 5e11}
    gpus = [gpu(i, throttle_reasons=4, temp_c=60.0, xid_events=[], processes=[{"pid": 100 + i, "mem_used_bytes": 1e9}])
            for i in range(3)]
    return message(1767571200.5, host=host, collector_id="c-1", seq=7, gpus=gpus)


def mutated(rng: random.Random) -> dict:
    doc = base()
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        where = rng.random()
        gpus = [g for g in doc.get("gpus") or [] if isinstance(g, dict)] if isinstance(doc.get("gpus"), list) else []
        procs = [p for g in gpus if isinstance(g.get("processes"), list) for p in g["processes"] if isinstance(p, dict)]
        if where < 0.4 and isinstance(doc.get("host"), dict):
            target, names = doc["host"], HOST
        elif where < 0.9 and gpus:
            target, names = rng.choice(gpus), GPU
        elif where >= 0.9 and procs:
            target, names = rng.choice(procs), ["pid", "mem_used_bytes"]
        else:
            target, names = doc, TOP
        name = rng.choice(names)
        if rng.random() < 0.1:
            target.pop(name, None)
        else:
            target[name] = rng.choice(VALUES)
        if rng.random() < 0.05:
            target["unknown_field"] = rng.choice(VALUES)
    return doc


def verdict(fn, data):
    try:
        msg = fn(data)
    except TelemetryError as err:
        return ("error", err.reason_code, err.reason)
    return ("ok", msg.to_dict())


def agree(data) -> tuple:
    expected = verdict(contract.parse, data)
    got = verdict(fast.decode, data)
    assert got == expected, f"{data!r}: decode {got}, contract {expected}"
    if got[0] == "ok":                 # and the same message once it has waited packed, types and all
        msg = fast.decode(data)
        back = fast.unpack_message(fast.pack_message(msg))
        assert isinstance(back, fast.Telemetry) and back.to_json() == msg.to_json(), f"{data!r}: packed"
        strings = fast.Strings()               # and with its strings numbered, as the gate packs it
        back = fast.unpack_message(fast.pack_message(msg, strings), strings)
        assert back.to_json() == msg.to_json(), f"{data!r}: packed with its strings numbered"
    return expected


def test_decode_and_the_contract_agree_on_thousands_of_mutated_messages_as_bytes_and_as_dicts():
    rng = random.Random(15)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(3000):
        doc = mutated(rng)
        outcomes[agree(json.dumps(doc).encode())[0]] += 1
        agree(doc)
    assert outcomes["ok"] > 300 and outcomes["error"] > 1000      # both sides of the contract were exercised


@pytest.mark.parametrize("text", [
    b'{"schema":"gpufleet.telemetry.v1","ts":1e400,"node":"n"}',            # out of range: not finite
    b'{"schema":"gpufleet.telemetry.v1","ts":NaN,"node":"n"}',
    b'{"schema":"gpufleet.telemetry.v1","ts":1767571200,"node":"n","node":"m"}',   # a repeated key: the last
    b'{"schema":"gpufleet.telemetry.v1","ts":"1767571200.5","node":"n"}',   # lax: a number in a string
    b'{"schema":"gpufleet.telemetry.v1","ts":1767571200,"node":"n","seq":3.0}',    # lax: a whole float
    b'{"schema":"gpufleet.telemetry.v1","ts":1767571200,"node":"n","seq":true}',
    b'{"schema":"gpufleet.telemetry.v1","ts":1767571200,"node":"n","gpus":[{"uuid":"a","index":0},'
    b'{"uuid":"a","index":1}]}',                                             # a GPU twice: the model's rule
    b'{"schema":"gpufleet.telemetry.v1","ts":1767571200,"node":"n","gpus":[{"uuid":"a","index":0,'
    b'"mem_used_bytes":2,"mem_total_bytes":1}]}',
    b'{"schema":"gpufleet.telemetry.v1","ts":1767571200,"node":"n","host":{"mem_used_bytes":2,'
    b'"mem_total_bytes":1}}',
    b'{"schema":"gpufleet.telemetry.v1","ts":1767571200,"node":"n\\ud800"}',  # a lone surrogate
    b'{"schema":"gpufleet.telemetry.v1","ts":1767571200,"node":"n"',           # truncated
    b'[1, 2]', b'"text"', b'', b'{}',
])
def test_edge_cases_get_the_contracts_verdict(text):
    agree(text)
    agree(text.decode("utf-8", errors="replace"))


def test_a_dict_with_a_value_json_cannot_hold_gets_the_contracts_verdict():
    for bad in (math.inf, -math.inf, math.nan):
        for field in ("util_pct", "power_w"):                 # bounded on both sides; only from below
            assert agree(message(1767571200.0, gpus=[gpu(0, **{field: bad})]))[0] == "error"
        assert agree(message(1767571200.0, host={"net_rx_bytes_per_s": bad}))[0] == "error"


def test_too_many_gpus_and_too_large_messages_are_refused_as_the_contract_refuses_them():
    assert agree(message(1767571200.0, gpus=[gpu(i) for i in range(MAX_GPUS + 1)]))[0] == "error"
    big = json.dumps(message(1767571200.0, pool="p" * 2_000_000)).encode()
    assert agree(big) == ("error", "too_large", f"message of {len(big)} bytes exceeds {contract.MAX_MESSAGE_BYTES}")


def test_the_decoded_message_reads_and_writes_like_the_contracts_model():
    raw = json.dumps(base()).encode()
    msg, model = fast.decode(raw), contract.parse(raw)
    assert json.loads(msg.to_json()) == json.loads(model.to_json()) == msg.to_dict()
    for name in TOP[1:]:
        if name not in ("host", "gpus"):
            assert getattr(msg, name) == getattr(model, name)
    assert msg.schema_ == model.schema_ and msg.host.iowait_pct == model.host.iowait_pct
    assert [g.processes[0].pid for g in msg.gpus] == [g.processes[0].pid for g in model.gpus]
    merged = fast.with_gpus(msg, msg.gpus[:1])
    assert [g.uuid for g in merged.gpus] == ["GPU-0"] and [g.uuid for g in msg.gpus] == ["GPU-0", "GPU-1", "GPU-2"]
    assert [g.uuid for g in fast.with_gpus(model, model.gpus[1:]).gpus] == ["GPU-1", "GPU-2"]


def test_the_structs_are_made_from_the_contracts_models_field_for_field():
    for model, struct in fast.STRUCTS.items():
        assert struct.__struct_fields__ == tuple(model.model_fields)
        assert struct.__struct_encode_fields__ == tuple(f.alias or n for n, f in model.model_fields.items())
        packed = fast.PACKED[model]
        assert issubclass(packed, struct) and packed.__struct_fields__ == struct.__struct_fields__


def test_a_packed_message_is_a_small_part_of_its_json_and_reads_like_the_decoded_one():
    raw = json.dumps(message(1767571200.5, gpus=[gpu(i, job="train-7", processes=[{"pid": 7, "mem_used_bytes": 1e9}])
                                                  for i in range(8)])).encode()
    msg = fast.decode(raw)
    packed = fast.pack_message(msg)
    assert len(packed) < len(raw) / 5         # values without names (a third), compressed (eight GPUs alike)
    back = fast.unpack_message(packed)
    assert back.to_dict() == msg.to_dict() == contract.parse(raw).model_dump(by_alias=True)
    assert back.schema_ == msg.schema_ and back.gpus[3].processes[0].pid == 7
    assert back.gpus[3].util_pct == msg.gpus[3].util_pct
    again = fast.unpack_message(packed)          # names shared on the way out, as a decoded message's
    assert again.gpus[0].job is back.gpus[0].job and again.node is back.node
    # the node's strings numbered in a table: a GPU's uuid and model, its job, the node's names once per table
    strings = fast.Strings()
    first, numbered = fast.pack_message(msg, strings), fast.pack_message(msg, strings)
    # a number instead of each string: smaller still, where compression alone keeps what differs of each uuid
    assert first == numbered and len(numbered) < len(packed)
    assert sorted(strings.names) == sorted({msg.node, msg.pool, msg.collector_id} - {None} | {
        v for g in msg.gpus for v in (g.uuid, g.parent_uuid, g.mig_profile, g.model, g.tenant, g.job) if v})
    out = fast.unpack_message(numbered, strings)
    assert out.to_dict() == msg.to_dict() and out.gpus[5].uuid == msg.gpus[5].uuid
    assert out.gpus[0].job is back.gpus[0].job and out.node is back.node       # shared as well


def test_names_that_repeat_from_message_to_message_are_one_string_and_the_cache_does_not_grow():
    # a window keeps a job name per sample: one object for all of them, as pydantic's own string cache gives
    first, second = (fast.decode(json.dumps(message(t, gpus=[gpu(0, job="train-7", model="H100")])).encode())
                     for t in (1767571200.0, 1767571205.0))
    assert first.gpus[0].job is second.gpus[0].job and first.gpus[0].uuid is second.gpus[0].uuid
    assert first.node is second.node and first.gpus[0].model is second.gpus[0].model
    for i in range(5000):
        fast.decode(json.dumps(message(1767571200.0 + i, node=f"n{i}", gpus=[gpu(0, job=f"j{i}")])).encode())
    assert len(fast._NAMES.slots) == fast._Names.SLOTS
