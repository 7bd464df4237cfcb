"""The detectors in the stream: bounded windows, evaluations on event-time epochs, incidents.

A node keeps, per GPU, its last minute of samples and one memory value per minute
for the last half hour; a job keeps its GPUs' last minute. Every ``EPOCH_S`` of
event time the window features go through the model (models/); a target that
scores positive ``persist_on`` times in a row opens an incident (one
``gpufleet.alert.v1`` firing event), and ``persist_off`` negatives in a row
resolve it. Samples arrive here in event-time order, so this is deterministic.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from gpufleet.models.artifact import KindModel, Model
from gpufleet.models.features import io_features, leak_features, median, straggler_features, straggler_stats

from .events import alert
from .jobsample import CLOCK, INDEX, POWER, TEMP, THROTTLE, UTIL, UUID
from .output import Output
from .state import StateError, load_fields, save_fields

EPOCH_S = 30.0          # how often windows are evaluated
WINDOW_S = 60.0         # how much they hold
LEAK_MINUTES = 31       # memory history, one value a minute

THROTTLE_NAMES = ((0x40, "hardware thermal slowdown"), (0x20, "thermal throttling"), (0x80, "power brake"),
                  (0x8, "hardware slowdown"), (0x4, "power cap"))

Recorder = Callable[[str, str, float, list, dict], None]


@dataclass
class Detection:
    """What the processors need to detect: the model, and optionally a recorder of every window's
    features (for training)."""

    model: Model
    recorder: Recorder | None = None


def throttle_text(bits: int) -> str:
    names = [name for bit, name in THROTTLE_NAMES if bits & bit]
    return " and ".join(names[:2]) if names else ""


@dataclass(slots=True)
class Incident:
    """One target's pending or open incident."""

    hits: int                        # positive windows in a row
    misses: int                      # negative windows in a row
    first_ts: float                  # the first positive window of this run
    detected_at: float | None        # when it fired (None while pending)
    started_at: float
    info: dict                       # what the latest positive window showed


Describe = Callable[[str, dict, Incident, float | None], dict]   # status, info, incident, resolved_at


class Incidents:
    """Open and pending incidents of one processor, by dedup key."""

    __slots__ = ("by_key",)

    def __init__(self):
        self.by_key: dict[str, Incident] = {}

    def observe(self, key: str, positive: bool, ts: float, km: KindModel, info: dict, out: Output,
                describe: Describe) -> None:
        st = self.by_key.get(key)
        if positive:
            if st is None:
                st = self.by_key[key] = Incident(0, 0, ts, None, ts, info)
            st.hits += 1
            st.misses = 0
            st.info = info
            if st.detected_at is None and st.hits >= km.persist_on:
                st.detected_at = ts
                out.event(describe("firing", info, st, None))
        elif st is not None:
            st.hits = 0
            st.misses += 1
            if st.detected_at is None:
                del self.by_key[key]
            elif st.misses >= km.persist_off:
                out.event(describe("resolved", st.info, st, ts))
                del self.by_key[key]

    def close_all(self, ts: float, describe: Describe, out: Output) -> None:
        """The target is gone (the job ended): resolve what is open, forget what is pending."""
        for _key, st in list(self.by_key.items()):
            if st.detected_at is not None:
                out.event(describe("resolved", st.info, st, ts))
        self.by_key = {}

    def keys(self, prefix: str) -> list[str]:
        return [k for k in self.by_key if k.startswith(prefix)]

    def to_state(self) -> dict:
        return {k: save_fields(st) for k, st in self.by_key.items()}

    @classmethod
    def from_state(cls, state: dict) -> Incidents:
        i = cls()
        i.by_key = {k: load_fields(Incident, st, "incident") for k, st in state.items()}
        return i


def _event(kind: str, target: str, status: str, st: Incident, resolved_at: float | None, info: dict, summary: str,
           evidence: dict) -> dict:
    assert st.detected_at is not None
    return alert(kind, target, status=status, severity=info.get("severity", "warning"), node=info.get("node"),
                 gpu_uuid=info.get("gpu_uuid"), job=info.get("job"), tenant=info.get("tenant"),
                 pool=info.get("pool"), started_at=st.started_at, detected_at=st.detected_at,
                 resolved_at=resolved_at if status == "resolved" else None, score=info.get("score", 0.0),
                 summary=summary, evidence=evidence)


def _minutes(st: Incident, until: float | None = None) -> float:
    end = until if until is not None else st.detected_at
    assert end is not None
    return (end - st.started_at) / 60.0


class GpuPoint(NamedTuple):
    """One GPU sample in a node's window."""

    ts: float
    util: float | None
    pcie_rx: float | None
    has_process: float              # 1.0 when the GPU had a compute process
    mem_share: float | None         # used memory as a share of the total
    job: str | None
    gpu_index: int


class HostPoint(NamedTuple):
    ts: float
    iowait: float | None
    disk_read: float | None


class JobPoint(NamedTuple):
    """One GPU sample in a job's window."""

    ts: float
    util: float | None
    clock: float | None
    power: float | None
    throttle: int | None
    temp: float | None


@dataclass(slots=True)
class MemoryTrack:
    """One GPU's memory, per minute, since its current process started."""

    minute: int                     # the minute being filled
    peak: float                     # the highest value of that minute so far
    minutes: list[float]            # the last LEAK_MINUTES complete minutes' peaks, oldest first
    pid: int | None
    since: float                    # ts of the first sample of this process
    total: float                    # the GPU's memory


PointT = TypeVar("PointT", GpuPoint, HostPoint, JobPoint)


def save_points(points, kind: type[PointT]) -> dict:
    """A window of samples as named columns."""
    return {name: [p[i] for p in points] for i, name in enumerate(kind._fields)}


def load_points(state: dict, kind: type[PointT], what: str) -> deque[PointT]:
    try:
        columns = [state[name] for name in kind._fields]
    except (KeyError, TypeError):
        raise StateError(f"{what}: a saved window needs the columns {list(kind._fields)}") from None
    return deque(kind(*row) for row in zip(*columns))


# -- the node: IO starvation (per job on the node) and memory leaks (per GPU) ----------------------------
class NodeDetectors:
    __slots__ = ("gpus", "host", "epoch", "mem", "incidents")

    def __init__(self):
        self.gpus: dict[str, deque[GpuPoint]] = {}
        self.host: deque[HostPoint] = deque()
        self.epoch: int | None = None
        self.mem: dict[str, MemoryTrack] = {}
        self.incidents = Incidents()

    def add(self, msg, model: Model, out: Output, tenant_of: dict, recorder: Recorder | None) -> None:
        ts = msg.ts
        epoch = int(ts // EPOCH_S)
        if self.epoch is not None and epoch > self.epoch:
            self._io(msg.node, msg.pool, (self.epoch + 1) * EPOCH_S, model, out, tenant_of, recorder)
        self.epoch = epoch
        host = msg.host
        self.host.append(HostPoint(ts, host.iowait_pct if host else None,
                                   host.disk_read_bytes_per_s if host else None))
        cutoff = ts - WINDOW_S
        while self.host and self.host[0].ts <= cutoff:
            self.host.popleft()
        for g in msg.gpus:
            w = self.gpus.get(g.uuid)
            if w is None:
                w = self.gpus[g.uuid] = deque()
            share = g.mem_used_bytes / g.mem_total_bytes if g.mem_used_bytes is not None and g.mem_total_bytes else None
            w.append(GpuPoint(ts, g.util_pct, g.pcie_rx_bytes_per_s, 1.0 if g.processes else 0.0, share, g.job,
                              g.index))
            while w and w[0].ts <= cutoff:
                w.popleft()
            self._memory(msg, g, model, out, tenant_of, recorder)
        for uuid in [u for u, w in self.gpus.items() if not w or w[-1].ts <= cutoff]:
            del self.gpus[uuid]

    # IO starvation ---------------------------------------------------------------------------------------
    def _io(self, node: str, pool, at: float, model: Model, out: Output, tenant_of: dict,
            recorder: Recorder | None) -> None:
        km = model.kinds["io_starvation"]
        start = at - WINDOW_S
        by_job: dict[str, list[GpuPoint]] = {}
        for w in self.gpus.values():
            samples = [s for s in w if start < s.ts <= at]
            job = samples[-1].job if samples else None
            if job is not None:
                by_job.setdefault(job, []).extend(samples)
        host = [h for h in self.host if start < h.ts <= at]
        seen = set()
        if recorder is not None:         # per GPU, for the idle baselines of the evaluation
            for uuid, w in self.gpus.items():
                u = [s.util for s in w if start < s.ts <= at and s.util is not None]
                if u:
                    last = w[-1]
                    recorder("idle", f"idle:{uuid}", at, [sum(u) / len(u) / 100, max(u) / 100,
                                                           1.0 if last.job is not None else 0.0],
                             {"node": node, "gpu_uuid": uuid, "job": last.job, "index": last.gpu_index})
        for job, samples in sorted(by_job.items()):
            x = io_features([s.util for s in samples], [h.iowait for h in host], [h.disk_read for h in host],
                            [s.pcie_rx for s in samples], [s.has_process for s in samples],
                            [s.mem_share for s in samples])
            target = f"{node}/{job}"
            key = f"io_starvation:{target}"
            seen.add(key)
            score = km.score(x)
            info = {"node": node, "job": job, "tenant": tenant_of.get(job), "pool": pool, "score": round(score, 4),
                    "gpus": len({s.gpu_index for s in samples}), "util": x[0] * 100, "iowait": x[3] * 100,
                    "disk": x[4], "target": target}
            if recorder is not None:
                recorder("io_starvation", key, at, x, info)
            self.incidents.observe(key, score >= km.threshold, at, km, info, out, self._describe_io)
        for key in self.incidents.keys("io_starvation:"):
            if key not in seen:
                self.incidents.observe(key, False, at, km, {}, out, self._describe_io)

    @staticmethod
    def _describe_io(status: str, info: dict, st: Incident, resolved_at: float | None) -> dict:
        what = (f"job {info['job']} on {info['node']} waits for its input data: {info['gpus']} GPU"
                f"{'s' if info['gpus'] != 1 else ''} at {info['util']:.0f}% utilization with {info['iowait']:.0f}% "
                f"iowait and {info['disk']:.1f} GB/s of disk reads")
        if status == "firing":
            summary = f"{what[0].upper()}{what[1:]} for {_minutes(st):.0f} min"
        else:
            summary = f"Job {info['job']} on {info['node']} no longer waits for input data " \
                      f"(starved for {_minutes(st, resolved_at):.0f} min)"
        evidence = {"util_pct": round(info["util"], 1), "iowait_pct": round(info["iowait"], 1),
                    "disk_read_gb_per_s": round(info["disk"], 3), "gpus": info["gpus"], "score": info["score"]}
        return _event("io_starvation", info["target"], status, st, resolved_at, info, summary, evidence)

    # memory leaks ------------------------------------------------------------------------------------------
    def _memory(self, msg, g, model: Model, out: Output, tenant_of: dict, recorder: Recorder | None) -> None:
        if g.mem_used_bytes is None or not g.mem_total_bytes:
            return
        ts, minute = msg.ts, int(msg.ts // 60)
        pid = g.processes[0].pid if g.processes else None
        m = self.mem.get(g.uuid)
        if m is None or m.pid != pid:                # a new process: its memory history starts again
            m = self.mem[g.uuid] = MemoryTrack(minute, g.mem_used_bytes, [], pid, ts, g.mem_total_bytes)
        elif minute > m.minute:
            m.minutes.append(m.peak)
            del m.minutes[:-LEAK_MINUTES]
            m.minute, m.peak = minute, g.mem_used_bytes
            self._leak(msg, g, m, model, out, tenant_of, recorder)
            return
        m.peak = max(m.peak, g.mem_used_bytes)

    def _leak(self, msg, g, m: MemoryTrack, model: Model, out: Output, tenant_of: dict,
              recorder: Recorder | None) -> None:
        km = model.kinds["memory_leak"]
        key = f"memory_leak:{g.uuid}"
        x = leak_features(m.minutes, m.total, (msg.ts - m.since) / 60.0) if m.pid is not None else None
        if x is None:
            if key in self.incidents.by_key:
                self.incidents.observe(key, False, msg.ts, km, {}, out, self._describe_leak)
            return
        score = km.score(x)
        info = {"node": msg.node, "gpu_uuid": g.uuid, "job": g.job, "tenant": g.tenant, "pool": msg.pool,
                "index": g.index, "pid": m.pid, "score": round(score, 4), "slope_gb_h": x[0] * m.total / 1e9,
                "used_gb": m.minutes[-1] / 1e9, "total_gb": m.total / 1e9, "to_oom_min": (10 ** x[6] - 1),
                "severity": "critical" if 10 ** x[6] - 1 < 30 else "warning"}
        if recorder is not None:
            recorder("memory_leak", key, msg.ts, x, info)
        self.incidents.observe(key, score >= km.threshold, msg.ts, km, info, out, self._describe_leak)

    @staticmethod
    def _describe_leak(status: str, info: dict, st: Incident, resolved_at: float | None) -> dict:
        who = f"GPU {info['index']} on {info['node']}" + (f" (job {info['job']}, pid {info['pid']})" if info.get(
            "job") else f" (pid {info['pid']})")
        if status == "firing":
            oom = info["to_oom_min"]
            when = f"{oom / 60:.1f} h" if oom >= 90 else f"{oom:.0f} min"
            summary = (f"{who} memory grows {info['slope_gb_h']:.1f} GB/h for {_minutes(st):.0f} min: "
                       f"{info['used_gb']:.0f} of {info['total_gb']:.0f} GB used, out of memory in about {when}")
        else:
            summary = f"{who} memory stopped growing (or the process ended) after {_minutes(st, resolved_at):.0f} min"
        evidence = {"slope_gb_per_h": round(info["slope_gb_h"], 3), "used_gb": round(info["used_gb"], 2),
                    "total_gb": round(info["total_gb"], 2), "minutes_to_oom": round(info["to_oom_min"], 1),
                    "pid": info["pid"], "score": info["score"]}
        return _event("memory_leak", info["gpu_uuid"], status, st, resolved_at, info, summary, evidence)

    def to_state(self) -> dict:
        return {"gpus": {u: save_points(w, GpuPoint) for u, w in self.gpus.items()},
                "host": save_points(self.host, HostPoint), "epoch": self.epoch,
                "mem": {u: save_fields(m) for u, m in self.mem.items()}, "incidents": self.incidents.to_state()}

    @classmethod
    def from_state(cls, state: dict) -> NodeDetectors:
        d = cls()
        try:
            d.gpus = {u: load_points(w, GpuPoint, "node detector") for u, w in state["gpus"].items()}
            d.host = load_points(state["host"], HostPoint, "node detector")
            d.epoch = state["epoch"]
            d.mem = {u: load_fields(MemoryTrack, m, "memory track") for u, m in state["mem"].items()}
            d.incidents = Incidents.from_state(state["incidents"])
        except KeyError as err:
            raise StateError(f"node detector: saved state lacks {err}") from None
        return d


# -- the job: stragglers ----------------------------------------------------------------------------------
class JobDetector:
    __slots__ = ("gpus", "where", "epoch", "incidents", "interval")

    def __init__(self):
        self.gpus: dict[str, deque[JobPoint]] = {}
        self.where: dict[str, tuple[str, int]] = {}     # uuid -> (node, index)
        self.epoch: int | None = None
        self.incidents = Incidents()
        self.interval = 5.0

    def add(self, job: str, ts: float, node: str, gpus: list, interval: float | None, tenant, pool,
            model: Model, out: Output, recorder: Recorder | None) -> None:
        epoch = int(ts // EPOCH_S)
        if self.epoch is not None and epoch > self.epoch:
            self.evaluate(job, (self.epoch + 1) * EPOCH_S, tenant, pool, model, out, recorder)
        self.epoch = epoch
        self.interval = interval or self.interval
        cutoff = ts - WINDOW_S
        for g in gpus:        # a job sample's GPUs (jobsample.py)
            uuid = g[UUID]
            w = self.gpus.get(uuid)
            if w is None:
                w = self.gpus[uuid] = deque()
            w.append(JobPoint(ts, g[UTIL], g[CLOCK], g[POWER], g[THROTTLE], g[TEMP]))
            self.where[uuid] = (node, g[INDEX])
            while w and w[0].ts <= cutoff:
                w.popleft()

    def evaluate(self, job: str, at: float, tenant, pool, model: Model, out: Output,
                 recorder: Recorder | None) -> None:
        km = model.kinds["straggler"]
        start = at - WINDOW_S
        windows: dict[str, dict[str, list]] = {}
        for uuid, w in list(self.gpus.items()):
            samples = [s for s in w if start < s.ts <= at]
            if not samples:
                if not w or w[-1].ts <= start:
                    del self.gpus[uuid]
                    self.where.pop(uuid, None)
                continue
            windows[uuid] = {"util": [s.util for s in samples], "clock": [s.clock for s in samples],
                             "power": [s.power for s in samples], "throttle": [s.throttle for s in samples],
                             "temp": [s.temp for s in samples]}
        expected = max(1, round(WINDOW_S / self.interval))
        stats = straggler_stats(windows)
        per_gpu = straggler_features(stats, expected)
        bits = {u: _union(w["throttle"]) for u, w in windows.items()}
        nodes = sorted({self.where[u][0] for u in stats})
        slow_nodes: set[str] = set()
        seen = set()
        base = {"job": job, "tenant": tenant, "pool": pool, "peers": len(stats) - 1}
        if len(nodes) >= 2:          # a whole slow node, against the job's other nodes
            # a node counts as its typical GPU (the median of each measure): one slow GPU does not make it slow
            node_stats = {n: tuple(median([stats[u][i] for u in stats if self.where[u][0] == n]) for i in range(7))
                          for n in nodes}
            for n, x in straggler_features(node_stats, expected).items():
                key = f"straggler:{n}"
                seen.add(key)
                score = km.score(x)
                info = {**base, "node": n, "score": round(score, 4), "target": n, "level": "node",
                        "peers": len(nodes) - 1, "gpus": sum(1 for u in stats if self.where[u][0] == n),
                        **self._numbers(node_stats, n, x),
                        "bits": _union([b for u in windows if self.where[u][0] == n for b in windows[u]["throttle"]])}
                if recorder is not None:
                    recorder("straggler", key, at, x, info)
                if score >= km.threshold:
                    slow_nodes.add(n)
                self.incidents.observe(key, score >= km.threshold, at, km, info, out, self._describe)
        for uuid, x in per_gpu.items():
            node, index = self.where[uuid]
            key = f"straggler:{uuid}"
            seen.add(key)
            score = km.score(x)
            info = {**base, "node": node, "gpu_uuid": uuid, "index": index, "score": round(score, 4),
                    "target": uuid, "level": "gpu", **self._numbers(stats, uuid, x), "bits": bits[uuid]}
            if recorder is not None:
                recorder("straggler", key, at, x, info)
            positive = score >= km.threshold and node not in slow_nodes   # the node alert covers it
            self.incidents.observe(key, positive, at, km, info, out, self._describe)
        for key in self.incidents.keys("straggler:"):
            if key not in seen:
                self.incidents.observe(key, False, at, km, {}, out, self._describe)

    @staticmethod
    def _numbers(stats: dict, name: str, x: list) -> dict:
        util, clock, power, temp, thr, cap, _ = stats[name]
        others = [s for n, s in stats.items() if n != name]
        return {"clock": clock, "peer_clock": median([o[1] for o in others if o[1] == o[1]]), "util": util,
                "peer_util": median([o[0] for o in others]), "power": power,
                "peer_power": median([o[2] for o in others if o[2] == o[2]]), "throttled": thr,
                "slowdown": max(x[0], _deficit_of(util, median([o[0] for o in others])))}

    @staticmethod
    def _describe(status: str, info: dict, st: Incident, resolved_at: float | None) -> dict:
        if info["level"] == "node":
            who = f"{info['node']} (all {info['gpus']} GPUs, job {info['job']})"
            peers = f"the job's other {info['peers']} node{'s' if info['peers'] != 1 else ''}"
        else:
            who = f"GPU {info['index']} on {info['node']} (job {info['job']})"
            peers = f"its {info['peers']} peer{'s' if info['peers'] != 1 else ''}"
        if status == "firing":
            if info["clock"] == info["clock"] and info["peer_clock"] and \
                    info["clock"] < 0.97 * info["peer_clock"]:
                why = f"SM clock {info['clock'] / 1000:.2f} GHz vs {info['peer_clock'] / 1000:.2f} GHz"
                if info["throttled"] > 0.2 and throttle_text(info["bits"] & ~0x4):
                    why += ", " + throttle_text(info["bits"] & ~0x4)
            else:
                why = f"utilization {info['util']:.0f}% vs {info['peer_util']:.0f}%, clocks normal"
            summary = (f"{who} runs {info['slowdown']:.0%} below {peers} for {_minutes(st):.0f} min: {why}")
        else:
            summary = f"{who} keeps pace with {peers} again (it lagged for {_minutes(st, resolved_at):.0f} min)"
        evidence = {"slowdown": round(info["slowdown"], 3), "sm_clock_mhz": _r(info["clock"]),
                    "peers_sm_clock_mhz": _r(info["peer_clock"]), "util_pct": _r(info["util"]),
                    "peers_util_pct": _r(info["peer_util"]), "power_w": _r(info["power"]),
                    "peers_power_w": _r(info["peer_power"]), "throttled_share": round(info["throttled"], 3),
                    "throttle_reasons": info["bits"], "peers": info["peers"], "level": info["level"],
                    "score": info["score"]}
        return _event("straggler", info["target"], status, st, resolved_at, info, summary, evidence)

    def end(self, ts: float, out: Output) -> None:
        """The job is gone from every node."""
        self.incidents.close_all(ts, self._describe, out)
        self.gpus, self.where, self.epoch = {}, {}, None

    def to_state(self) -> dict:
        return {"gpus": {u: save_points(w, JobPoint) for u, w in self.gpus.items()},
                "where": {u: {"node": n, "index": i} for u, (n, i) in self.where.items()}, "epoch": self.epoch,
                "incidents": self.incidents.to_state(), "interval": self.interval}

    @classmethod
    def from_state(cls, state: dict) -> JobDetector:
        d = cls()
        try:
            d.gpus = {u: load_points(w, JobPoint, "job detector") for u, w in state["gpus"].items()}
            d.where = {u: (w["node"], w["index"]) for u, w in state["where"].items()}
            d.epoch, d.interval = state["epoch"], state["interval"]
            d.incidents = Incidents.from_state(state["incidents"])
        except KeyError as err:
            raise StateError(f"job detector: saved state lacks {err}") from None
        return d


def _deficit_of(mine: float, peers: float) -> float:
    return max(0.0, 1.0 - mine / peers) if peers else 0.0


def _union(bits: list) -> int:
    out = 0
    for b in bits:
        out |= b or 0
    return out


def _r(v) -> float | None:
    return None if v is None or v != v else round(v, 1)
