"""A node's clock that steps, and copies of messages stamped in the node's future, cannot move its watermark: no
good message after them is taken for late, the copies are duplicates, and a step that lasts is followed."""
import copy
import json
import random
from decimal import Decimal

import pytest
from helpers import message

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.contracts.telemetry import parse
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.eventtime import ACCEPTED, DUPLICATE, Gate
from gpufleet.streams.pipeline import Pipeline

LATENESS, HORIZON, STEP = 30.0, 900.0, 600.0


def tick(seq, ts=None, collector="c1", interval=10.0):
    return parse(message(1000.0 + seq * interval if ts is None else ts, seq=seq, collector_id=collector,
                         interval_s=interval))


def push(gate, msg, step=STEP):
    return gate.push(msg, LATENESS, HORIZON, f"ref-{msg.seq}-{msg.ts}", step)


def test_a_copy_stamped_in_the_future_is_a_duplicate_whichever_comes_first():
    gate = Gate()
    for seq in range(10):
        push(gate, tick(seq))
    assert push(gate, tick(3, ts=90_000.0))[0] == DUPLICATE          # its seq is behind the sequence: a copy
    assert gate.max_ts == 1090.0
    assert push(gate, tick(12, ts=90_000.0))[0] == ACCEPTED           # ahead of a seq not seen yet: held
    assert gate.max_ts == 1090.0                                       # ... without moving the watermark
    assert push(gate, tick(10))[0] == ACCEPTED and push(gate, tick(11))[0] == ACCEPTED
    push(gate, tick(12))                                               # the original: the copy is dropped
    assert gate.take_copies() == [["ref-12-90000.0"]]
    released = [m.ts for m, _ in gate.drain()]
    assert 90_000.0 not in released and released[-1] == 1120.0


def test_a_clock_that_steps_forward_and_back_loses_no_message():
    gate, released, late = Gate(), [], 0
    for seq in range(200):
        ts = 1000.0 + seq * 10 + (301.3 if 50 <= seq < 74 else 0)      # +5 min for 4 minutes, then back
        status, ready = push(gate, tick(seq, ts=round(ts, 3)))
        late += status != ACCEPTED
        released += [m.seq for m, _ in ready]
        assert gate.max_ts <= 1000.0 + seq * 10                        # the watermark never followed the step
    released += [m.seq for m, _ in gate.drain()]
    assert late == 0 and sorted(released) == list(range(200))


def test_a_step_that_lasts_is_the_nodes_clock_from_then_on():
    gate = Gate()
    for seq in range(20):
        push(gate, tick(seq))
    for seq in range(20, 100):                                         # +1 h for good (a clock set right)
        push(gate, tick(seq, ts=1000.0 + seq * 10 + 3600))
        if seq * 10 < 20 * 10 + STEP:
            assert gate.max_ts == 1190.0, seq                          # held while the step is young
    assert gate.max_ts == 1000.0 + 99 * 10 + 3600                      # then followed
    assert push(gate, tick(100, ts=1000.0 + 100 * 10 + 3600))[0] == ACCEPTED


def test_without_a_sequence_or_after_a_restart_a_message_is_trusted_as_it_is():
    gate = Gate()
    for seq in range(5):
        push(gate, tick(seq))
    push(gate, parse(message(5000.0)))                                 # no seq: nothing to judge it by
    assert gate.max_ts == 5000.0
    gate = Gate()
    for seq in range(5):
        push(gate, tick(seq))
    push(gate, tick(0, ts=5000.0, collector="c2"))                     # a collector that started since
    assert gate.max_ts == 5000.0


def test_at_the_end_a_glitch_the_sequence_passed_is_handed_back_and_a_last_step_is_kept():
    gate = Gate()
    for seq in range(10):
        push(gate, tick(seq))
    push(gate, tick(10, ts=50_000.0))                                  # an instant's glitch: the sequence goes on
    for seq in range(11, 15):
        push(gate, tick(seq))
    restored = Gate.from_state(gate.to_state())
    assert restored.anchor.to_state() == ["c1", 14, 1140.0, 10.0]
    assert push(restored, tick(4, ts=60_000.0))[0] == DUPLICATE        # still judged by the sequence
    (msg, refs, by), = gate.unconfirmed(LATENESS)
    assert (msg.ts, refs) == (50_000.0, ["ref-10-50000.0"]) and by > 40_000
    assert [m.ts for m, _ in gate.drain()][-1] == 1140.0
    # a host frozen for 10 minutes, or a clock that stepped, near the end: its last messages are kept
    gate, released = Gate(), []
    for seq in range(20):
        released += [m.seq for m, _ in push(gate, tick(seq, ts=1000.0 + seq * 10 + (600 if seq >= 10 else 0)))[1]]
    assert gate.max_ts == 1090.0 and gate.unconfirmed(LATENESS) == []
    assert released + [m.seq for m, _ in gate.drain()] == list(range(20))


def test_a_spool_that_dropped_messages_says_how_many_seqs_it_did_not_send():
    gate = Gate()
    for seq in range(10):
        push(gate, tick(seq))
    resumed = parse(message(1090.0 + 600, seq=10, collector_id="c1", interval_s=10.0, dropped=59))
    push(gate, resumed)
    assert gate.max_ts == 1690.0                                       # on time, by its sequence and its drops


@pytest.fixture(scope="module")
def fleet():
    return list(Simulation(FleetSpec(nodes=3, gpus_per_node=4, hours=2, seed=7, faults_per_kind=1,
                                     interval_s=10)).messages())


def replay(messages):
    p = Pipeline(StreamConfig())
    for i, m in enumerate(messages):
        p.submit(json.dumps(m), f"f:{i}")
    p.flush()
    rows = {t.name: sorted(map(repr, r)) for t, r in p.out.rows.items()}
    return p, rows, sorted(json.dumps(e, sort_keys=True) for e in p.out.events)


def billed(events) -> Decimal:
    return sum((Decimal(json.loads(e)["amount"]) for e in events if '"gpufleet.billing.v1"' in e), Decimal(0))


def test_sixteen_future_copies_among_good_lines_change_nothing(fleet):
    assert len(fleet) == 2160
    rng, dirty = random.Random(1), list(fleet)
    for _ in range(16):
        c = copy.deepcopy(fleet[rng.randrange(len(fleet))])
        c["ts"] += rng.choice([120, 900, 3600, 86400])
        dirty.insert(rng.randrange(len(dirty)), c)
    clean, got = replay(fleet), replay(dirty)
    counts = got[0].out.counts
    assert counts["gpu_samples"] == clean[0].out.counts["gpu_samples"] == 2160 * 4    # every good line stored
    assert counts["duplicates"] + counts["dead_late"] + counts["dead_clock_skew"] == 16, counts
    assert got[1] == clean[1] and got[2] == clean[2]                  # every row and event, billing included
    assert billed(got[2]) == billed(clean[2]) > 0


def test_a_node_whose_clock_jumps_five_minutes_and_back_loses_no_sample(fleet):
    t0 = fleet[0]["ts"]
    stepped = [dict(m, ts=round(m["ts"] + 301.3, 3)) if m["node"] == "node-001" and t0 + 1800 <= m["ts"] < t0 + 2040
               else m for m in fleet]
    got = replay(stepped)[0].out.counts
    assert got["gpu_samples"] == 2160 * 4 and not any(k.startswith("dead_") for k in got), got
