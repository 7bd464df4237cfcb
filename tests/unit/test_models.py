"""The detectors' features, the model artifact, the incident logic and the scoring rule."""
import json
import math
import random
from array import array

import pytest

from gpufleet.contracts.output import Output
from gpufleet.models import evaluate
from gpufleet.models.artifact import Model, ModelError
from gpufleet.models.detectors import KINDS, REGISTRY, io_starvation, memory_leak, straggler
from gpufleet.models.detectors.base import Incidents, StateError
from gpufleet.models.detectors.memory_leak.statistics import order_trends, order_trends_many
from gpufleet.models.train import incidents, positives


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
    decider = type("D", (), {"threshold": 0.5, "persist_on": 1, "persist_off": 1})()
    x = straggler.features({"a": stats(97), "b": stats(40, clock=0.6)}, 12, False)["b"]
    entry = ("b", x, {"level": "gpu", "node": "n1", "held": False}, 0.9)
    assert straggler.decide([entry], decider) == [True]
    assert straggler.decide([(entry[0], x, {**entry[2], "held": True}, 0.9)], decider) == [False]


def test_a_gpu_level_with_its_peers_is_no_straggler_whatever_it_scores():
    # throttled like the rest of its job, or a hair behind: nobody waits for it, however the trees score it
    decider = type("D", (), {"threshold": 0.5, "persist_on": 1, "persist_off": 1})()
    level = straggler.features({"a": stats(97), "b": stats(97), "c": stats(96)}, 12, False)["c"]
    behind = straggler.features({"a": stats(97), "b": stats(97), "c": stats(88)}, 12, False)["c"]
    assert fx(level, "slowdown") < straggler.MIN_SLOWDOWN <= fx(behind, "slowdown")
    info = {"level": "gpu", "node": "n1", "held": False}
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


def slow_gpu_alerts(gaps: dict[int, tuple[int, ...]], slow_clock: int = 1200) -> list[dict]:
    """The straggler alerts of a 4-GPU job sampled every 5 s: 10 minutes at 95% (a GPU at 0% in the epochs
    ``gaps`` names for it), then GPU 3 at 68% with an SM clock of ``slow_clock`` (1800 like its peers: normal)."""
    decider = type("D", (), {"threshold": 0.2, "persist_on": 1, "persist_off": 1, "score_many": staticmethod(
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
        d.add("job-1", ts, "node-1", {"interval": 5.0, "gpus": gpus}, "t", "p", decider, out, None)
    return [e for e in out.events if e["status"] == "firing"]


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


def test_leak_features_tell_steady_growth_from_a_cache_step_and_a_breathing_cache():
    total = 80e9
    leak = [20e9 + i * 0.05e9 for i in range(61)]                  # 3 GB/h: 20 h to the OOM
    step = [20e9] * 30 + [22e9] * 31
    breathing = [20e9 + (3e9 if (i // 7) % 2 else 0.0) for i in range(61)]
    fl, fs, fb = (memory_leak.features(h, total, age_min=90) for h in (leak, step, breathing))
    assert fx(fl, "steady_30", memory_leak) == 1.0 and fx(fs, "steady_30", memory_leak) < 0.3
    assert fx(fl, "slope_30", memory_leak) == pytest.approx(3e9 / total, rel=0.01)
    assert fx(fl, "jump_share_30", memory_leak) < 0.1 and fx(fs, "jump_share_30", memory_leak) == 1.0
    assert fx(fb, "drawdown_30", memory_leak) == pytest.approx(3e9 / total) and fx(fl, "drawdown_30", memory_leak) == 0
    assert memory_leak.minutes_to_oom(fl) == pytest.approx((total - leak[-1]) / 0.05e9, rel=0.02)
    assert memory_leak.features(leak[:5], total, 60) is None       # not enough history
    assert not memory_leak.applies(memory_leak.features(leak[:20], total, age_min=5))    # still warming up


def test_leak_features_read_only_the_newest_load_minutes_which_is_all_a_gpu_keeps():
    total, rng = 80e9, random.Random(8)
    for n in (10, 30, 31, 45, 61):
        history = [20e9 + i * 0.05e9 + rng.gauss(0, 0.2e9) for i in range(n)]
        loads = [rng.uniform(0, 100) for _ in range(n)]
        full = memory_leak.features(history, total, 90, loads)
        assert memory_leak.features(history, total, 90, loads[-memory_leak.LOAD_MINUTES:]) == full, n
        assert full != memory_leak.features(history, total, 90), n          # the loads count
        fewer = loads[len(loads) - min(n, memory_leak.LOAD_MINUTES) + 1:]     # fewer than the features read
        assert memory_leak.features(history, total, 90, fewer) == memory_leak.features(history, total, 90), n
    from types import SimpleNamespace as NS
    decider = type("D", (), {"threshold": 2.0, "persist_on": 1, "persist_off": 1, "urgent_score": 2.0,
                             "score_many": staticmethod(lambda xs: [0.0] * len(xs))})()
    detector = memory_leak.Detector()
    ctx = NS(out=Output(), recorder=None, flags=NS(quiet=set(), starved=set()))
    for k in range(12 * 70):                                      # 5 s samples, 70 minutes
        gpu = NS(uuid="g0", index=0, util_pct=float(k // 12 % 7), mem_used_bytes=2e10 + 1e8 * (k // 12),
                 mem_total_bytes=8e10, processes=[NS(pid=7)], job="j", tenant="t")
        detector.add(NS(ts=6000.0 + 5 * k, node="n1", pool="p", gpus=[gpu]), decider, ctx)
    track = detector.tracks["g0"]
    assert len(track.minutes) == memory_leak.HISTORY_MINUTES and len(track.loads) == memory_leak.LOAD_MINUTES
    assert track.loads.tolist() == [float(m % 7) for m in range(69 - memory_leak.LOAD_MINUTES, 69)]
    assert not ctx.out.events


def test_the_leak_trend_reads_order_not_scale_so_noise_of_any_size_leaves_it_near_zero():
    total, rng = 80e9, random.Random(5)
    for noise in (0.01e9, 0.4e9, 4e9):                 # 10 MB to 4 GB of a process's own noise
        flat = [20e9 + rng.gauss(0, noise) for _ in range(61)]
        slow = [20e9 + i * noise / 10 + rng.gauss(0, noise) for i in range(61)]   # grows 6 noise widths an hour
        ff, fs = memory_leak.features(flat, total, 90), memory_leak.features(slow, total, 90)
        assert abs(fx(ff, "trend_60", memory_leak)) < 0.25, noise
        assert fx(fs, "trend_60", memory_leak) > 0.5, noise
    step = [20e9] * 30 + [22e9] * 31                    # a cache that jumps once and holds: ties count for nothing
    assert fx(memory_leak.features(step, total, 90), "trend_60", memory_leak) == pytest.approx(30 * 31 / (61 * 30))
    assert fx(memory_leak.features(step[::-1], total, 90), "trend_30", memory_leak) < 0


def test_io_features_read_the_waiting_on_each_input_path():
    gpus = ([10.0, 90.0, 5.0, 8.0] * 3, [1.0] * 12)
    busy = ([97.0] * 12, [1.0] * 12)

    def host(iowait=1.0, disk=2e8, net=1e7, cpu=20.0):
        w = io_starvation.HostWindow()
        for i in range(12):
            w.append(float(i), iowait, disk, net, cpu)
        return w.between(-1.0, 12.0)

    disk = io_starvation.features(*gpus, host(iowait=40, disk=2e9))
    network = io_starvation.features(*gpus, host(iowait=3, disk=1e7, net=2.5e9))
    cpu = io_starvation.features(*gpus, host(cpu=99))
    healthy = io_starvation.features(*busy, host(net=2.5e9, cpu=60))
    assert io_starvation.cause(disk)[0] == "disk" and fx(disk, "idle_while_waiting", io_starvation) > 0.7
    assert io_starvation.cause(network)[0] == "network" and fx(network, "idle_while_receiving", io_starvation) > 0.7
    assert io_starvation.cause(cpu)[0] == "host cpu" and fx(cpu, "idle_while_cpu_bound", io_starvation) > 0.7
    assert max(fx(healthy, n, io_starvation) for n in ("idle_while_waiting", "idle_while_reading",
                                                       "idle_while_receiving", "idle_while_cpu_bound")) < 0.05


def test_beside_a_starved_job_a_job_of_the_node_that_fell_less_than_half_as_far_is_not_paged():
    decider = type("D", (), {"threshold": 0.5, "persist_on": 1, "persist_off": 1})()

    def host(cpu=97.0):
        w = io_starvation.HostWindow()
        for i in range(12):
            w.append(float(i), 1.0, 2e7, 1e7, cpu)
        return w.between(-1.0, 12.0)

    served = io_starvation.features([6.0] * 12, [1.0] * 12, host(), usual=62.0)      # fell 56 points
    notebook = io_starvation.features([9.0] * 12, [1.0] * 12, host(), usual=31.0)    # fell 22: follows the host
    other = io_starvation.features([12.0] * 12, [1.0] * 12, host(), usual=45.0)      # fell 33: starved too
    quiet = io_starvation.features([40.0] * 12, [1.0] * 12, host(), usual=44.0)      # fell 4: not judged
    assert all(io_starvation.applies(x) for x in (served, notebook, other)) and not io_starvation.applies(quiet)
    epoch = [(f"k{i}", x, {"node": "n1"}, 0.99) for i, x in enumerate((served, notebook, other, quiet))]
    assert io_starvation.decide(epoch, decider) == [True, False, True, False]
    assert io_starvation.decide(epoch[1:2], decider) == [True]          # alone on its node, it is judged as ever
    assert io_starvation.decide([(k, x, i, 0.2) if k == "k0" else (k, x, i, s) for k, x, i, s in epoch],
                                decider) == [False, True, True, False]  # the furthest must itself be starved
    # training replays recorded epochs through the same rule, grouped by node and time
    rows = [(k, 30.0, x, i) for k, x, i, _ in epoch] + [("k9", 60.0, notebook, {"node": "n1"})]
    assert positives("io_starvation", rows, [0.99] * 5, decider) == [True, False, True, False, True]


def test_a_job_of_light_usual_work_is_judged_once_it_fell_a_third_of_it():
    def host():
        w = io_starvation.HostWindow()
        for i in range(12):
            w.append(float(i), 24.0, 2.3e9, 1e7, 18.0)       # iowait and disk reads of a starved disk
        return w.between(-1.0, 12.0)

    def judged(now, usual, procs=1.0):
        return io_starvation.applies(io_starvation.features([now] * 12, [procs] * 12, host(), usual=usual))

    assert judged(7.0, 14.0)                 # a service at 14% starved to 7%: 7 points, half of its work
    assert judged(10.0, 15.0)                # a third of it, 5 points
    assert not judged(11.0, 15.0)            # 4 points: within a light service's own noise
    assert not judged(30.0, 38.0)            # 8 points of 38: a busier job's wobble, not a third of it
    assert judged(28.0, 38.0)                # 10 points: judged whatever its usual work
    assert not judged(2.0, 4.0)              # half of 4%, but 2 points
    assert not judged(7.0, 14.0, procs=0.4)  # without a process most of the window, never
    # the fall is read as the features give it (times the share of samples with a process)
    assert judged(7.0, 14.0, procs=0.75) and not judged(10.5, 15.0, procs=0.75)


def test_while_a_job_of_the_node_is_paged_as_starved_another_job_of_it_is_held_back():
    decider = type("D", (), {"threshold": 0.5, "persist_on": 1, "persist_off": 1})()
    a, b, c = ("io_starvation:n1/infer-1", "io_starvation:n1/nb-2", "io_starvation:n2/nb-3")
    rows = [(key, ts, [], {"node": key.split(":")[1].split("/")[0], "job": key.split("/")[1]})
            for ts, key in ((30, a), (60, a), (60, b), (60, c), (90, b), (120, a), (120, b))]
    #        a starved at 30 and 60, not at 120; b at 60, 90 and 120; c (another node) at 60
    positive = [True, True, True, True, True, False, True]
    fired = incidents("io_starvation", rows, decider, positive=positive, urgent=[False] * len(rows))
    assert [(e["job"], e["detected_at"]) for e in fired] == [("infer-1", 30), ("nb-3", 60), ("nb-2", 120)]
    plain = incidents("io_starvation", rows, decider, positive=positive, urgent=[False] * len(rows),
                      precedence=False)       # a baseline's rule knows nothing of it
    assert [(e["job"], e["detected_at"]) for e in plain] == [("infer-1", 30), ("nb-2", 60), ("nb-3", 60)]
    open_a = Incidents()
    open_a.observe(a, True, 30.0, decider, {}, Output(), lambda *args: {})
    n1, n2 = {"node": "n1"}, {"node": "n2"}
    assert io_starvation.held_back(b, n1, open_a) and not io_starvation.held_back(a, n1, open_a)
    assert not io_starvation.held_back(c, n2, open_a)


def test_a_job_held_back_beside_a_starved_one_is_starved_for_the_other_detectors():
    # two training jobs of one node on one disk: a starves first and is paged, b falls as far two minutes later
    # and is held back; both are starved for the straggler detector, saved and restored alike
    from types import SimpleNamespace as NS
    decider = type("D", (), {"threshold": 0.3, "persist_on": 1, "persist_off": 1, "score_many": staticmethod(
        lambda xs: [x[io_starvation.FEATURES.index("drop_while_fetching")] for x in xs])})()
    d, out = io_starvation.Detector(), Output()
    starved_at = {}
    for k in range(12 * 30):                                      # 5 s samples, 30 minutes
        ts = 1000.0 + 5 * k
        ctx = NS(out=out, tenant_of={}, recorder=None, flags=NS(quiet=set(), starved=set()))
        saw = [10.0, 90.0, 5.0, 20.0][k % 4]
        gpus = [NS(uuid=f"a{i}", index=i, util_pct=saw if k >= 12 * 20 else 95.0, processes=[1], job="a")
                for i in range(2)]
        gpus += [NS(uuid=f"b{i}", index=2 + i, util_pct=saw if k >= 12 * 22 else 95.0, processes=[1], job="b")
                 for i in range(2)]
        host = NS(iowait_pct=35.0 if k >= 12 * 20 else 1.0, disk_read_bytes_per_s=3e9 if k >= 12 * 20 else 1e8,
                  net_rx_bytes_per_s=1e7, cpu_util_pct=20.0)
        d.add(NS(ts=ts, interval_s=5.0, node="n1", pool="p", host=host, gpus=gpus), decider, ctx)
        for job in ctx.flags.starved:
            starved_at.setdefault(job, ts)
        if k == 12 * 25:
            d = io_starvation.Detector.from_state(json.loads(json.dumps(d.to_state())))
    fired = [e["job"] for e in out.events if e["status"] == "firing"]
    assert fired == ["a"] and d.held == {"b"} and d.starved_jobs() == {"a", "b"}
    assert 1000 + 5 * 12 * 20 <= starved_at["a"] < starved_at["b"] <= 1000 + 5 * 12 * 24


def test_every_detector_is_one_package_in_the_registry():
    for kind, entry in REGISTRY.items():
        m = entry.module
        assert m.KIND == kind and m.STAGE in ("node", "job") and m.LEVEL in ("gpu", "job")
        assert len(set(m.FEATURES)) == len(m.FEATURES) and entry.edge_s >= 0 and entry.persist_off >= 1
        assert entry.colour.startswith("#") and (entry.delay_goal_s is None or entry.delay_goal_s > 0)
        for part in ("Detector", "features", "applies", "decide", "describe", "baseline"):
            assert hasattr(m, part), (kind, part)


def test_the_packaged_model_loads_and_an_incompatible_one_is_refused(tmp_path):
    model = Model.default()
    assert set(model.kinds) == set(KINDS) and model.metadata
    doc = model.to_dict()
    bad = tmp_path / "old.json"
    bad.write_text(json.dumps(doc | {"feature_version": 0}))
    with pytest.raises(ModelError, match="feature set 0.*gpufleet model train"):
        Model.load(bad)
    renamed = json.loads(json.dumps(doc))
    renamed["kinds"]["straggler"]["features"][0] = "something_else"
    bad.write_text(json.dumps(renamed))
    with pytest.raises(ModelError, match="straggler detector expects features"):
        Model.load(bad)
    bad.write_text("{not json")
    with pytest.raises(ModelError, match="not JSON"):
        Model.load(bad)
    for damage, why in ((lambda t: t["l"].__setitem__(0, 0), "points outside its tree"),    # a loop
                        (lambda t: t["f"].__setitem__(0, 99), "points outside its tree"),
                        (lambda t: t["v"].pop(), "differ in length"),
                        (lambda t: t["t"].__setitem__(0, "x"), "points outside its tree")):
        broken = json.loads(json.dumps(doc))
        damage(broken["kinds"]["io_starvation"]["trees"][0])
        bad.write_text(json.dumps(broken))
        with pytest.raises(ModelError, match=f"io_starvation detector is damaged .*{why}"):
            Model.load(bad)
    newer = json.loads(json.dumps(doc))
    newer["kinds"]["memory_leak"]["warp_factor"] = 9
    bad.write_text(json.dumps(newer))
    with pytest.raises(ModelError, match=r"memory_leak detector has settings .*\['warp_factor'\].*newer gpufleet"):
        Model.load(bad)
    broken = json.loads(json.dumps(doc))
    del broken["kinds"]["io_starvation"]["trees"]
    bad.write_text(json.dumps(broken))
    with pytest.raises(ModelError, match=r"io_starvation detector lacks \['trees'\]"):
        Model.load(bad)
    older = json.loads(json.dumps(doc))              # made before urgent windows: none, and it loads
    del older["kinds"]["memory_leak"]["urgent_score"]
    bad.write_text(json.dumps(older))
    assert Model.load(bad).kinds["memory_leak"].urgent_score is None
    good = tmp_path / "m.json"
    model.save(good)
    assert Model.load(good).kinds["memory_leak"].trees == model.kinds["memory_leak"].trees


def test_incidents_fire_once_and_resolve_with_one_id():
    km = Model.untrained().kinds["straggler"]
    km.persist_on, km.persist_off = 2, 3
    inc, out = Incidents(), Output()

    def describe(status, info, st, resolved_at):
        return {"status": status, "started": st.started_at, "detected": st.detected_at, "resolved": resolved_at}

    for ts, positive in ((0, True), (30, False), (60, True), (90, True), (120, True), (150, False), (180, True),
                         (210, False), (240, False), (270, False), (300, False)):
        inc.observe("straggler:g", positive, ts, km, {}, out, describe)
    assert out.events == [{"status": "firing", "started": 60, "detected": 90, "resolved": None},
                          {"status": "resolved", "started": 60, "detected": 90, "resolved": 270}]


def test_an_urgent_positive_opens_the_incident_at_once():
    km = Model.untrained().kinds["memory_leak"]
    km.persist_on, km.persist_off = 4, 2
    inc, out = Incidents(), Output()

    def describe(status, info, st, resolved_at):
        return {"status": status, "detected": st.detected_at}

    for ts, positive, urgent in ((0, True, False), (60, True, False), (120, True, True), (180, True, True)):
        inc.observe("memory_leak:g", positive, ts, km, {}, out, describe, urgent=urgent)
    assert out.events == [{"status": "firing", "detected": 120}]          # not 180, the fourth in a row


def test_a_leak_near_its_oom_is_urgent_with_less_certainty_and_one_far_from_it_is_not():
    total = 80e9
    km = Model.untrained().kinds["memory_leak"]
    km.threshold, km.urgent_score = 0.98, 0.9
    # 20 GB/h for the last 12 minutes after an hour flat: the 30-minute rate says over an hour, the 10-minute one 24 min
    late = [68e9] * 49 + [68e9 + i * 20e9 / 60 for i in range(1, 13)]
    far = [20e9 + i * 0.05e9 for i in range(61)]                         # 3 GB/h, 20 h from the OOM
    fl, ff = memory_leak.features(late, total, age_min=90), memory_leak.features(far, total, age_min=90)
    oom, rate, over = memory_leak.oom_estimate(fl)
    assert memory_leak.minutes_to_oom(fl) > 60 and oom == pytest.approx((total - late[-1]) / (20e9 / 60), rel=0.15)
    assert rate * total == pytest.approx(20e9, rel=0.05) and over == 10     # the rate of the nearer estimate
    assert memory_leak.urgent(fl, 0.92, km) and memory_leak.decide(fl, 0.92, km)
    assert not memory_leak.urgent(fl, 0.85, km) and not memory_leak.decide(fl, 0.85, km)
    assert not memory_leak.urgent(ff, 0.97, km) and not memory_leak.decide(ff, 0.97, km)
    assert memory_leak.decide(ff, 0.98, km) and not memory_leak.urgent(ff, 0.99, km)
    km.threshold = 0.8                                                    # a lower threshold asks no more than itself
    assert memory_leak.urgent(fl, 0.85, km)
    km.urgent_score = None                                                # a model without urgency: never urgent
    assert not memory_leak.urgent(fl, 0.99, km) and memory_leak.decide(fl, 0.99, km)


def _leak_node(memory, job=lambda i: f"svc-{i}", minutes=70, gpus=4, urgent_score=None, trees=True,
               events: list | None = None):
    """A node of ``gpus`` GPUs sampled every 5 s for ``minutes``, ``memory(gpu, minute)`` and ``job(gpu)`` each,
    through the stream's leak detector with every window of a process 30 minutes old or more scored 0.99
    (threshold 0.9, one window to fire; ``trees=False``: every window scored 0): the GPUs the stream paged, those
    training's replay of the recorded windows pages, and the stream's events (whole, into ``events`` if given)."""
    from types import SimpleNamespace as NS
    span = memory_leak.FEATURES.index("span")

    def score_many(xs):
        return [0.99 if trees and x[span] >= 0.5 else 0.0 for x in xs]

    decider = type("D", (), {"threshold": 0.9, "persist_on": 1, "persist_off": 1, "urgent_score": urgent_score,
                             "score_many": staticmethod(score_many)})()
    rows: list[tuple] = []
    detector = memory_leak.Detector()
    ctx = NS(out=Output(), recorder=lambda kind, key, ts, x, info: rows.append((key, ts, x, info)),
             flags=NS(quiet=set(), starved=set()))
    for k in range(12 * minutes):
        m = k / 12
        sample = [NS(uuid=f"g{i}", index=i, util_pct=50.0, mem_used_bytes=memory(i, m), mem_total_bytes=24e9,
                     processes=[NS(pid=100 + i)], job=job(i), tenant="t") for i in range(gpus)]
        detector.add(NS(ts=6000.0 + 5 * k, node="n1", pool="p", gpus=sample), decider, ctx)
    paged = {e["gpu_uuid"] for e in ctx.out.events if e["status"] == "firing"}
    scores = score_many([x for _, _, x, _ in rows])
    replayed = {e["gpu_uuid"] for e in incidents("memory_leak", rows, decider, scores)}
    if events is not None:
        events += ctx.out.events
    return paged, replayed, [(e["gpu_uuid"], e["status"]) for e in ctx.out.events]



def test_memory_that_grows_on_a_nodes_replicas_together_is_not_a_leak_and_every_rank_of_one_job_leaking_is():
    rising = lambda i, m: 20.0 + max(0.0, m - 10) * 1.2                  # requests grow from minute 10 on, for all
    cache = lambda i, m: 4e9 + rising(i, m) * 0.03e9                      # a KV cache that follows them: 2.2 GB/h
    # three replicas behind one balancer, each a job of its own, a fourth GPU idle: nothing leaks, whatever the score
    paged, replayed, _ = _leak_node(lambda i, m: cache(i, m) if i < 3 else 5e9)
    assert paged == replayed == set()
    # one of them leaks beside the breathing: its memory grows more than twice as fast as the others'
    paged, replayed, _ = _leak_node(lambda i, m: cache(i, m) + (6e9 * m / 60 if i == 0 else 0.0) if i < 3 else 5e9)
    assert paged == replayed == {"g0"}
    # every rank of one training job leaking alike: one job's leak, paged on each rank
    paged, replayed, _ = _leak_node(lambda i, m: 8e9 + 2e9 * m / 60, job=lambda i: "train")
    assert paged == replayed == {"g0", "g1", "g2", "g3"}
    # two replicas whose memory grows: one other job growing beside it is not enough to call it shared
    paged, replayed, _ = _leak_node(lambda i, m: cache(i, m) if i < 2 else 8e9)
    assert paged == replayed == {"g0", "g1"}
    # a leak paged before two other jobs' memory began to grow beside it goes on: one page, never resolved
    paged, replayed, events = _leak_node(lambda i, m: 8e9 + 2e9 * m / 60 if i == 0 else
                                         8e9 + 2e9 * max(0.0, m - 35) / 60 if i < 3 else 5e9, minutes=80)
    assert paged == replayed == {"g0"} and events == [("g0", "firing")]
    # near the out-of-memory the page goes out even so (urgent): 24 GB reached within the 70 minutes
    paged, replayed, _ = _leak_node(lambda i, m: 8e9 + max(0.0, m - 10) * 0.27e9 if i < 3 else 5e9, urgent_score=0.95)
    assert paged == replayed == {"g0", "g1", "g2"}


LABELS = [
    {"kind": "straggler", "level": "gpu", "node": "n1", "gpu_uuid": "g1", "gpus": ["g1"], "job": "j", "start": 1000,
     "end": 2000},
    {"kind": "straggler", "level": "node", "node": "n2", "gpu_uuid": None, "gpus": ["g2", "g3"], "job": "j",
     "start": 1000, "end": 2000},
    {"kind": "io_starvation", "level": "job", "node": "n3", "gpu_uuid": None, "gpus": ["g4"], "job": "j9",
     "start": 5000, "end": 6000},
    {"kind": "memory_leak", "level": "gpu", "node": "n1", "gpu_uuid": "g5", "gpus": ["g5"], "job": "j",
     "start": 0, "end": 4000, "oom_at": 4000},
    {"kind": "idle", "level": "gpu", "node": "n1", "gpu_uuid": "g6", "gpus": ["g6"], "job": "h", "start": 0,
     "end": 3000},
]


def fire(kind, at, i, **who):
    return {"kind": kind, "status": "firing", "id": f"{kind}{i}", "detected_at": at, "node": who.get("node"),
            "gpu_uuid": who.get("gpu"), "job": who.get("job")}


def test_scoring_follows_the_rule():
    alerts = [
        fire("straggler", 1100, 1, node="n1", gpu="g1"),           # match
        fire("straggler", 2500, 2, node="n1", gpu="g1"),           # within ten minutes after the end: match
        fire("straggler", 2700, 3, node="n1", gpu="g1"),           # too late: false
        fire("straggler", 1200, 4, node="n2", gpu="g3"),           # a GPU of the slow node: match
        fire("straggler", 1300, 5, node="n2"),                      # the node itself: match
        fire("io_starvation", 5100, 6, node="n3", job="j9"),       # the fault's job on that node: match
        fire("io_starvation", 5100, 7, node="n3", job="other"),    # another job: false
        fire("memory_leak", 3000, 8, node="n1", gpu="g5"),          # 1000 s before the OOM
        fire("idle", 650, 9, node="n1", gpu="g6"),
        {**fire("straggler", 1100, 1, node="n1", gpu="g1")},        # the same incident again (at least once)
        {**fire("straggler", 1150, 10, node="n1", gpu="g1"), "status": "resolved"},   # not an incident
    ]
    rep = evaluate.score(LABELS, alerts, gpu_hours=2000)
    s = rep.kinds["straggler"]
    assert (s.faults, s.incidents, s.matched_incidents, s.detected_faults) == (2, 5, 4, 2)
    assert s.precision == pytest.approx(0.8) and s.recall == 1.0 and s.f1 == pytest.approx(8 / 9)
    assert sorted(s.delays_s) == [100, 200]
    io = rep.kinds["io_starvation"]
    assert (io.incidents, io.matched_incidents, io.false_alerts) == (2, 1, 1)
    leak = rep.kinds["memory_leak"]
    assert leak.leak_long == 1 and leak.leak_leads_s == [1000] and leak.leak_early_share == 1.0
    assert rep.kinds["idle"].delays_s == [50]                           # from start plus the idle window
    assert rep.false_per_1000h() == pytest.approx(1000 * 2 / 2000)


def test_windows_scored_in_a_batch_score_as_one_at_a_time_to_the_last_bit():
    rng = random.Random(7)
    for kind, km in Model.default().kinds.items():
        splits = sorted({t for tree in km.trees for t, left in zip(tree["t"], tree["l"]) if left != -1})
        # values on each side of every split, exactly on the splits, missing (nan), zeros, and wild ones
        def value(splits=splits):
            pick = rng.randrange(5)
            return (rng.uniform(-1.0, 2.0), rng.choice(splits), float("nan"), 0.0, rng.uniform(-1e6, 1e6))[pick]
        xs = [[value() for _ in km.features] for _ in range(2000)]
        one_by_one = [km.score(x) for x in xs]
        assert km.score_many(xs) == one_by_one, kind
        assert [s for lo in range(0, 2000, 7) for s in km.score_many(xs[lo:lo + 7])] == one_by_one, kind
        assert km.score_many([]) == []
    untrained = Model.untrained().kinds["straggler"]
    assert untrained.score_many([[0.0] * len(untrained.features)] * 3) == [0.5] * 3


def test_io_starvation_reads_a_fall_from_recent_work_not_a_long_idle():
    # a training job at 95% for 20 minutes, then waiting for reads (a saw-tooth averaging about 30%); on the
    # same node a notebook that holds its GPU at 2%, but for a burst of 3 minutes: the host's reads are the same
    # for both
    from types import SimpleNamespace as NS
    decider = type("D", (), {"threshold": 0.3, "persist_on": 1, "persist_off": 1, "score_many": staticmethod(
        lambda xs: [x[io_starvation.FEATURES.index("drop_while_fetching")] for x in xs])})()
    d, out = io_starvation.Detector(), Output()
    ctx = NS(out=out, tenant_of={}, recorder=None, flags=NS(quiet=set(), starved=set()))
    for k in range(12 * 30):                                      # 5 s samples, 30 minutes
        ts, starving = 1000.0 + 5 * k, k >= 12 * 20
        train = [10.0, 90.0, 5.0, 20.0][k % 4] if starving else 95.0
        gpus = [NS(uuid=f"t{i}", index=i, util_pct=train, processes=[1], job="train-1") for i in range(2)]
        burst = 12 * 24 <= k < 12 * 27                            # the notebook's user runs a cell
        gpus.append(NS(uuid="nb", index=2, util_pct=[40.0, 85.0][k % 2] if burst else 2.0, processes=[1],
                       job="notebook-1"))
        host = NS(iowait_pct=35.0 if starving else 1.0, disk_read_bytes_per_s=3e9 if starving else 1e8,
                  net_rx_bytes_per_s=1e7, cpu_util_pct=20.0)
        d.add(NS(ts=ts, interval_s=5.0, node="n1", pool="p", host=host, gpus=gpus), decider, ctx)
        if k == 12 * 22:                                          # saved and restored mid-way: the same levels
            again = io_starvation.Detector.from_state(json.loads(json.dumps(d.to_state())))
            assert again.usual == d.usual and 90 < again.usual["t0"][0] < 95     # moving down since the fall
            d = again
    fired = [e for e in out.events if e["status"] == "firing"]
    assert [e["job"] for e in fired] == ["train-1"] and fired[0]["evidence"]["cause"] == "disk"
    assert fired[0]["detected_at"] >= 1000.0 + 5 * 12 * 20
    x = io_starvation.features([2.0] * 3, [1.0] * 3, [[0.0] * 3, [35.0] * 3, [3e9] * 3, [1e7] * 3, [20.0] * 3],
                               usual=2.5)
    assert fx(x, "util_drop", io_starvation) < 0.01 and fx(x, "idle_while_reading", io_starvation) > 0.9


def test_a_gpu_handed_to_a_new_job_judges_it_by_its_own_samples_only():
    # a service at 80% hands its GPU to a notebook that sits at 1% while the host's CPUs are saturated by another
    # job: the service's last samples in the window are not the notebook's work, so it has not fallen from any
    from types import SimpleNamespace as NS
    decider = type("D", (), {"threshold": 0.05, "persist_on": 1, "persist_off": 1, "score_many": staticmethod(
        lambda xs: [x[io_starvation.FEATURES.index("drop_while_fetching")] for x in xs])})()
    d, out, judged = io_starvation.Detector(), Output(), []

    def recorder(kind, key, at, x, info):
        if kind == io_starvation.KIND:
            judged.append((key, at, x))
    ctx = NS(out=out, tenant_of={}, recorder=recorder, flags=NS(quiet=set(), starved=set()))
    handover = 1000.0 + 5 * 12 * 20 + 10                           # mid-epoch: the window holds both jobs
    for k in range(12 * 30):                                       # 5 s samples, 30 minutes
        ts = 1000.0 + 5 * k
        job, util = ("svc-1", 80.0) if ts < handover else ("nb-1", 1.0)
        gpus = [NS(uuid="g0", index=0, util_pct=util, processes=[1], job=job)]
        host = NS(iowait_pct=0.5, disk_read_bytes_per_s=1e7, net_rx_bytes_per_s=1e7, cpu_util_pct=97.0)
        d.add(NS(ts=ts, interval_s=5.0, node="n1", pool="p", host=host, gpus=gpus), decider, ctx)
    assert not [e for e in out.events if e["status"] == "firing"]
    first = [x for key, at, x in judged if key.endswith("/nb-1")]
    assert len(first) > 10 and all(fx(x, "util_mean", io_starvation) < 0.02 for x in first)
    assert d.usual["g0"][2] == "nb-1" and d.usual["g0"][0] < 2.0
    w = io_starvation.GpuWindow()
    for t, job in ((1.0, "a"), (2.0, "a"), (3.0, "b"), (4.0, "a"), (5.0, "a")):
        w.add(t, 50.0, 1.0, job, 0, 0.0)
    assert w.since_job(0, 5) == 3 and w.since_job(0, 2) == 0 and w.since_job(2, 3) == 2 and w.since_job(4, 5) == 4


def test_a_window_forgets_its_samples_at_or_before_the_cutoff_and_keeps_the_rest_in_order():
    w = io_starvation.HostWindow()
    for t in (5, 10, 10, 15, 20):
        w.append(float(t), None, float(t) * 1e6, None, 50.0)
    assert w.drop_through(4.0) == 0 and len(w) == 5
    assert w.drop_through(10.0) == 3
    ts, iowait, disk, net, cpu = w.between(0.0, 100.0)
    assert list(ts) == [15.0, 20.0] and list(disk) == [15e6, 20e6] and list(cpu) == [50.0, 50.0]
    assert all(v != v for v in iowait + net)                 # not reported: NaN, never a value
    assert w.drop_through(99.0) == 2 and len(w) == 0 and w.between(0.0, 100.0) is None
    assert w.drop_through(100.0) == 0


def test_a_window_gives_the_samples_of_a_span_and_saves_as_named_columns_with_none_and_integers():
    w = straggler.JobWindow()
    rows = [(10.0, 95.5, 0.98, 0.7, 0x24, 61.0), (15.0, None, None, None, None, None), (20.0, 40.0, 0.5, 0.3, 0, 55.5),
            (25.0, 99.0, 1.0, 0.9, 2**52 + 5, 70.0)]
    for r in rows:
        w.append(*r)
    assert w.last_ts() == 25.0 and w.span(10.0, 20.0) == (1, 3) and w.span(30.0, 40.0) == (4, 4)
    util = w.between(10.0, 20.0)[1]
    assert util[0] != util[0] and util[1] == 40.0
    saved = w.to_state()
    assert saved == {name: [r[i] for r in rows] for i, name in enumerate(straggler.JobWindow.COLUMNS)}
    assert all(type(b) is int for b in saved["throttle"] if b is not None)       # reasons stay integers
    again = straggler.JobWindow.from_state(json.loads(json.dumps(saved)), "straggler detector")
    assert again.to_state() == saved
    with pytest.raises(StateError, match="straggler detector: a saved window needs the columns"):
        straggler.JobWindow.from_state({"ts": [1.0]}, "straggler detector")
    # the IO starvation window keeps each sample's job beside its numbers, and forgets both together
    g = io_starvation.GpuWindow()
    for t, job in ((5.0, "a"), (10.0, "a"), (15.0, None), (20.0, "b")):
        g.add(t, 50.0, 1.0 if job else 0.0, job, 3, cutoff=0.0)
    assert g.drop_through(5.0) == 1 and g.jobs == ["a", None, "b"]
    g.add(25.0, None, 0.0, None, 3, cutoff=10.0)
    assert g.jobs == [None, "b", None] and g.to_state()["ts"] == [15.0, 20.0, 25.0]
    saved = g.to_state()
    assert list(saved) == ["ts", "util", "has_process", "job", "gpu_index"] and saved["gpu_index"] == [3, 3, 3]
    assert io_starvation.GpuWindow.from_state(saved, "IO").jobs == [None, "b", None]
    with pytest.raises(StateError, match="IO: a saved window"):
        io_starvation.GpuWindow.from_state({**saved, "job": ["a"]}, "IO")


def test_the_io_window_keeps_jobs_processes_and_indices_as_runs_that_answer_as_columns_per_sample_would():
    rng = random.Random(11)
    for _ in range(300):
        g, plain, t = io_starvation.GpuWindow(), [], 0.0     # plain: a tuple per sample, as a window of columns held
        for _ in range(rng.randrange(1, 80)):
            t += rng.choice((1.0, 5.0, 30.0))
            last = plain[-1] if plain else (0.0, 0.0, 1.0, "a", 0)
            job = rng.choice(("a", "b", None)) if rng.random() < 0.1 else last[3]
            has_process = rng.choice((0.0, 1.0)) if rng.random() < 0.1 else last[2]
            index = rng.choice((0, 3)) if rng.random() < 0.05 else last[4]
            util = rng.choice((None, 50.0, 99.5))
            cutoff = t - rng.choice((60.0, 300.0, 1e9))
            g.add(t, util, has_process, job, index, cutoff)
            plain = [s for s in plain + [(t, util, has_process, job, index)] if s[0] > cutoff]
            jobs = [s[3] for s in plain]
            assert g.jobs == jobs and len(g) == len(jobs) and g.last_job() == jobs[-1] and g.last_index() == index
            runs = [tuple(g.runs[r:r + 3]) for r in range(0, len(g.runs), 4)]
            assert all(a != b for a, b in zip(runs, runs[1:]))           # a new run only when something changed
            i = rng.randrange(len(jobs))
            j = rng.randrange(i + 1, len(jobs) + 1)
            k = j - 1
            while k > i and jobs[k - 1] == jobs[j - 1]:
                k -= 1
            assert g.since_job(i, j) == k and g.job_of(j - 1) == jobs[j - 1]
            ts, utils, processes, indices = g.columns(i, j)
            assert ts == [s[0] for s in plain[i:j]] and processes == [s[2] for s in plain[i:j]]
            assert indices == [s[4] for s in plain[i:j]]
            assert [u if u == u else None for u in utils] == [s[1] for s in plain[i:j]]
        saved = g.to_state()
        assert saved == {"ts": [s[0] for s in plain], "util": [s[1] for s in plain],
                         "has_process": [s[2] for s in plain], "job": jobs, "gpu_index": [s[4] for s in plain]}
        again = io_starvation.GpuWindow.from_state(json.loads(json.dumps(saved)), "IO")
        assert again.runs == g.runs and again.to_state() == saved


def test_the_leak_trends_of_a_batch_are_each_series_own_counted_pair_by_pair():
    rng = random.Random(3)
    series = [[float(rng.choice((1, 2, 2, 3, 5))) * 1e9 + rng.choice((0.0, 0.5)) * i for i in range(n)]
              for n in (3, 10, 10, 30, 31, 45, 61, 61, 61)]
    for ys, (tail_tau, all_tau) in zip(series, order_trends_many(series, 31)):
        pairs = [(i, j) for i in range(len(ys)) for j in range(i + 1, len(ys))]
        k = min(31, len(ys))
        late = [(i, j) for i, j in pairs if i >= len(ys) - k]
        sign = [(ys[j] > ys[i]) - (ys[j] < ys[i]) for i, j in pairs]
        assert all_tau == sum(sign) / len(pairs)
        assert tail_tau == sum((ys[j] > ys[i]) - (ys[j] < ys[i]) for i, j in late) / len(late)
        assert order_trends(ys, 31) == (tail_tau, all_tau)
    assert order_trends_many([[1.0, 2.0]], 31) == [(0.0, 0.0)]          # too short to tell


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


def test_a_gpus_peaks_read_back_exactly_as_they_came_whether_kept_as_steps_or_as_doubles():
    rng = random.Random(15)
    for trial in range(300):
        peaks, plain = memory_leak.Peaks(), []
        level = float(rng.choice([0, 5e8, 7.9e10, 2**52]))
        for _ in range(rng.randint(0, 140)):
            r = rng.random()
            if r < 0.01:
                v = level + 0.5                                 # not a whole number of bytes
            elif r < 0.02:
                v = level + rng.choice([2.0**31, -(2.0**31) - 1, 2.0**31 - 1, -(2.0**31)])   # at and past 32 bits
            elif r < 0.025:
                v = 2.0**53 + 2                                 # past what a double holds exactly
            else:
                v = max(0.0, level + float(rng.randint(-3 * 2**20, 9 * 2**20)))
            level = v if v < 2**53 else level
            peaks.append(v)
            plain.append(v)
            if rng.random() < 0.7:
                peaks.keep(memory_leak.HISTORY_MINUTES)
                del plain[:-memory_leak.HISTORY_MINUTES]
            # doubles only from the last peak steps could not hold: the newest peaks that steps can hold are steps
            s = len(plain)
            while s and plain[s - 1].is_integer() and plain[s - 1] < 2**53 and \
                    (s == len(plain) or -2**31 <= plain[s] - plain[s - 1] < 2**31):
                s -= 1
            assert (0 if peaks.head is None else len(peaks.head)) == s, trial
            got = peaks.doubles()
            assert len(peaks) == len(plain) and list(got) == plain and all(type(x) is float for x in got.tolist())
            assert peaks.last() == plain[-1]
        again = memory_leak.Peaks(json.loads(json.dumps(peaks.doubles().tolist())))
        assert again.doubles().tolist() == plain, trial
    steps = memory_leak.Peaks([5e8, 5e8 + 2**20, 5e8 + 2**21])
    assert steps.head is None and steps.steps.itemsize == 4         # whole bytes: 4 bytes a minute
    track = memory_leak.MemoryTrack(1, 5.0, steps, array("d", [1.0] * 3), 0.0, 0, None, 0.0, 8e10).to_state()
    for bad in ({"minutes": ["a"]}, {"loads": ["a"]}):
        with pytest.raises(StateError, match="lists of numbers"):
            memory_leak.MemoryTrack.from_state({**track, **bad})


def test_an_alerts_summary_says_how_long_the_evidence_spans_not_how_long_the_incident_waited_to_fire():
    """An IO starvation fires on its first starved window: it has been starved for that window, not 0 min. A leak's
    rate is measured over its last 10 or 30 minutes (fewer on a short history), whatever the incident's age."""
    from gpufleet.models.detectors.base import Incident
    at = 1_800_000_000.0
    io = {"node": "n1", "job": "train-1", "tenant": "t", "pool": "p", "score": 0.95, "gpus": 8, "util": 20.0,
          "iowait": 30.0, "disk": 2.0, "net": 0.1, "cpu": 10.0, "cause": "disk", "also_seen": [],
          "target": "n1/train-1", "window_min": 3.0}    # sampled every minute: a window of three samples
    first = io_starvation.describe("firing", io, Incident(1, 0, at, at, at, io), None)
    assert first["summary"].endswith("for 3 min") and first["started_at"] == first["detected_at"] == at
    later = io_starvation.describe("firing", io, Incident(3, 0, at, at + 120, at, io), None)
    assert later["summary"].endswith("for 5 min")
    gone = io_starvation.describe("resolved", io, Incident(0, 2, at, at + 120, at, io), at + 600)
    assert gone["summary"].endswith("(starved for 10 min)")

    # a 3 GB/h leak, an hour of history: the 30-minute rate, over 30 minutes, however few minutes the incident is old
    far = memory_leak.features([20e9 + i * 0.05e9 for i in range(61)], 80e9, age_min=90)
    oom, rate, over = memory_leak.oom_estimate(far)
    assert over == 30 and rate * 80e9 == pytest.approx(3e9, rel=0.01)
    short = memory_leak.features([20e9 + i * 0.05e9 for i in range(16)], 80e9, age_min=16)
    assert memory_leak.oom_estimate(short)[2] == 15                          # 16 peaks a minute apart span 15 min
    leak = {"node": "n1", "gpu_uuid": "GPU-1", "job": "svc", "tenant": "t", "pool": "p", "index": 2, "pid": 7,
            "score": 0.99, "rate_gb_h": rate * 80, "used_gb": 23.0, "total_gb": 80.0, "to_oom_min": oom,
            "rate_over_min": over, "severity": "warning"}
    fired = memory_leak.describe("firing", leak, Incident(4, 0, at, at + 180, at, leak), None)["summary"]
    assert "leaks memory: 3.00 GB/h over the last 30 min, 23.0 of 80 GB used" in fired and "for 3 min" not in fired
    assert fired.endswith("out of memory in about 19.0 h")                   # 57 GB left at 3 GB/h
    full = dict(leak, used_gb=79.9, to_oom_min=0.2)                       # found as the memory runs out
    assert memory_leak.describe("firing", full, Incident(1, 0, at, at, at, full), None)["summary"].endswith(
        "79.9 of 80 GB used, out of memory in under a minute")

    node = {"level": "node", "node": "n2", "gpus": 8, "job": "train-2", "peers": 1, "index": 0, "bits": 0,
            "throttled": 0.0, "clock": 0.6, "peer_clock": 0.8, "util": 85.0, "peer_util": 84.0, "slowdown": 0.25,
            "power": 0.5, "peer_power": 0.7, "score": 0.9, "target": "n2"}
    text = straggler.describe("firing", node, Incident(4, 0, at, at + 90, at, node), None)["summary"]
    assert "25% behind the job's other node for 2 min" in text
    gpu = dict(node, level="gpu", peers=7)
    text = straggler.describe("firing", gpu, Incident(4, 0, at, at + 90, at, gpu), None)["summary"]
    assert "behind its 7 peers" in text


def test_a_job_whose_nodes_sample_at_different_intervals_is_judged_at_the_pace_of_its_slowest():
    # node "a" every 5 s, node "b" every 60 s, one job: GPU a3 slows down (lower clock) from minute 12 on. Its
    # epochs and windows follow node b; every evaluation falls within the run (an epoch counted now in 30 s and
    # now in 60 s put evaluations decades back, which found no samples and forgot the pending incident)
    decider = type("D", (), {"threshold": 0.2, "persist_on": 4, "persist_off": 6, "score_many": staticmethod(
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
                d.add("job-1", ts, node, {"interval": float(every), "gpus": gpus}, "t", "p", decider, out,
                      lambda kind, key, at, x, info: evaluated.append(at))
        runs.append([(e["gpu_uuid"], e["node"], e["status"], e["detected_at"]) for e in out.events])
    assert evaluated and all(1000.0 < at <= 1000.0 + 25 * 60 and at % 60 == 0 for at in evaluated)
    assert [(g, s) for g, _, s, _ in runs[0]] == [("a3", "firing")]
    assert 1000.0 + 12 * 60 < runs[0][0][3] <= 1000.0 + 18 * 60       # four epochs once its window shows it
    assert runs[1] == runs[0]                          # saved and restored midway: the same alert


def test_a_job_relaunched_after_its_process_died_is_a_restart_and_a_first_process_is_not():
    """The other detectors leave a restarted GPU out (``restarted``): a process replaced by another, a process
    that died, and one started soon after the death (a relaunch reloading its checkpoint, GPUs idle). A first
    process on a GPU, or one started long after the last died, is not a restart."""
    from types import SimpleNamespace as NS
    decider = type("D", (), {"threshold": 2.0, "persist_on": 1, "persist_off": 1, "urgent_score": 2.0,
                             "score_many": staticmethod(lambda xs: [0.0] * len(xs))})()
    quiet_s = memory_leak.RESTART_QUIET_S

    def run(pids: dict[float, int | None]) -> dict[float, bool]:
        """pid on GPU g0 from each ts on (10 s samples); whether g0 is restarted at each ts."""
        detector, ctx = memory_leak.Detector(), NS(out=Output(), recorder=None, flags=NS(quiet=set(), starved=set()))
        quiet, pid, end = {}, None, max(pids) + 2 * quiet_s
        for ts in range(0, int(end), 10):
            pid = pids.get(float(ts), pid)
            gpu = NS(uuid="g0", index=0, util_pct=1.0, mem_used_bytes=2e10, mem_total_bytes=8e10,
                     processes=[NS(pid=pid)] if pid is not None else [], job="j", tenant="t")
            detector.add(NS(ts=float(ts), node="n1", pool="p", gpus=[gpu]), decider, ctx)
            quiet[float(ts)] = "g0" in detector.restarted(float(ts))
        return quiet

    first = run({0.0: None, 600.0: 7})                               # a fresh GPU's first process
    assert not any(first.values())
    replaced = run({0.0: 7, 1000.0: 8})
    assert not replaced[990.0] and replaced[1000.0] and replaced[1000.0 + quiet_s - 10] \
        and not replaced[1000.0 + quiet_s]
    relaunched = run({0.0: 7, 1000.0: None, 1140.0: 8})              # died, relaunched 140 s later
    assert relaunched[1000.0] and relaunched[1140.0] and relaunched[1140.0 + quiet_s - 10] \
        and not relaunched[1140.0 + quiet_s]
    late = run({0.0: 7, 1000.0: None, 1000.0 + quiet_s + 100: 8})    # started long after the death: a new start
    assert late[1000.0] and not late[1000.0 + quiet_s] and not any(
        q for ts, q in late.items() if ts >= 1000.0 + quiet_s)


def test_memory_that_runs_away_to_the_oom_is_paged_in_minutes_whatever_the_trees_say():
    """A runaway (``memory_leak.runaway``): memory up by 1% of the GPU's or more in each of the last 5 minutes,
    past the warm-up, out of memory within 30 minutes at that rate, opens the incident at once though the trees
    score it 0; the stream and training's replay agree. A rise in the warm-up, one that stops, one too slow and
    one far from the OOM are not runaways."""
    fast = lambda i, m: 8e9 + max(0.0, m - 40) * 0.6e9 if i == 0 else 5e9      # 2.5% of 24 GB a minute from 40
    events: list = []
    paged, replayed, _ = _leak_node(fast, minutes=60, trees=False, events=events)
    assert paged == replayed == {"g0"}
    page = next(e for e in events if e["status"] == "firing")
    started = 6000.0 + 40 * 60
    assert started + 5 * 60 <= page["detected_at"] <= started + 7 * 60          # its fifth or sixth minute
    assert page["severity"] == "critical" and "over the last 5 min" in page["summary"]
    assert page["evidence"]["rate_bytes_per_h"] == pytest.approx(0.6e9 * 60, rel=0.05)
    assert page["evidence"]["minutes_to_oom"] == pytest.approx((24e9 - (8e9 + 6 * 0.6e9)) / 0.6e9, abs=2.0)
    assert _leak_node(fast, minutes=60)[0] == {"g0"}                             # with the trees as well
    quiet = {
        "in the warm-up": lambda i, m: 2e9 + min(m, 9.0) * 2e9,                  # a model loading, then held
        "a rise that stops": lambda i, m: 8e9 + min(max(0.0, m - 40), 4.0) * 1.5e9,
        "too slow a rise": lambda i, m: 20e9 + max(0.0, m - 40) * 0.2e9,          # 0.8% a minute, 13 min to the OOM
        "far from the OOM": lambda i, m: 2e9 + min(max(0.0, m - 40), 8.0) * 0.3e9,  # 1.3% a minute for 8 min
    }
    for why, memory in quiet.items():
        paged, replayed, _ = _leak_node(lambda i, m, f=memory: f(i, m) if i == 0 else 5e9, minutes=60, trees=False)
        assert paged == replayed == set(), why
    assert memory_leak.runaway([8e9 + k * 0.6e9 for k in range(30)], 24e9, age_min=30.0) is not None
    assert memory_leak.runaway([8e9 + k * 0.6e9 for k in range(30)], 24e9, age_min=14.0) is None   # in the warm-up


def test_a_straggler_is_not_throttled_by_clock_events_that_only_say_how_clocks_are_set():
    from gpufleet.models.detectors.straggler import stats_of as _stats
    n = 4
    base = [[float(t) for t in range(n)], [90.0] * n, [1900.0] * n, [600.0] * n]
    for bits, throttled in (([0x2, 0x10, 0x100, 0x12], 0.0), ([0x20, 0x10, 0, 0], 0.25), ([0x4, 0x4, 0, 0], 0.0)):
        s = _stats([*base, [float(b) for b in bits], [60.0] * n])
        assert s is not None and s.throttled == throttled, bits
