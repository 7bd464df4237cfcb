"""IO starvation: a job's GPUs on one node wait for their input data.

State: per GPU of the node, its last window of samples (utilization, whether it holds a process, its
job) and its usual utilization; the host's window (iowait, disk reads, network receive, CPU).

Every epoch, per job on the node: are its GPUs, which hold a process, idle or in a saw-tooth while the
host is busy fetching? Three input paths, each with its own signals:

- local disk: iowait and disk reads high;
- network storage or an object store: host network receive high while disk reads stay low and iowait
  moderate or zero;
- the input pipeline on the host itself: the host's CPUs saturated while the GPUs wait.

The features pair "the GPUs are not busy" with each path's signal, so the trees see which path fed the
stall; the alert's evidence names the path (``cause``) and the other signals present (``also_seen``).
A job is judged once its GPUs have fallen from their usual work (``util_drop``, see FEATURES): the host's
signals are the node's, and a job beside a starved one that goes on as usual is not starved. A job's
features and its usual work read only its own samples: a GPU handed from another job within the window
brings none of that job's work with it.

Precedence: GPUs whose process just restarted (memory_leak.RESTART_QUIET_S) are left out: a restart is
not a starvation. A job is judged only while its GPUs hold a process. The node's input paths are shared by
its jobs: when several are judged starved in one epoch, the host's signals are blamed on those whose GPUs
fell furthest from their usual work; a job that fell less than half as far (``SHARED_DROP_SHARE``), such as
a notebook or a service following the saturated host beside a starved job, is not paged (``decide``); and
while a job's starvation incident is open on the node, another job of the node is held back (``held_back``):
one incident for the node's input path, not one more for each job that slows beside it. A job held back is
still starved for the other detectors (``starved_jobs``): the job stage does not judge it for stragglers while
it waits with the node's input path.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Self

from gpufleet.contracts.output import Output

from .base import (
    EPOCH_S,
    NAN,
    WINDOW_S,
    Decider,
    Incident,
    Incidents,
    Recorder,
    StateError,
    Window,
    add_run,
    clip,
    event,
    forget_runs,
    mean,
    minutes,
    not_nan,
    runs_of,
    window_s,
)

KIND = "io_starvation"
STAGE = "node"
LEVEL = "job"
# the GPUs' work and the host's input paths only: what a GPU's PCIe traffic or memory share looks like depends
# on the model and the workload, not on whether its input comes in time (trees that read them learn a fleet).
# A starved job's GPUs fall from the work they were doing while the host fetches: ``util_drop`` is how far
# below their usual utilization (a moving average over about USUAL_TAU_S) they are, which a GPU idle for
# long, a notebook's burst, or a service following its tide for hours does not show.
FEATURES = ("util_mean", "util_low_frac", "util_spread", "iowait", "disk_read_gbps", "net_rx_gbps", "host_cpu",
            "procs_frac", "idle_while_waiting", "idle_while_reading", "idle_while_receiving", "idle_while_cpu_bound",
            "host_known", "util_drop", "drop_while_fetching")
USUAL_TAU_S = 3600.0
DROP_MIN = 0.10              # 10 points of utilization below the usual
# or, for a job whose usual work is light (a service at low load), a fall by a third of it and 5 points at least
DROP_SHARE, DROP_MIN_LIGHT = 1.0 / 3.0, 0.05
SHARED_DROP_SHARE = 0.5      # beside a starved job of the node, a job that fell less than half as far is not paged
EPOCH = "node"               # decide() takes one node's epoch: every job judged on the node at once
NET_SCALE = 1.0e9            # bytes/s of host network receive that count as "a lot"
DISK_SCALE = 1.0e9


class GpuWindow(Window):
    """One GPU's samples in a node's window: the time and utilization of each in the window's array, and what
    seldom changes kept as runs: a job (a name shared with the message's), whether the GPU held a compute process,
    its index, and how many samples in a row had them. A name per sample in a list held 8 bytes a sample and the
    two values 16 more (a minute's window sampled every second: 568 bytes of list and 960 of array a GPU); a run
    takes 32 bytes, one or two a window whatever the sampling. The columns read and saved are as before. The GPU's
    usual utilization (a moving average, the time it was last moved and the job it is of) lives beside them (a
    tuple per GPU in a dict of the node's, replaced every epoch, held about 110 bytes a GPU more)."""

    __slots__ = ("runs", "usual", "usual_at", "usual_job")
    FIELDS = ("ts", "util")
    SAVED = ("ts", "util", "has_process", "job", "gpu_index")
    RUN = 4                          # job, has_process (1.0 when the GPU held a compute process), gpu_index, count

    def __init__(self) -> None:
        super().__init__()
        self.runs: list = []         # RUN values a run, oldest first; two runs in a row differ in one of the three
        self.usual: float | None = None          # the usual utilization (None: not known yet)
        self.usual_at = 0.0
        self.usual_job = ""

    def add(self, ts: float, util: float | None, has_process: float, job: str | None, gpu_index: int,
            cutoff: float) -> None:
        """One sample, and forget those at or before ``cutoff``."""
        self.data.extend((ts, NAN if util is None else util))
        add_run(self.runs, job, has_process, gpu_index)
        if self.data[0] <= cutoff:
            self.drop_through(cutoff)

    def _expand(self, field: int, i: int, j: int) -> list:
        """Field ``field`` of the runs (0 job, 1 has_process, 2 gpu_index) for samples ``i`` to ``j`` (past the
        last)."""
        return runs_of(self.runs, self.RUN, field, i, j)

    @property
    def jobs(self) -> list[str | None]:
        """The job of each sample, oldest first."""
        return self._expand(0, 0, len(self))

    def columns(self, i: int, j: int) -> list[list[float]]:
        """Samples ``i`` to ``j`` (past the last): ts, util, has_process and gpu_index, one list each."""
        ts, util = super().columns(i, j)
        return [ts, util, self._expand(1, i, j), self._expand(2, i, j)]

    def last_job(self) -> str | None:
        """The newest sample's job (the window is not empty)."""
        return self.runs[-4]

    def last_index(self) -> int:
        """The newest sample's GPU index (the window is not empty)."""
        return self.runs[-2]

    def _run_of(self, k: int) -> tuple[int, int]:
        """The run holding sample ``k`` (0 is the oldest; its position in ``runs``) and that run's first sample."""
        runs, first = self.runs, len(self)
        r = len(runs)
        while r:                     # from the newest run: the one asked for is usually the last
            r -= self.RUN
            first -= runs[r + 3]
            if first <= k:
                return r, first
        raise IndexError(k)

    def job_of(self, k: int) -> str | None:
        """The job of sample ``k`` (0 is the oldest)."""
        return self.runs[self._run_of(k)[0]]

    def since_job(self, i: int, j: int) -> int:
        """The first of samples ``i`` to ``j`` (past the last) that belong to the last one's job: the samples of
        the job before it on this GPU say nothing of this one's work."""
        runs = self.runs
        r, first = self._run_of(j - 1)
        job = runs[r]
        while first > i and r and runs[r - self.RUN] == job:     # the job's earlier runs (a process came or went)
            r -= self.RUN
            first -= runs[r + 3]
        return max(i, first)

    def drop_through(self, cutoff: float) -> int:
        n = Window.drop_through(self, cutoff)
        forget_runs(self.runs, self.RUN, n)
        return n

    def to_state(self) -> dict:
        columns = super().to_state()
        n = len(self)
        return {"ts": columns["ts"], "util": columns["util"], "has_process": self._expand(1, 0, n),
                "job": self._expand(0, 0, n), "gpu_index": self._expand(2, 0, n)}       # the order of SAVED

    @classmethod
    def from_state(cls, state: dict, what: str) -> Self:
        wrong = StateError(f"{what}: a saved window needs the columns {list(cls.SAVED)}")
        try:
            w = super().from_state(state, what)
        except StateError:
            raise wrong from None
        jobs, has_process, index = cols = [state.get(name) or [] for name in ("job", "has_process", "gpu_index")]
        if not all(isinstance(c, list) and len(c) == len(w) for c in cols) or \
                not all(j is None or isinstance(j, str) for j in jobs) or \
                not all(type(v) in (int, float) for c in (has_process, index) for v in c):
            raise wrong
        for job, p, i in zip(jobs, has_process, index):
            add_run(w.runs, job, float(p), int(i))
        return w


class HostWindow(Window):
    """The host's samples in a node's window."""

    __slots__ = ()
    FIELDS = ("ts", "iowait", "disk_read", "net_rx", "cpu")


def features(util: Sequence[float], has_process: Sequence[float], host: Sequence[Sequence[float]] | None,
             usual: float | None = None) -> list[float]:
    """One job's GPUs on one node over one window (every sample's utilization, NaN where not reported, and
    whether the GPU held a process), the host's samples over the same window (:meth:`HostWindow.between`'s
    columns, None: none), and the mean of the GPUs' usual utilization before it (percent; None: not known yet)."""
    u = not_nan(util)
    um = mean(u) if u else 0.0
    spread = (max(u) - min(u)) / 100.0 if u else 0.0
    _, iw, dr, nr, cpu = (not_nan(c) for c in host) if host is not None else ([], [], [], [], [])
    wait = mean(iw) / 100.0 if iw else 0.0
    reads = mean(dr) / DISK_SCALE if dr else 0.0
    net = mean(nr) / NET_SCALE if nr else 0.0
    busy_cpu = mean(cpu) / 100.0 if cpu else 0.0
    has_work = mean(has_process) if len(has_process) else 0.0
    # the host fetches input *and* this job's GPUs, which hold a process, sit idle: both at once
    not_busy = (1.0 - um / 100.0) * has_work
    paths = (min(1.0, wait / 0.2), min(1.0, reads), min(1.0, net), clip((busy_cpu - 0.75) / 0.2, 0.0, 1.0))
    drop = max(0.0, usual - um) / 100.0 * has_work if usual is not None and u else 0.0
    return [um / 100.0, (sum(1 for x in u if x < 30) / len(u)) if u else 0.0, spread, wait, reads, net, busy_cpu,
            has_work, *(not_busy * p for p in paths), 1.0 if (iw or dr or nr or cpu) else 0.0, drop,
            drop * max(paths)]


_DROP, _UTIL, _PROCS, _HOST_KNOWN = (FEATURES.index(n) for n in ("util_drop", "util_mean", "procs_frac", "host_known"))


def applies(x: list[float]) -> bool:
    """Judged while the job's GPUs hold a process and have fallen from their usual work, at least DROP_MIN
    (10 points) below it, or by DROP_SHARE of it (a third) and at least DROP_MIN_LIGHT (5 points) where that
    work is light (a service at 15% utilization starved to 7% falls 8 points), on a node that reports its
    host's metrics (without them an idle GPU says nothing about its input). The host's signals are the
    node's: beside a starved job, a job that goes on as usual is not starved."""
    procs = x[_PROCS]
    if procs < 0.5 or x[_HOST_KNOWN] <= 0:
        return False
    drop = x[_DROP]
    if drop >= DROP_MIN:
        return True
    usual = x[_UTIL] + drop / procs          # util_drop is the fall times the share of samples with a process
    return drop >= DROP_MIN_LIGHT and drop >= DROP_SHARE * usual


def cause(x: list[float]) -> tuple[str, list[str]]:
    """The input path the evidence points to, and the other signals seen."""
    f = dict(zip(FEATURES, x))
    paths = {"disk": max(f["idle_while_waiting"], f["idle_while_reading"]),
             "network": f["idle_while_receiving"] * (1.0 if f["disk_read_gbps"] < 0.3 else 0.5),
             "host cpu": f["idle_while_cpu_bound"]}
    best = max(paths, key=lambda k: paths[k])
    seen = [p for p, v in paths.items() if p != best and v > 0.3]
    return best, seen


def baseline(x: list[float]) -> bool:
    """The rule an operator writes first: iowait above 10% while utilization is under half."""
    return x[FEATURES.index("iowait")] >= 0.10 and x[FEATURES.index("util_mean")] < 0.5


class Detector:
    """The IO starvation detector of one node."""

    __slots__ = ("gpus", "host", "epoch", "interval", "incidents", "held")

    def __init__(self) -> None:
        self.gpus: dict[str, GpuWindow] = {}     # each with its GPU's usual utilization
        self.held: set[str] = set()              # jobs judged starved at the last epoch but held back
        self.host = HostWindow()
        self.epoch: int | None = None
        self.interval = 5.0
        self.incidents = Incidents()

    def add(self, msg, decider: Decider, ctx) -> None:
        """One node message (in ts order); GPUs in ``ctx.flags.quiet`` (just restarted) are left out, and
        the jobs starved of input go into ``ctx.flags.starved``."""
        self._add(msg, decider, ctx.out, ctx.tenant_of, ctx.flags.quiet, ctx.recorder)
        ctx.flags.starved |= self.starved_jobs()

    def _add(self, msg, decider: Decider, out: Output, tenant_of: dict, quiet: set[str],
             recorder: Recorder | None) -> None:
        ts = msg.ts
        self.interval = msg.interval_s or self.interval
        epoch_s = max(EPOCH_S, self.interval)
        epoch = int(ts // epoch_s)
        if self.epoch is not None and epoch > self.epoch:
            self._evaluate(msg.node, msg.pool, (self.epoch + 1) * epoch_s, decider, out, tenant_of, quiet, recorder)
        self.epoch = epoch
        host = msg.host
        if host is not None:
            self.host.append(ts, host.iowait_pct, host.disk_read_bytes_per_s, host.net_rx_bytes_per_s,
                             host.cpu_util_pct)
        else:
            self.host.append(ts, None, None, None, None)
        cutoff = ts - window_s(self.interval)
        self.host.drop_through(cutoff)
        for g in msg.gpus:
            w = self.gpus.get(g.uuid)
            if w is None:
                w = self.gpus[g.uuid] = GpuWindow()
            w.add(ts, g.util_pct, 1.0 if g.processes else 0.0, g.job, g.index, cutoff)
        for uuid in [u for u, w in self.gpus.items() if not w.data or w.last_ts() <= cutoff]:
            del self.gpus[uuid]

    def _evaluate(self, node: str, pool, at: float, decider: Decider, out: Output, tenant_of: dict,
                  quiet: set[str], recorder: Recorder | None) -> None:
        start = at - window_s(self.interval)
        by_job: dict[str, tuple[list[float], list[float], set[float]]] = {}   # utils, has_process, GPU indices
        job_usual: dict[str, list[float]] = {}
        for uuid, w in self.gpus.items():
            i, j = w.span(start, at)
            if j > i:                    # a GPU handed to another job in the window: only the new job's samples
                i = w.since_job(i, j)
            _, util, has_process, index = w.columns(i, j)
            u = not_nan(util)
            now = sum(u) / len(u) if u else None
            if recorder is not None and now is not None:     # per GPU, for the idle baselines of the evaluation
                last_job = w.last_job()
                recorder("idle", f"idle:{uuid}", at, [now / 100, max(u) / 100,
                                                       1.0 if last_job is not None else 0.0],
                         {"node": node, "gpu_uuid": uuid, "job": last_job, "index": w.last_index()})
            job = w.job_of(j - 1) if j > i else None
            if job is None:
                continue
            before = w.usual
            if before is not None and w.usual_job != job:
                before = None            # the usual work of another job says nothing of this one's
            if before is not None and uuid not in quiet:
                job_usual.setdefault(job, []).append(before)
            if now is not None:          # the usual level moves towards this window's, by the time passed
                w.usual = now if before is None else \
                    before + (now - before) * (1.0 - math.exp(-(at - w.usual_at) / USUAL_TAU_S))
                w.usual_at, w.usual_job = at, job
            if uuid not in quiet:
                utils, processes, indices = by_job.setdefault(job, ([], [], set()))
                utils.extend(util)
                processes.extend(has_process)
                indices.update(index)
        host = self.host.between(start, at)
        seen, held = set(), set()
        judged = [(job, len(indices), features(utils, has_process, host,
                                               mean(job_usual[job]) if job in job_usual else None))
                  for job, (utils, has_process, indices) in sorted(by_job.items())]
        scores = decider.score_many([x for _, _, x in judged])
        epoch = []
        for (job, gpus, x), score in zip(judged, scores):
            target = f"{node}/{job}"
            path, also = cause(x)
            f = dict(zip(FEATURES, x))
            info = {"node": node, "job": job, "tenant": tenant_of.get(job), "pool": pool, "score": round(score, 4),
                    "gpus": gpus, "util": f["util_mean"] * 100,
                    "iowait": f["iowait"] * 100, "disk": f["disk_read_gbps"], "net": f["net_rx_gbps"],
                    "cpu": f["host_cpu"] * 100, "cause": path, "also_seen": also, "target": target,
                    "window_min": window_s(self.interval) / 60.0}
            epoch.append((f"{KIND}:{target}", x, info, score))
        for (key, x, info, _), positive in zip(epoch, decide(epoch, decider)):
            seen.add(key)
            if recorder is not None:
                recorder(KIND, key, at, x, info)
            if positive and held_back(key, info, self.incidents):
                positive = False
                held.add(info["job"])    # not paged, but starved with the node's input path: not a straggler
            self.incidents.observe(key, positive, at, decider, info, out, describe)
        self.held = held
        for key in self.incidents.keys(f"{KIND}:"):
            if key not in seen:
                self.incidents.observe(key, False, at, decider, {}, out, describe)

    @property
    def usual(self) -> dict[str, tuple[float, float, str]]:
        """Each GPU's usual utilization, when it was last moved and the job it is of, by uuid (where known)."""
        return {u: (w.usual, w.usual_at, w.usual_job) for u, w in self.gpus.items() if w.usual is not None}

    def starved_jobs(self) -> set[str]:
        """Jobs with an IO starvation incident open (or under way) on this node, and those judged starved at the
        last epoch but held back (:func:`held_back`): the other detectors leave them all out alike."""
        return {k.split("/", 1)[1] for k in self.incidents.keys(f"{KIND}:")} | self.held

    def to_state(self) -> dict:
        return {"gpus": {u: w.to_state() for u, w in self.gpus.items()},
                "host": self.host.to_state(), "epoch": self.epoch, "interval": self.interval,
                "incidents": self.incidents.to_state(), "usual": {u: list(p) for u, p in self.usual.items()},
                "held": sorted(self.held)}

    @classmethod
    def from_state(cls, state: dict) -> Detector:
        d = cls()
        try:
            d.gpus = {u: GpuWindow.from_state(w, "IO starvation detector") for u, w in state["gpus"].items()}
            d.host = HostWindow.from_state(state["host"], "IO starvation detector")
            d.epoch, d.interval = state["epoch"], state["interval"]
            d.incidents = Incidents.from_state(state["incidents"])
            d.held = {str(job) for job in state.get("held", ())}          # absent: saved before it was kept
            for u, (v, at, job) in state.get("usual", {}).items():
                w = d.gpus.get(u)        # a GPU's usual level goes with its window
                if w is not None:
                    w.usual, w.usual_at, w.usual_job = float(v), float(at), str(job)
        except (KeyError, AttributeError, TypeError, ValueError):
            raise StateError("IO starvation detector: saved state lacks gpus, host, epoch, interval or "
                             "incidents") from None
        return d


def decide(scored: list[tuple[str, list[float], dict, float]], decider: Decider) -> list[bool]:
    """One epoch of one node, every job judged on it: ``(key, features, info, score)`` each. A job is starved
    where the question applies and its score passes the threshold, unless another job of the node, starved in
    the same epoch, fell more than twice as far below its usual work (``SHARED_DROP_SHARE``): the host's input
    paths are the node's, and the job that fell furthest is the one that waits for them. Training replays
    recorded epochs through this same function."""
    judged = [applies(x) and score >= decider.threshold for _, x, _, score in scored]
    furthest = max((x[_DROP] for (_, x, _, _), j in zip(scored, judged) if j), default=0.0)
    return [j and x[_DROP] >= SHARED_DROP_SHARE * furthest for (_, x, _, _), j in zip(scored, judged)]


def held_back(key: str, info: dict, incidents: Incidents) -> bool:
    """A job not paged yet, while another job's starvation incident is open on its node: the node's input path
    is paged already (a job beside a starved one slows with the host; it does not wait for input of its own).
    Training replays its incidents through this same rule."""
    if incidents.is_open(key):
        return False
    prefix = f"{KIND}:{info['node']}/"
    return any(k != key and k.startswith(prefix) and incidents.is_open(k) for k in incidents.by_key)


def describe(status: str, info: dict, st: Incident, resolved_at: float | None) -> dict:
    path = info["cause"]
    fed = {"disk": f"{info['iowait']:.0f}% iowait and {info['disk']:.2f} GB/s of disk reads",
           "network": f"{info['net']:.2f} GB/s of network receive (disk reads {info['disk']:.2f} GB/s)",
           "host cpu": f"the host's CPUs {info['cpu']:.0f}% busy feeding them"}[path]
    what = (f"job {info['job']} on {info['node']} waits for its input data ({path}): {info['gpus']} GPU"
            f"{'s' if info['gpus'] != 1 else ''} at {info['util']:.0f}% utilization, {fed}")
    if status == "firing":       # starved since the first positive window began: its window before it fired
        summary = f"{what[0].upper()}{what[1:]}, for {minutes(st) + info.get('window_min', WINDOW_S / 60.0):.0f} min"
    else:
        summary = (f"Job {info['job']} on {info['node']} no longer waits for input data "
                   f"(starved for {minutes(st, resolved_at):.0f} min)")
    evidence = {"cause": path, "also_seen": info["also_seen"], "util_pct": round(info["util"], 1),
                "iowait_pct": round(info["iowait"], 1), "disk_read_gb_per_s": round(info["disk"], 3),
                "net_rx_gb_per_s": round(info["net"], 3), "host_cpu_pct": round(info["cpu"], 1),
                "gpus": info["gpus"], "score": info["score"]}
    return event(KIND, info["target"], status, st, resolved_at, info, summary, evidence)
