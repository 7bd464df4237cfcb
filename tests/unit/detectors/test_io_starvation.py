"""The IO starvation detector: input paths, a job's fall from its usual work, the node's shared path."""
import json
import random

from gpufleet.contracts.output import Output
from gpufleet.models.detectors import io_starvation
from gpufleet.models.detectors.base import Incidents, Judge
from gpufleet.models.train import incidents, positives


def fx(x, name, module=io_starvation):
    return x[module.FEATURES.index(name)]


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
    decider = type("D", (), {"threshold": 0.5, "persist_on": 1, "persist_off": 1, "hold_down_s": None})()

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
    on_n1 = io_starvation.StarvedSeen(node="n1")
    epoch = [(f"k{i}", x, on_n1, 0.99) for i, x in enumerate((served, notebook, other, quiet))]
    assert io_starvation.decide(epoch, decider) == [True, False, True, False]
    assert io_starvation.decide(epoch[1:2], decider) == [True]          # alone on its node, it is judged as ever
    assert io_starvation.decide([(k, x, i, 0.2) if k == "k0" else (k, x, i, s) for k, x, i, s in epoch],
                                decider) == [False, True, True, False]  # the furthest must itself be starved
    # training replays recorded epochs through the same rule, grouped by node and time
    rows = [(k, 30.0, x, i) for k, x, i, _ in epoch] + [("k9", 60.0, notebook, on_n1)]
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
    decider = type("D", (), {"threshold": 0.5, "persist_on": 1, "persist_off": 1, "hold_down_s": None})()
    a, b, c = ("io_starvation:n1/infer-1", "io_starvation:n1/nb-2", "io_starvation:n2/nb-3")
    rows = [(key, ts, [], io_starvation.StarvedSeen(node=key.split(":")[1].split("/")[0], job=key.split("/")[1]))
            for ts, key in ((30, a), (60, a), (60, b), (60, c), (90, b), (120, a), (120, b))]
    #        a starved at 30 and 60, not at 120; b at 60, 90 and 120; c (another node) at 60
    positive = [True, True, True, True, True, False, True]
    fired = incidents("io_starvation", rows, decider, positive=positive, urgent=[False] * len(rows))
    assert [(e["job"], e["detected_at"]) for e in fired] == [("infer-1", 30), ("nb-3", 60), ("nb-2", 120)]
    plain = incidents("io_starvation", rows, decider, positive=positive, urgent=[False] * len(rows),
                      precedence=False)       # a baseline's rule knows nothing of it
    assert [(e["job"], e["detected_at"]) for e in plain] == [("infer-1", 30), ("nb-2", 60), ("nb-3", 60)]
    open_a = Incidents()
    open_a.observe(a, True, 30.0, io_starvation.StarvedSeen(), Judge(decider, Output(), lambda *args: {}))
    n1, n2 = io_starvation.StarvedSeen(node="n1"), io_starvation.StarvedSeen(node="n2")
    assert io_starvation.held_back(b, n1, open_a) and not io_starvation.held_back(a, n1, open_a)
    assert not io_starvation.held_back(c, n2, open_a)


def test_a_job_held_back_beside_a_starved_one_is_starved_for_the_other_detectors():
    # two training jobs of one node on one disk: a starves first and is paged, b falls as far two minutes later
    # and is held back; both are starved for the straggler detector, saved and restored alike
    from types import SimpleNamespace as NS
    decider = type("D", (), {"threshold": 0.3, "persist_on": 1, "persist_off": 1,
                             "hold_down_s": None, "score_many": staticmethod(
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


def test_io_starvation_reads_a_fall_from_recent_work_not_a_long_idle():
    # a training job at 95% for 20 minutes, then waiting for reads (a saw-tooth averaging about 30%); on the
    # same node a notebook that holds its GPU at 2%, but for a burst of 3 minutes: the host's reads are the same
    # for both
    from types import SimpleNamespace as NS
    decider = type("D", (), {"threshold": 0.3, "persist_on": 1, "persist_off": 1,
                             "hold_down_s": None, "score_many": staticmethod(
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
    decider = type("D", (), {"threshold": 0.05, "persist_on": 1, "persist_off": 1,
                             "hold_down_s": None, "score_many": staticmethod(
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
            assert g.jobs == jobs and len(g) == len(jobs) and g.last_job() == jobs[-1]
            assert g.columns(len(g) - 1, len(g))[3] == [index]
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
