import json
import random

import pytest
from helpers import gpu, message

from gpufleet.contracts.telemetry import parse
from gpufleet.streams.decode import Strings, decode
from gpufleet.streams.eventtime import ACCEPTED, DUPLICATE, HELD, LATE, Gate, Released


def push(gate, ts, lateness=30.0, horizon=900.0, gpus=None, ref=None):
    return gate.push(parse(message(ts, gpus=gpus)), lateness, horizon, ref)


def test_releases_in_ts_order_once_the_watermark_passes():
    gate = Gate()
    assert push(gate, 100) == (ACCEPTED, [])
    assert push(gate, 110)[1] == []
    status, ready = push(gate, 105)        # out of order, within the lateness
    assert status == ACCEPTED and ready == []
    status, ready = push(gate, 140)        # watermark 110: releases 100 and 105 (strictly older)
    assert [m.ts for m, _ in ready] == [100, 105]
    assert [m.ts for m, _ in gate.drain()] == [110, 140]


def test_late_and_duplicate_are_told_apart():
    gate = Gate()
    for ts in (100, 105, 200):
        push(gate, ts)
    assert push(gate, 105)[0] == DUPLICATE       # released already: a repeat
    assert push(gate, 103)[0] == LATE            # never seen and behind the watermark (170)
    assert push(gate, 200)[0] == HELD            # still waiting: a repeat, held with the original
    assert push(gate, 171)[0] == ACCEPTED        # within the lateness
    assert gate.watermark(30) == 170


def test_a_repeat_of_a_waiting_message_is_done_only_with_it():
    # the same input delivered twice: acknowledging the repeat at once could commit past the original
    gate = Gate()
    assert push(gate, 100, ref="first") == (ACCEPTED, [])
    assert push(gate, 100, ref="again") == (HELD, [])
    _, ready = push(gate, 200, ref="later")
    assert [(m.ts, refs) for m, refs in ready] == [(100, ["first", "again"])]


def test_after_the_end_of_input_a_repeat_within_the_lateness_is_a_duplicate():
    # drain releases the newest messages before the watermark passes them; a repeat of one (a replay after
    # the end-of-stream flush was saved) must not be admitted again, before or after a restore
    gate = Gate()
    for ts in (100, 110, 120):
        push(gate, ts)
    assert [m.ts for m, _ in gate.drain()] == [100, 110, 120]
    for g in (gate, Gate.from_state(gate.to_state())):
        assert push(g, 120)[0] == DUPLICATE and push(g, 110)[0] == DUPLICATE
        assert push(g, 119)[0] == ACCEPTED and [m.ts for m, _ in g.drain()] == [119]    # never seen: taken


def test_sample_exactly_at_the_watermark_is_not_late():
    gate = Gate()
    push(gate, 100)
    push(gate, 130)
    assert push(gate, 100)[0] == HELD              # still waiting (not strictly behind): a repeat, held
    gate2 = Gate()
    push(gate2, 130)
    assert push(gate2, 100)[0] == ACCEPTED


def test_repeats_are_forgotten_after_the_horizon():
    gate = Gate()
    for ts in range(10, 2000, 10):
        push(gate, float(ts), horizon=100)
    assert 10.0 not in gate.released and len(gate.released) <= 15
    assert push(gate, 10.0, horizon=100)[0] == LATE


def test_same_time_new_gpus_are_merged_repeated_gpus_ignored():
    gate = Gate()
    push(gate, 100, gpus=[gpu(0)])
    assert push(gate, 100, gpus=[gpu(0)])[0] == HELD
    assert push(gate, 100, gpus=[gpu(0), gpu(1)])[0] == ACCEPTED
    ((m, refs),) = gate.drain()
    assert [g.uuid for g in m.gpus] == ["GPU-0", "GPU-1"]


def test_zero_lateness_keeps_only_the_newest_waiting():
    gate = Gate()
    push(gate, 1, lateness=0)
    status, ready = push(gate, 2, lateness=0)
    assert [m.ts for m, _ in ready] == [1]


def test_a_waiting_message_is_kept_packed_and_released_as_validated():
    # less than half its JSON while it waits (a collector's full messages: a third); unpacked on release
    gate = Gate()
    raw = json.dumps(message(100, gpus=[gpu(i) for i in range(8)])).encode()
    assert gate.push(decode(raw, share_names=False), 30.0, 900.0, "a") == (ACCEPTED, [])
    assert gate.pending[100].msg is None and len(gate.pending[100].packed) < len(raw) / 2
    other = json.dumps(message(100, gpus=[gpu(8)]))                # the same time, another GPU: merged
    assert gate.push(decode(other), 30.0, 900.0, "b") == (ACCEPTED, [])
    status, ready = push(gate, 140)
    assert [(m.ts, [g.index for g in m.gpus], refs) for m, refs in ready] == [(100, list(range(9)), ["a", "b"])]
    assert ready[0][0].gpus[0].to_dict() == decode(raw).gpus[0].to_dict()
    assert ready[0][0].gpus[0].to_dict() == parse(raw).gpus[0].model_dump()     # what the contract validated
    assert gate.pending[140].packed is None and gate.pending[140].msg.ts == 140  # a pydantic one waits as it is


def test_a_full_string_table_gives_way_and_the_messages_packed_with_the_old_one_still_unpack(monkeypatch):
    monkeypatch.setattr(Strings, "LIMIT", 12)        # new jobs fill a table in a few messages
    gate = Gate()
    sent, released = {}, []
    for i, ts in enumerate(range(100, 160, 5)):
        raw = json.dumps(message(ts, gpus=[gpu(g, job=f"job-{i}-{g}") for g in range(4)])).encode()
        sent[ts] = decode(raw).to_dict()
        released += [m for m, _ in gate.push(decode(raw, share_names=False), 3600.0, 9000.0, ts)[1]]
    waiting = list(gate.pending.values())
    assert not released and len({id(w.strings) for w in waiting}) >= 3     # each table full before the next began
    assert all(len(w.strings.names) < 12 + 10 for w in waiting)   # a message's new names past the limit at most
    released = [m for m, _ in gate.drain()]
    assert len(released) == 12 and [m.to_dict() for m in released] == [sent[m.ts] for m in released]


def test_released_times_out_of_order_after_a_drain_are_still_known_and_forgotten_in_time_order():
    gate = Gate()
    for ts in (100, 110, 120):
        push(gate, ts)
    assert [m.ts for m, _ in gate.drain()] == [100, 110, 120]
    assert push(gate, 115)[0] == ACCEPTED          # within the lateness of 120, never released before
    status, ready = push(gate, 200)                # watermark 170: releases 115, behind 120 already remembered
    assert [m.ts for m, _ in ready] == [115] and gate.released.times.tolist() == [100, 110, 115, 120]
    assert all(push(gate, ts)[0] == DUPLICATE for ts in (100, 115, 120))
    gate.released.forget_before(112)
    assert gate.released.times.tolist() == [115, 120] and 110 not in gate.released
    restored = Gate.from_state(gate.to_state())
    assert restored.released.times.tolist() == [115, 120] and 120 in restored.released


@pytest.mark.parametrize("seed", range(6))
def test_released_times_answer_as_a_sorted_list_of_floats_would(seed):
    """Whole milliseconds (kept in 4 bytes), times behind the newest, forgetting, and a time that is not a whole
    millisecond or lies weeks away (the store turns to doubles): membership, order and what is forgotten are
    those of a plain sorted list, for the floats as given."""
    rng = random.Random(seed)
    released, ref = Released(), []
    t = 1_767_225_600.0 + rng.randrange(1000) / 1000
    odd_at = rng.choice((None, 150, 300))
    for step in range(400):
        batch = []
        for _ in range(rng.randint(1, 3)):
            t = round(t + rng.choice((1.0, 5.0, 0.001, 2.5)), 3)
            batch.append(t)
        if step == odd_at:
            batch.append(rng.choice((t + 1e-4, t + 40 * 86_400.0)))     # not a whole ms, or 40 days on
            t = batch[-1]
        if rng.random() < 0.1 and ref:                     # after a drain: times behind the newest
            batch = sorted({*batch, round(ref[-1] - rng.choice((0.5, 1.0)), 3)})
        released.add(batch)
        ref = sorted({*ref, *batch})
        if rng.random() < 0.3:
            cut = rng.choice((ref[len(ref) // 2], ref[-1] - 30.0004, ref[0] - 1.0, ref[-1] + 1.0))
            released.forget_before(cut)
            ref = [x for x in ref if x >= cut]
        probes = [*rng.sample(ref, min(5, len(ref))), t + 0.0005, t - 0.001, float("inf"), float("nan")]
        assert [p in released for p in probes] == [p in ref for p in probes]
        assert released.times.tolist() == ref and len(released) == len(ref)
    again = Released(released.times.tolist())
    assert again.times.tolist() == ref and all(x in again for x in ref)
    assert (released.secs is None) == (odd_at is None)       # doubles only once a time asked for them


def test_released_whole_milliseconds_take_four_bytes_a_time():
    released = Released()
    released.add([1_767_225_600.0 + k for k in range(900)])      # a 15-minute horizon sampled every second
    assert released.ms.itemsize == 4 and len(released) == 900 and released.secs is None
