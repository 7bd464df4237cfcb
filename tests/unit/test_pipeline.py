import json
import random

from helpers import gpu, message

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.contracts.events import DeadLetter
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.pipeline import Driver, Pipeline


def run(messages, cfg=None):
    p = Pipeline(cfg or StreamConfig())
    for i, m in enumerate(messages):
        p.submit(json.dumps(m), f"t:{i}")
    p.flush()
    return p


def outputs(p):
    return ({t.name: sorted(map(repr, rows)) for t, rows in p.out.rows.items()},
            sorted(map(json.dumps, p.out.events)))


def test_any_arrival_order_within_the_lateness_gives_the_same_output():
    msgs = list(Simulation(FleetSpec(nodes=3, gpus_per_node=2, hours=2, seed=4, faults_per_kind=1)).messages())
    rng = random.Random(1)
    shuffled = sorted(msgs, key=lambda m: m["ts"] + rng.uniform(0, 29))
    repeated = shuffled[:500] + shuffled[100:300] + shuffled[500:]
    ordered, mixed = run(msgs), run(repeated)
    assert outputs(ordered) == outputs(mixed)
    assert mixed.out.counts["duplicates"] == 200 and mixed.out.counts["dead_late"] == 0
    assert ordered.out.events, "the fleet should produce idle alerts"


def test_beyond_the_lateness_messages_are_late_and_dead_lettered():
    msgs = [message(1000 + 5 * i) for i in range(20)]
    p = run(msgs[5:] + msgs[:5], StreamConfig(lateness_s=30))
    assert p.out.counts["dead_late"] == 5
    (d, *_) = p.out.dead
    assert d["reason_code"] == "late" and d["source"] == "t:15" and "watermark of node n1" in d["reason"]
    assert json.loads(d["payload"])["ts"] == 1000


def test_live_mode_dead_letters_clock_skew():
    p = Pipeline(StreamConfig(max_clock_skew_s=300), driver=Driver(live=True, clock=lambda: 1000.0))
    assert p.submit(message(1200.0), "k/0/1") is not None
    assert p.submit(message(1400.0), "k/0/2") is None
    assert p.out.counts["dead_clock_skew"] == 1 and p.out.dead[0]["source"] == "k/0/2"
    replay = Pipeline(StreamConfig(max_clock_skew_s=300), driver=Driver(clock=lambda: 1000.0))
    assert replay.submit(message(99999.0), "f:1") is not None       # replays do not apply the check


def test_malformed_input_is_counted_and_never_stops_processing():
    p = Pipeline()
    inputs = [b"\xff\xfe", "{}", "[1,2]", json.dumps(message(10.0, gpus=[gpu(0, util_pct=-1)])),
              json.dumps(message(10.0))]
    for i, x in enumerate(inputs):
        p.submit(x, f"f:{i + 1}")
    assert p.out.counts["dead_invalid"] == 4 and p.out.counts["messages"] == 5
    assert [d["source"] for d in p.out.dead] == ["f:1", "f:2", "f:3", "f:4"]
    assert p.nodes["n1"].gate.pending
    for d in p.out.dead:                                  # each one a gpufleet.deadletter.v1 record
        DeadLetter.model_validate(d)
