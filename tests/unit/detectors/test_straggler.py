"""The straggler detector: features against peers, lockstep, pauses, windows, the epoch's decision."""
import json
import math
import random

import pytest

from gpufleet.contracts.output import Output
from gpufleet.models.detectors import straggler
from gpufleet.models.detectors.base import JobContext, JobItem


def stats(util, clock=0.99, power=0.8, throttle=0, temp=60.0, n=12):
    w = straggler.JobWindow()
    for i in range(n):
        w.append(float(i), util, clock, power, throttle, temp)
    return straggler.stats_of(w.between(-1.0, float(n)))


def fx(x, name, module=straggler):
    return x[module.FEATURES.index(name)]


def test_a_slow_gpu_stands_out_and_a_shared_dip_does_not():
    job = {f"g{i}": stats(98) for i in range(7)} | {"slow": stats(99, clock=0.6, throttle=0x20, temp=90)}
    f = straggler.features(job, 12, False)
    assert fx(f["slow"], "clock_deficit") == pytest.approx(1 - 0.6 / 0.99)
    assert fx(f["slow"], "throttle_frac") == 1.0 and fx(f["slow"], "temp_excess") == pytest.approx(30)
    assert all(abs(fx(f[f"g{i}"], "clock_deficit")) < 1e-9 and fx(f[f"g{i}"], "throttle_frac") == 0 for i in range(7))
    # a checkpoint: every GPU at 2% and low clocks together: nothing behind, and the job is not judged
    dip = straggler.features({f"g{i}": stats(2, clock=0.3) for i in range(8)}, 12, False)
    assert all(fx(x, "slowdown") < 1e-9 and not straggler.applies(x) for x in dip.values())


def test_an_idle_gpus_parked_clock_is_no_evidence():
    # a service's replicas at low load: one GPU's clock parked, the others up: nothing is compared
    job = {f"g{i}": stats(5, clock=0.95) for i in range(7)} | {"parked": stats(4, clock=0.6)}
    f = straggler.features(job, 12, False)
    assert fx(f["parked"], "clock_deficit") == 0.0 and not straggler.applies(f["parked"])


def test_gpus_of_other_models_compare_by_their_share_of_their_own_maximum():
    mixed = {"h100": stats(97, clock=0.99), "a100": stats(97, clock=0.99), "l40s": stats(97, clock=0.98)}
    assert all(fx(x, "clock_deficit") < 0.02 for x in straggler.features(mixed, 12, True).values())


def test_two_gpu_job_uses_the_other_gpu_as_reference():
    f = straggler.features({"a": stats(97), "b": stats(57)}, 12, False)
    assert fx(f["b"], "util_behind") == pytest.approx(0.40) and fx(f["a"], "util_ahead") == pytest.approx(0.40)


def test_a_starved_node_holds_its_job_back_from_being_judged():
    decider = type("D", (), {"threshold": 0.5, "persist_on": 1, "persist_off": 1, "hold_down_s": None})()
    x = straggler.features({"a": stats(97), "b": stats(40, clock=0.6)}, 12, False)["b"]
    entry = ("b", x, straggler.StragglerSeen(level="gpu", node="n1", held=False), 0.9)
    assert straggler.decide([entry], decider) == [True]
    held = straggler.StragglerSeen(level="gpu", node="n1", held=True)
    assert straggler.decide([(entry[0], x, held, 0.9)], decider) == [False]


def test_a_gpu_level_with_its_peers_is_no_straggler_whatever_it_scores():
    # throttled like the rest of its job, or a hair behind: nobody waits for it, however the trees score it
    decider = type("D", (), {"threshold": 0.5, "persist_on": 1, "persist_off": 1, "hold_down_s": None})()
    level = straggler.features({"a": stats(97), "b": stats(97), "c": stats(96)}, 12, False)["c"]
    behind = straggler.features({"a": stats(97), "b": stats(97), "c": stats(88)}, 12, False)["c"]
    assert fx(level, "slowdown") < straggler.MIN_SLOWDOWN <= fx(behind, "slowdown")
    info = straggler.StragglerSeen(level="gpu", node="n1", held=False)
    assert straggler.decide([("c", level, info, 0.99), ("c", behind, info, 0.99)], decider) == [False, True]


def moves(epochs):
    """A job's per-epoch utilization history from {gpu: [util per epoch]}."""
    n = len(next(iter(epochs.values())))
    return [{g: u[i] for g, u in epochs.items()} for i in range(n)]


def lockstep_as_written(history) -> bool:
    """The lockstep rule read straight from the module docstring, GPU by GPU and step by step: the reference the
    detector's faster form must agree with."""
    deltas = [{u: after[u] - before[u] for u in after if u in before} for before, after in zip(history, history[1:])]
    alone, seen = set(), set()
    for i, delta in enumerate(deltas):
        seen.update(delta)
        near = deltas[max(0, i - 1):i + 2]
        for u, d in delta.items():
            if abs(d) < straggler.BIG_MOVE:
                continue
            others = {w for step in near for w in step} - {u}
            along = sum(1 for w in others if any(d * step.get(w, 0.0) > 0 and abs(step.get(w, 0.0))
                                                 >= straggler.BIG_MOVE / 2 for step in near))
            if 3 * along < len(others):
                alone.add(u)
    return len(alone) < max(2, (len(seen) + 1) // 2)


def test_lockstep_agrees_with_the_rule_as_written_on_random_histories():
    rng = random.Random(20)
    verdicts = set()
    for _ in range(3000):
        gpus = [f"g{i}" for i in range(rng.choice((2, 3, 8, 16)))]
        levels = [0.0, 7.5, 15.0, 20.0, 40.0, 47.5, 55.0, 95.0]         # moves of exactly half and a whole big move
        history = []
        for _ in range(rng.randint(1, straggler.LOCKSTEP_EPOCHS)):
            present = gpus if rng.random() < 0.8 else [g for g in gpus if rng.random() < 0.8]
            history.append({g: rng.choice(levels) if rng.random() < 0.3 else 95.0 for g in present})
        verdicts.add(straggler.lockstep(history))
        assert straggler.lockstep(history) == lockstep_as_written(history), history
    assert verdicts == {True, False}


def test_lockstep_is_told_from_how_the_gpus_utilization_moves():
    steady = moves({f"g{i}": [95.0] * 20 for i in range(8)})
    assert straggler.lockstep(steady)                       # no evidence either way: judged
    checkpoints = moves({f"g{i}": [95.0, 95, 2, 95, 95, 60, 95] * 3 for i in range(8)})
    assert straggler.lockstep(checkpoints)                  # every GPU dips together
    sweep = moves({f"g{i}": [95.0] * i + [0.0] + [95.0] * (19 - i) for i in range(8)})
    assert not straggler.lockstep(sweep)                    # each GPU between tasks at its own time
    one = moves({f"g{i}": [95.0] * 20 for i in range(7)} | {"slow": [95.0, 60] * 10})
    assert straggler.lockstep(one)                          # an intermittent straggler moves alone
    node = moves({f"g{i}": [95.0] * 20 for i in range(8)} | {f"n2g{i}": [95.0, 55] * 10 for i in range(8)})
    assert straggler.lockstep(node)                         # a slow node's GPUs move together
    pair = moves({"a": [95.0, 95, 40, 95] * 5, "b": [95.0] * 20})
    assert straggler.lockstep(pair)                         # two GPUs, one moving alone: a straggler
    apart = moves({"a": [95.0, 95, 40, 40, 40, 40, 95, 95] * 2, "b": [95.0, 95, 95, 95, 40, 40, 40, 40] * 2})
    assert not straggler.lockstep(apart)                    # each moves alone, two epochs from the other
    # one pause seen by nodes sampled every minute in neighbouring epochs is still shared
    staggered = moves({f"n{n}g{i}": [95.0] * (5 + n) + [20.0] + [95.0] * (14 - n)
                       for n in range(3) for i in range(8)})
    assert straggler.lockstep(staggered)


def test_the_lockstep_history_is_saved_compactly_and_restored_the_same():
    d = straggler.Detector()
    epochs = moves({f"GPU-{i:036d}": [95.0] * i + [0.0] + [95.0] * (19 - i) for i in range(8)})[:-1]
    epochs[3].pop("GPU-" + "0" * 36)                                  # a GPU without samples in one epoch
    for epoch in epochs:
        d._remember(epoch)
    assert d.epochs() == epochs
    assert d.history.names[1] is d.history.names[2]       # the same GPUs: their names kept once for both epochs
    for epoch in epochs:                                  # the oldest epochs make way
        d._remember(epoch)
    assert d.epochs() == (epochs + epochs)[-straggler.LOCKSTEP_EPOCHS:]
    assert len(d.history.values) == sum(map(len, d.epochs()))
    saved = json.loads(json.dumps(d.to_state()))
    assert saved["history"]["gpus"].count("GPU-" + "0" * 36) == 1         # each GPU named once
    restored = straggler.Detector.from_state(saved)
    assert restored.epochs() == d.epochs()
    assert straggler.lockstep(restored.epochs()) == straggler.lockstep(d.epochs()) is False
    assert d.history.values.itemsize == 2                 # tenths of a point in 16 bits
    rng = random.Random(4)
    tenths = [{"a": round(rng.uniform(0, 100), 1), "b": round(rng.uniform(0, 100), 1)} for _ in range(30)]
    for odd in (None, 33.33, float("nan"), 1e6):          # not a tenth, or past 16 bits: doubles from then on
        h = straggler.Epochs()
        for k, epoch in enumerate(tenths):
            h.append(tuple(epoch), [odd if odd is not None and k == 12 and g == "b" else v
                                    for g, v in epoch.items()])
        want = [[odd if odd is not None and k == 12 and g == "b" else v for g, v in epoch.items()]
                for k, epoch in enumerate(tenths)][-straggler.LOCKSTEP_EPOCHS:]
        got = [list(utils) for _, utils in h]
        assert [[repr(v) for v in e] for e in got] == [[repr(v) for v in e] for e in want], odd
        assert h.values.itemsize == (2 if odd is None else 8), odd
        for n in (1, 3, 40):                              # the last epochs, read from the end
            assert [(names, [repr(v) for v in u]) for names, u in h.last(n)] == \
                [(names, [repr(v) for v in u]) for names, u in h][-n:], (odd, n)


def slow_gpu_alerts(gaps: dict[int, tuple[int, ...]], slow_clock: int = 1200, persist_on: int = 1,
                    urgent_score: float | None = None) -> list[dict]:
    """The straggler alerts of a 4-GPU job sampled every 5 s: 10 minutes at 95% (a GPU at 0% in the epochs
    ``gaps`` names for it), then GPU 3 at 68% with an SM clock of ``slow_clock`` (1800 like its peers: normal)."""
    decider = type("D", (), {"threshold": 0.2, "persist_on": persist_on, "persist_off": 1,
                             "hold_down_s": None, "urgent_score": urgent_score, "score_many": staticmethod(
        lambda xs: [x[straggler.FEATURES.index("slowdown")] for x in xs])})()
    d, out = straggler.Detector(), Output()
    for k in range(20 * 6 + 30):
        ts, gpus = 1000.0 + 5 * k, []
        for i in range(4):
            util, clock = 95.0, 1800
            if k // 6 in gaps.get(i, ()):
                util, clock = 0.0, 600
            if i == 3 and k >= 120:
                util, clock = 68.0, slow_clock
            gpus.append([f"u{i}", i, util, clock, 1980, 500.0, 700.0, 60.0, 0, 1e9, 8e10])
        d.add(JobItem(ts, "node-1", {"interval": 5.0, "gpus": gpus}), decider, JobContext("job-1", "t", "p", out, None))
    return [e for e in out.events if e["status"] == "firing"]


def test_a_window_at_the_urgent_score_pages_on_the_first_slow_epoch():
    (waited,) = slow_gpu_alerts({i: (4, 11) for i in range(4)}, persist_on=4)
    (urgent,) = slow_gpu_alerts({i: (4, 11) for i in range(4)}, persist_on=4, urgent_score=0.25)   # scores 0.28
    (doubtful,) = slow_gpu_alerts({i: (4, 11) for i in range(4)}, persist_on=4, urgent_score=0.5)
    # the incident starts where its first slow window began (a minute's window): paged on that window, its delay
    # from the evidence's start is the window; waiting three more epochs adds 90 s
    assert urgent["detected_at"] - urgent["started_at"] == 60 and waited["detected_at"] - waited["started_at"] == 150
    assert doubtful["detected_at"] == waited["detected_at"]
    assert "for 1 min" in urgent["summary"]           # the evidence spans the slow window, not zero minutes


def test_gpus_of_independent_work_are_not_judged_as_stragglers():
    # one GPU at 68% with a lower clock beside peers at 95%: a straggler if the job works in lockstep,
    # nothing if its GPUs had moved each on its own (a batch sweep) in the minutes before
    lockstep = slow_gpu_alerts({i: (4, 11) for i in range(4)})     # every GPU pauses together twice
    assert [e["gpu_uuid"] for e in lockstep] == ["u3"]
    sweep = slow_gpu_alerts({0: (3,), 1: (7,), 2: (12,)})          # each GPU paused on its own
    assert lockstep and not [e for e in sweep if e["gpu_uuid"] == "u3"]


def test_less_work_with_normal_clocks_is_a_straggler_only_in_a_job_seen_pausing_together():
    # independent GPUs held at different steady levels look the same as a GPU its host feeds slowly: without
    # a lower clock, only a job whose GPUs were seen pausing together (a checkpoint) is known to wait for it
    assert not slow_gpu_alerts({}, slow_clock=1800)                              # steady: not known
    assert [e["gpu_uuid"] for e in slow_gpu_alerts({i: (11,) for i in range(4)}, slow_clock=1800)] == ["u3"]
    assert [e["gpu_uuid"] for e in slow_gpu_alerts({}, slow_clock=1200)] == ["u3"]  # its clock says it
    assert not slow_gpu_alerts({i: (11,) for i in range(2)}, slow_clock=1800)     # half of them: not together


def test_a_pause_together_is_every_gpu_falling_from_work_at_once():
    job = {f"g{i}": [95.0, 95.0, 95.0] for i in range(6)}
    assert not straggler.paused_together(moves(job))
    assert straggler.paused_together(moves({g: [95.0, 95.0, 10.0] for g in job}))           # a checkpoint
    assert straggler.paused_together(moves({g: [95.0, 95.0, 30.0] if g < "g4" else [95.0, 30.0, 30.0]
                                            for g in job}))          # nodes seeing it in neighbouring epochs
    assert not straggler.paused_together(moves({g: [0.0, 0.0, 95.0] for g in job}))         # starting up
    assert not straggler.paused_together(moves({g: [30.0, 30.0, 5.0] for g in job}))        # not working
    assert not straggler.paused_together(moves({g: [95.0, 95.0, 10.0] if g < "g3" else [95.0] * 3
                                                for g in job}))                            # half of them
    assert not straggler.paused_together(moves({g: [95.0, 95.0, 85.0] for g in job}))       # a small dip
    d = straggler.Detector()
    d.paused = True
    assert straggler.Detector.from_state(json.loads(json.dumps(d.to_state()))).paused


def test_each_members_peer_medians_are_the_medians_of_the_others_to_the_last_bit():
    from gpufleet.models.detectors.base import median
    rng = random.Random(8)
    nan = float("nan")
    for _ in range(2000):
        n = rng.choice((2, 3, 4, 7, 8, 9, 16))
        pool = [0.0, -0.0, 0.25, 0.5, 0.5, 1.0 / 3, 0.97, nan]
        stats = {f"g{i}": straggler.Stats(rng.choice((10.0, 55.5, 95.0, 95.0, 0.0)),
                                          *(rng.choice(pool) for _ in range(3)), rng.choice((0.0, 0.5, 1.0)),
                                          0.0, 1.0, 12) for i in range(n)}
        peers = straggler.peer_medians(stats)
        for name in stats:
            others = [o for k, o in stats.items() if k != name]
            want = (median([o.util for o in others]), median([o.clock for o in others if o.clock == o.clock]),
                    median([o.power for o in others if o.power == o.power]),
                    median([o.temp for o in others if o.temp == o.temp]), median([o.throttled for o in others]))
            assert [repr(v) for v in peers[name]] == [repr(v) for v in want], (name, stats)


def test_the_straggler_window_keeps_throttle_reasons_as_runs_that_answer_as_a_column_per_sample_would():
    """300 random histories (reasons that hold, change and go missing; samples forgotten from the front): every
    column of any span, the saved state and its reload are those of a tuple kept per sample."""
    rng = random.Random(5)
    for _ in range(300):
        w, rows, t = straggler.JobWindow(), [], 0.0
        for _ in range(rng.randint(1, 40)):
            t += rng.choice((1.0, 5.0))
            row = (t, rng.choice((None, 50.0, 97.5)), 0.9, 0.8, rng.choice((0, 0, 0, 4, 0x20, None)), 60.0)
            w.append(*row)
            rows.append(row)
            if rng.random() < 0.2:
                cutoff = rng.uniform(rows[0][0] - 1, t - 1)
                assert w.drop_through(cutoff) == sum(1 for r in rows if r[0] <= cutoff)
                rows = [r for r in rows if r[0] > cutoff]
        i = rng.randint(0, len(rows))
        j = rng.randint(i, len(rows))
        want = [[math.nan if v is None else float(v) for v in col] for col in zip(*rows[i:j])] or [[]] * 6
        got = w.columns(i, j)
        assert [[repr(v) for v in c] for c in got] == [[repr(v) for v in c] for c in want]
        saved = json.loads(json.dumps(w.to_state()))
        assert saved["throttle"] == [r[4] for r in rows] and list(saved) == list(straggler.JobWindow.COLUMNS)
        assert straggler.JobWindow.from_state(saved, "straggler").to_state() == saved


def test_a_job_whose_nodes_sample_at_different_intervals_is_judged_at_the_pace_of_its_slowest():
    # node "a" every 5 s, node "b" every 60 s, one job: GPU a3 slows down (lower clock) from minute 12 on. Its
    # epochs and windows follow node b; every evaluation falls within the run (an epoch counted now in 30 s and
    # now in 60 s put evaluations decades back, which found no samples and forgot the pending incident)
    decider = type("D", (), {"threshold": 0.2, "persist_on": 4, "persist_off": 6,
                             "hold_down_s": None, "urgent_score": None, "score_many": staticmethod(
        lambda xs: [x[straggler.FEATURES.index("slowdown")] for x in xs])})()
    evaluated: list[float] = []
    runs = []
    for restore_at in (None, 1000.0 + 15 * 60):
        d, out = straggler.Detector(), Output()
        for k in range(0, 25 * 60, 5):
            ts = 1000.0 + k
            if ts == restore_at:
                d = straggler.Detector.from_state(json.loads(json.dumps(d.to_state())))
            for node, every in (("a", 5), ("b", 60)):
                if k % every:
                    continue
                gpus = []
                for i in range(4):
                    util, clock = 95.0, 1800
                    if node == "a" and i == 3 and k >= 12 * 60:
                        util, clock = 68.0, 1200
                    gpus.append([f"{node}{i}", i, util, clock, 1980, 500.0, 700.0, 60.0, 0, 1e9, 8e10])
                d.add(JobItem(ts, node, {"interval": float(every), "gpus": gpus}), decider,
                      JobContext("job-1", "t", "p", out, lambda kind, key, at, x, info: evaluated.append(at)))
        runs.append([(e["gpu_uuid"], e["node"], e["status"], e["detected_at"]) for e in out.events])
    assert evaluated and all(1000.0 < at <= 1000.0 + 25 * 60 and at % 60 == 0 for at in evaluated)
    assert [(g, s) for g, _, s, _ in runs[0]] == [("a3", "firing")]
    assert 1000.0 + 12 * 60 < runs[0][0][3] <= 1000.0 + 18 * 60       # four epochs once its window shows it
    assert runs[1] == runs[0]                          # saved and restored midway: the same alert


def test_a_straggler_is_not_throttled_by_clock_events_that_only_say_how_clocks_are_set():
    from gpufleet.models.detectors.straggler import stats_of as _stats
    n = 4
    base = [[float(t) for t in range(n)], [90.0] * n, [1900.0] * n, [600.0] * n]
    for bits, throttled in (([0x2, 0x10, 0x100, 0x12], 0.0), ([0x20, 0x10, 0, 0], 0.25), ([0x4, 0x4, 0, 0], 0.0)):
        s = _stats([*base, [float(b) for b in bits], [60.0] * n])
        assert s is not None and s.throttled == throttled, bits


def cause_of(**info):
    base = {"bits": 0, "throttled": 0.0, "capped": 0.0, "clock": 0.98, "peer_clock": 0.98, "limit": 400.0,
            "peer_limit": 400.0}
    from gpufleet.models.detectors.straggler.wording import named_cause
    return named_cause(straggler.StragglerSeen(**{**base, **info}))


def test_the_cause_named_is_the_one_the_numbers_show():
    # a GPU whose power limit was lowered, at it with the power cap reason: power cap, not "no throttle reason"
    assert cause_of(bits=0x4, capped=0.9, clock=0.8, limit=223.0) == "power cap"
    assert cause_of(bits=0x4, capped=0.9, clock=0.98, limit=223.0) == "power cap"      # its limit says it
    assert cause_of(bits=0x4, capped=0.1, clock=0.8) == "lower SM clock without a throttle reason"   # brushing it
    assert cause_of(bits=0x40, throttled=0.5, clock=0.8) == "hardware thermal slowdown"
    assert cause_of(bits=0x40 | 0x4, throttled=0.5, capped=0.9, clock=0.8) == "hardware thermal slowdown"
    # paged on its first slow window, the reason shown briefly is still named: never "without" one it reported
    assert cause_of(bits=0x80, throttled=0.1, clock=0.8) == "power brake"
    assert cause_of(bits=0x2 | 0x10, clock=0.8) == "lower SM clock without a throttle reason"     # benign bits
    assert cause_of(clock=0.98) == "slower without throttling (its host, link or input)"
