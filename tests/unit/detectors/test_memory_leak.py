"""The memory leak detector: features, trends, peaks, urgency, runaways, rises shared, restarts."""
import json
import random
from array import array

import pytest

from gpufleet.contracts.output import Output
from gpufleet.models.artifact import Model
from gpufleet.models.detectors import memory_leak
from gpufleet.models.detectors.base import StateError
from gpufleet.models.detectors.memory_leak.statistics import order_trends, order_trends_many
from gpufleet.models.train import incidents


def fx(x, name, module=memory_leak):
    return x[module.FEATURES.index(name)]


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
    decider = type("D", (), {"threshold": 2.0, "persist_on": 1, "persist_off": 1,
                             "hold_down_s": None, "urgent_score": 2.0,
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

    decider = type("D", (), {"threshold": 0.9, "persist_on": 1, "persist_off": 1,
                             "hold_down_s": None, "urgent_score": urgent_score,
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
    return paged, replayed, [(e["gpu_uuid"], e["status"]) for e in ctx.out.events      # an update is no new page
                             if e["status"] == "resolved" or not e.get("revision")]


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


def test_a_job_relaunched_after_its_process_died_is_a_restart_and_a_first_process_is_not():
    """The other detectors leave a restarted GPU out (``restarted``): a process replaced by another, a process
    that died, and one started soon after the death (a relaunch reloading its checkpoint, GPUs idle). A first
    process on a GPU, or one started long after the last died, is not a restart."""
    from types import SimpleNamespace as NS
    decider = type("D", (), {"threshold": 2.0, "persist_on": 1, "persist_off": 1,
                             "hold_down_s": None, "urgent_score": 2.0,
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
