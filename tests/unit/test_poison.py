"""A poison input never stops a stream: any bytes on any topic, any line of a file, is processed or dead-lettered
with its reason, and the good inputs around it all count (property-based, with hypothesis)."""
import json
import random

import pytest
from helpers import gpu, message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.contracts import telemetry as contract
from gpufleet.contracts.events import Facts, Told, Where, alert, alert_problem
from gpufleet.contracts.jobsample import invalid_job_sample
from gpufleet.contracts.output import Output
from gpufleet.contracts.telemetry import TelemetryError
from gpufleet.streams import decode as fast
from gpufleet.streams.durable import Share
from gpufleet.streams.pipeline import Driver, Pipeline
from gpufleet.streams.stages import JobStage

DEEP = b'{"a":' * 50_000 + b"1" + b"}" * 50_000            # 300 kB, under the size limit
POISON = [
    DEEP,
    b"[" * 50_000 + b"]" * 50_000,
    b'{"schema":"gpufleet.control.v1","kind":' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    b'{"schema":"gpufleet.telemetry.v1","ts":1767571200,"node":"n","gpus":[' + b"[" * 5000 + b"]" * 5000 + b"]}",
    b"\xff\xfe\x00\x01 not UTF-8",
    bytes(range(256)),
    b"x" * (2 << 20),                                       # above the size limit
    b'"' + b"x" * 900_000 + b'"',                           # huge, valid JSON of the wrong shape
    b"[1, 2, 3]", b"null", b"", b"{}",
    b'{"schema":"gpufleet.telemetry.v2","ts":1767571200,"node":"n"}',           # a future schema version
    json.dumps(message(True)).encode(),                         # a boolean is not a number
    json.dumps(message(1767571200, gpus=[gpu(0, util_pct=False)])).encode(),
    json.dumps(message(1767571200, gpus=[gpu(True)])).encode(),
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30)
FIELDS = ["schema", "ts", "node", "pool", "interval_s", "host", "gpus", "uuid", "index", "util_pct", "tenant", "job",
          "mem_used_bytes", "mem_total_bytes", "processes", "xid_events", "pid", "throttle_reasons"]


def good() -> dict:
    return message(1767571200.0, gpus=[gpu(0, processes=[{"pid": 7, "mem_used_bytes": 1e9}], xid_events=[13]),
                                       gpu(1)], host={"cpu_util_pct": 30.0})


def mutate(doc, path_choices, value):
    """Set one field anywhere in a message (found by name) to ``value``."""
    stack = [doc]
    targets = []
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            targets += [(x, k) for k in x]
            stack += list(x.values())
        elif isinstance(x, list):
            stack += x
    if targets:
        d, k = targets[path_choices % len(targets)]
        d[k] = value
    return doc


def verdict(data):
    """What the decoder makes of ``data``: the message, or the reason code. Nothing else may come out."""
    try:
        return fast.decode(data)
    except TelemetryError as err:
        assert err.reason_code in ("invalid", "too_large") and err.reason and "\n" not in err.reason
        return err.reason_code


@pytest.mark.parametrize("payload", POISON, ids=range(len(POISON)))
def test_the_decoder_refuses_poison_with_a_reason(payload):
    assert verdict(payload) in ("invalid", "too_large")
    assert verdict(payload.decode("utf-8", "replace")) in ("invalid", "too_large")


def test_booleans_are_not_numbers_on_either_path():
    for doc in (message(True), message(1767571200, gpus=[gpu(0, util_pct=False)]),
                message(1767571200, interval_s=True), message(1767571200, seq=True),
                message(1767571200, gpus=[gpu(0, processes=[{"pid": True}])]),
                message(1767571200, gpus=[gpu(0, xid_events=[True])])):
        for data in (json.dumps(doc), doc):
            with pytest.raises(TelemetryError, match="boolean|valid"):
                fast.decode(data)
            with pytest.raises(TelemetryError):
                contract.parse(data)
    assert fast.decode(json.dumps(message(1767571200, gpus=[gpu(0, util_pct=1)]))).gpus[0].util_pct == 1.0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()))
def test_the_decoder_takes_any_bytes_and_any_json(data):
    verdict(data)
    try:
        doc = json.loads(data)
    except ValueError:
        return
    if isinstance(doc, dict):
        verdict(doc)                       # the dict path (the simulator's) too


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(FIELDS), json_values)
def test_a_mutated_message_is_decoded_or_refused_alike_by_both_paths(where, name, value):
    doc = mutate(good(), where, value) if where % 3 else {**good(), name: value}
    raw = json.dumps(doc)
    got = verdict(raw)
    try:
        expected = contract.parse(raw).model_dump(by_alias=True)
    except TelemetryError:
        expected = "invalid"
    assert (got if isinstance(got, str) else got.to_dict()) == expected


def fleet(seed: int = 3) -> list[bytes]:
    spec = FleetSpec(nodes=3, gpus_per_node=2, hours=0.75, seed=seed, faults_per_kind=1, interval_s=10)
    return [json.dumps(m).encode() for m in Simulation(spec).messages()]


def run(payloads: list[bytes]) -> Pipeline:
    p = Pipeline()
    for i, data in enumerate(payloads):
        p.submit(data, f"f:{i}")
    p.flush()
    return p


def results(p: Pipeline):
    return ({t.name: sorted(map(repr, rows)) for t, rows in p.out.rows.items()},
            sorted(json.dumps(e, sort_keys=True) for e in p.out.events))


@pytest.fixture(scope="module")
def clean():
    msgs = fleet()
    return msgs, results(run(msgs))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(POISON) | st.binary(max_size=200)
                          | json_values.map(lambda v: json.dumps(v).encode())), max_size=12))
def test_good_messages_among_poison_give_exactly_what_they_give_alone(clean, bad):
    msgs, expected = clean
    mixed = [(False, m) for m in msgs]
    for at, data in bad:
        mixed.insert(at % (len(mixed) + 1), (True, data))
    p = run([data for _, data in mixed])
    assert results(p) == expected
    assert p.out.counts["messages"] == len(mixed) and not p.out.counts["dead_internal_error"]
    assert [int(d["source"].split(":")[1]) for d in p.out.dead] == [i for i, (poison, _) in enumerate(mixed)
                                                                     if poison]


def test_a_message_whose_processing_raises_is_dead_lettered_and_the_stream_goes_on(monkeypatch):
    """An unexpected exception (a bug, or input no rule foresaw) costs one message, not the partition."""
    from gpufleet.streams import idle
    msgs = fleet(seed=5)
    poisoned_ts = json.loads(msgs[40])["ts"]
    node = json.loads(msgs[40])["node"]
    original = idle.IdleTracker.add

    def add(self, msg, cfg, out, tariff):
        if msg.ts == poisoned_ts and msg.node == node:
            raise ZeroDivisionError("division by zero")
        return original(self, msg, cfg, out, tariff)
    monkeypatch.setattr(idle.IdleTracker, "add", add)
    p = run(msgs)
    (d,) = p.out.dead
    assert d["reason_code"] == "internal_error" and d["reason"].startswith("ZeroDivisionError: division by zero (at")
    assert json.loads(d["payload"])["ts"] == poisoned_ts and d["source"] == f"node {node} at ts {poisoned_ts}"
    assert p.out.counts["gpu_samples"] == sum(len(json.loads(m)["gpus"]) for m in msgs)


class Msg:
    def __init__(self, offset: int):
        self.topic, self.partition, self.offset = "by-job", 0, offset


class Ev:
    def __init__(self, offset: int, value: bytes):
        self.message, self.value = Msg(offset), value


def test_the_job_stage_dead_letters_anything_that_is_not_job_samples():
    p = Pipeline(driver=Driver(route_jobs=False))
    stage = JobStage(p, {}, {}, 1)
    good_sample = {"job": "j", "node": "n", "ts": 100.0, "tenant": "t", "pool": "p", "interval": 5.0,
                   "gpus": [["GPU-0", 0, 90.0, 1400.0, 1980.0, 300.0, 400.0, 60.0, 0, 1e9, 8e10]]}
    junk = [DEEP, b"\xff", b"{}", b"[1]", b'[{"job": 3}]', json.dumps([{**good_sample, "ts": True}]).encode(),
            json.dumps([{**good_sample, "gpus": [["GPU-0"]]}]).encode(),
            json.dumps([{"watermarks": {"9": 1.0}}]).encode(), json.dumps([{"watermarks": {"0": "x"}}]).encode(),
            json.dumps([{"watermarks": []}]).encode()]
    out = Output()
    events = [Ev(i, v) for i, v in enumerate(junk)] + [Ev(len(junk), json.dumps([good_sample]).encode())]
    stage.process(events, out)
    assert out.counts["dead_invalid"] == len(junk)
    assert [d["source"] for d in out.dead] == [f"by-job/0/{i}" for i in range(len(junk))]
    assert "j" in p.jobs and p.jobs["j"].pending
    done = {(d.event if isinstance(d, Share) else d).message.offset for d in out.done}
    assert done == set(range(len(junk))), "every junk input is acknowledged (the good one waits for its job)"


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_a_job_sample_check_takes_anything(value):
    assert invalid_job_sample(value) is None or isinstance(invalid_job_sample(value), str)


def test_the_router_reads_any_bytes_as_an_alert_or_a_reason():
    from gpufleet.streams.notify.service import read_alert
    a = alert("idle", "GPU-1", Facts(status="firing", severity="warning",
                                     where=Where(node="n1", gpu_uuid="GPU-1", job="j", tenant="t", pool="p"),
                                     started_at=100.0, detected_at=160.0, resolved_at=None, score=1.0,
                                     told=Told("idle for 10 min", {"idle_s": 600})))
    assert read_alert(json.dumps(a).encode()) == (a, None)
    for bad in POISON + [json.dumps({**a, "evidence": [1]}).encode(), json.dumps({**a, "id": 7}).encode(),
                         json.dumps({**a, "status": "maybe"}).encode(), json.dumps({**a, "score": True}).encode()]:
        event, problem = read_alert(bad)
        assert isinstance(problem, str) and problem and "\n" not in problem
    assert alert_problem({**a, "kind": "underuse", "newer_field": 1}) is None      # additive changes pass


def test_a_publish_refuses_bad_lines_before_sending_with_their_line_numbers(tmp_path):
    from gpufleet.commands.publish import LineCheck
    check = LineCheck()
    lines = fleet()[:5]
    keys = [check(f"f:{i}", line) for i, line in enumerate(lines[:2] + POISON[:3] + lines[2:])]
    nodes = [json.loads(line)["node"] for line in lines]
    assert keys == nodes[:2] + [None] * 3 + nodes[2:]
    assert [d["source"] for d in check.dead] == ["f:2", "f:3", "f:4"]
    assert all(d["reason_code"] == "invalid" for d in check.dead)


def test_random_junk_lines_in_a_replayed_file_are_dead_lettered_with_their_line_numbers(tmp_path, capsys):
    from gpufleet.cli import main
    rng = random.Random(7)
    msgs = fleet()[:200]
    lines, bad = [], []
    for m in msgs:
        lines.append(m)
        if rng.random() < 0.05:
            lines.append(rng.choice(POISON[:6]).replace(b"\n", b" "))
            bad.append(len(lines))
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert main(["replay", "--no-store", str(path), "--dead-letters", str(tmp_path / "dl.jsonl")]) == 0
    dead = [json.loads(x) for x in (tmp_path / "dl.jsonl").read_text().splitlines()]
    assert [int(d["source"].rsplit(":", 1)[1]) for d in dead] == bad


def bad_files(tmp_path):
    import os
    (tmp_path / "deep.toml").write_text("a = " + "[" * 50_000 + "]" * 50_000)
    (tmp_path / "tables.toml").write_text("a = " + "{b = " * 5_000 + "1" + "}" * 5_000)
    (tmp_path / "latin1.toml").write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    with open(tmp_path / "huge.toml", "wb") as f:
        f.truncate(100 << 20)                       # 100 MB (sparse)
    (tmp_path / "binary.toml").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "deep.json").write_text("[" * 50_000 + "]" * 50_000)
    os.mkfifo(tmp_path / "fifo.toml")               # opening it would block
    return [tmp_path / n for n in ("deep.toml", "tables.toml", "latin1.toml", "huge.toml", "binary.toml",
                                   "deep.json", "fifo.toml", "missing.toml")] + [tmp_path]


@pytest.mark.parametrize("command", [
    ["notify", "--routes", "{}", "--check"], ["--config", "{}", "summary"],
    ["scale", "simulate", "--policy", "{}", "--series", "x.csv"], ["replay", "--model", "{}", "--no-store", "t.jsonl"],
    ["forecast", "backtest", "--series", "{}"]])
def test_a_bad_file_handed_to_gpufleet_is_one_line_and_exit_code_2(command, tmp_path, capsys):
    from gpufleet.cli import main
    (tmp_path / "t.jsonl").write_bytes(b"\n".join(fleet()[:3]))
    command = [str(tmp_path / a) if a.endswith(".jsonl") else a for a in command]
    for path in bad_files(tmp_path):
        assert main([str(path) if a == "{}" else a for a in command]) == 2, path
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "Traceback" not in err and str(path.name) in err, err
