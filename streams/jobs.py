"""The job stage: every GPU of a (multi-node) job in one place, ordered by event time.

The node stage hands each job the samples of its GPUs on that node (a *job
sample*), and a *leave* mark when the job is gone from the node. A job's
watermark is the smallest latest ``ts`` over the nodes it runs on: each node's
samples arrive in order, so everything up to it is complete. Samples are
released in ``(ts, node)`` order; one-minute job rollups (per-GPU means, then
their spread across the job) are what this stage emits, and the straggler
detector works on the same released stream.

A node seen for the first time after the job's watermark passed its samples
(possible only when partitions are read far apart in event time) is counted as
``job_late`` and its samples join the open minute only.
"""
from __future__ import annotations

from dataclasses import dataclass

from .detect import Detection, JobDetector
from .jobsample import CLOCK, POWER, UTIL, UUID
from .output import Output, Table
from .state import StateError, check_version, load_fields, save_fields

STATE_VERSION = 1

JOB_ROLLUP = Table("job_rollup_1m", (
    "minute", "job", "tenant", "pool", "nodes", "gpus", "samples", "util_pct_mean", "util_pct_min_gpu",
    "util_pct_max_gpu", "sm_clock_mhz_mean", "sm_clock_mhz_min_gpu", "power_w_mean", "slowest_gpu",
    "slowest_node"))

@dataclass(slots=True)
class GpuSums:
    """One GPU's sums over a job-minute, each metric with its own count."""

    node: str
    util_n: int = 0
    util_sum: float = 0.0
    clock_n: int = 0
    clock_sum: float = 0.0
    power_n: int = 0
    power_sum: float = 0.0


class JobMinute:
    """Per-GPU sums over one minute (util, SM clock, power) and the job's power at each tick."""

    __slots__ = ("gpus", "samples", "power_ticks")

    def __init__(self):
        self.gpus: dict[str, GpuSums] = {}
        self.samples = 0
        self.power_ticks: dict[int, float] = {}   # ts (rounded) -> job power at that tick

    def add(self, node: str, ts: float, gpus: list) -> None:
        self.samples += 1
        power = 0.0
        for g in gpus:
            acc = self.gpus.get(g[UUID])
            if acc is None:
                acc = self.gpus[g[UUID]] = GpuSums(node)
            if g[UTIL] is not None:
                acc.util_n += 1
                acc.util_sum += g[UTIL]
            if g[CLOCK] is not None:
                acc.clock_n += 1
                acc.clock_sum += g[CLOCK]
            if g[POWER] is not None:
                acc.power_n += 1
                acc.power_sum += g[POWER]
                power += g[POWER]
        self.power_ticks[round(ts)] = self.power_ticks.get(round(ts), 0.0) + power

    def row(self, minute: int, job: str, tenant, pool) -> tuple:
        util = [a.util_sum / a.util_n for a in self.gpus.values() if a.util_n]
        clocks = {u: a.clock_sum / a.clock_n for u, a in self.gpus.items() if a.clock_n}
        slowest = min(clocks, key=lambda u: (clocks[u], u)) if clocks else ""
        return (minute, job, tenant or "", pool or "", len({a.node for a in self.gpus.values()}), len(self.gpus),
                self.samples, sum(util) / len(util) if util else None, min(util) if util else None,
                max(util) if util else None, sum(clocks.values()) / len(clocks) if clocks else None,
                clocks[slowest] if clocks else None,
                sum(self.power_ticks.values()) / len(self.power_ticks) if self.power_ticks else None,
                slowest, self.gpus[slowest].node if slowest else "")

    def to_state(self) -> dict:
        return {"gpus": {u: save_fields(a) for u, a in self.gpus.items()}, "samples": self.samples,
                "power_ticks": [[k, v] for k, v in self.power_ticks.items()]}

    @classmethod
    def from_state(cls, state: dict) -> JobMinute:
        m = cls.__new__(cls)
        try:
            m.gpus = {u: load_fields(GpuSums, a, "job minute GPU") for u, a in state["gpus"].items()}
            m.samples = state["samples"]
            m.power_ticks = {k: v for k, v in state["power_ticks"]}
        except KeyError as err:
            raise StateError(f"job minute: saved state lacks {err}") from None
        return m


@dataclass(slots=True)
class WaitingSample:
    """A job sample waiting until every node of the job has passed its time (not saved)."""

    ts: float
    node: str
    sample: dict
    refs: list


class JobProcessor:
    """One job's state: its nodes' progress, samples waiting for the watermark, the open minute."""

    __slots__ = ("job", "nodes", "released", "pending", "frontier", "minute", "acc", "tenant", "pool", "detect",
                 "heard")

    def __init__(self, job: str):
        self.job = job
        self.nodes: dict[str, float] = {}        # node -> its latest ts admitted
        self.released: dict[str, float] = {}     # node -> its latest ts released
        self.pending: list[WaitingSample] = []
        self.frontier = float("-inf")            # everything at or before it is released
        self.minute: int | None = None
        self.acc = JobMinute()
        self.tenant = self.pool = None
        self.detect = JobDetector()
        self.heard: dict[str, float] = {}        # live mode: node -> wall time of its latest sample

    def push(self, sample: dict, out: Output, ref=None, node_timeout_s: float = 600.0,
             detection: Detection | None = None, now: float | None = None) -> None:
        """Admit one job sample. ``now`` (live mode) is the wall clock: a node is then taken as gone only
        once it is also silent for ``node_timeout_s`` of real time, not merely read behind the others."""
        node, ts = sample["node"], sample["ts"]
        if sample.get("leave"):
            self.nodes.pop(node, None)
            self.released.pop(node, None)
            out.done.append(ref)
        elif ts <= self.nodes.get(node, float("-inf")):
            out.counts["job_duplicates"] += 1      # each node's samples come in order: this one came before
            waiting = next((p for p in self.pending if p.ts == ts and p.node == node), None)
            if waiting is not None:
                waiting.refs.append(ref)           # done when the one it repeats is (it may be the same input)
            else:
                out.done.append(ref)
            return
        else:
            if node not in self.nodes and ts <= self.frontier:
                out.counts["job_late"] += 1
            self.nodes[node] = ts
            self.pending.append(WaitingSample(ts, node, sample, [ref]))
            if now is not None:
                self.heard[node] = now
            # a node that stopped reporting (it died) must not hold the job back for ever
            for other, last in list(self.nodes.items()):
                silent = now is None or now - self.heard.setdefault(other, now) > node_timeout_s
                if ts - last > node_timeout_s and silent:
                    del self.nodes[other]
                    self.released.pop(other, None)
                    self.heard.pop(other, None)
                    out.counts["job_node_timeout"] += 1
        self._release(min(self.nodes.values()) if self.nodes else float("inf"), out, detection)
        if not self.nodes:
            self.close(out)                      # gone from every node: the job's last minute is complete
            self.detect.end(ts, out)

    def _release(self, watermark: float, out: Output, detection: Detection | None = None) -> None:
        if not self.pending:
            return
        ready = [p for p in self.pending if p.ts <= watermark]
        if not ready:
            return
        self.pending = [p for p in self.pending if p.ts > watermark]
        ready.sort(key=lambda p: (p.ts, p.node))
        for p in ready:
            self._process(p.ts, p.node, p.sample, out, detection)
            self.released[p.node] = p.ts
            out.done.extend(p.refs)
        self.frontier = max(self.frontier, ready[-1].ts)

    def _process(self, ts: float, node: str, sample: dict, out: Output, detection: Detection | None) -> None:
        minute = int(ts // 60) * 60
        if self.minute is not None and minute > self.minute:
            self.close(out)
        if self.minute is None or minute > self.minute:
            self.minute = minute
        self.tenant, self.pool = sample["tenant"], sample["pool"]
        self.acc.add(node, ts, sample["gpus"])
        if detection is not None:
            self.detect.add(self.job, ts, node, sample["gpus"], sample.get("interval"), self.tenant, self.pool,
                            detection.model, out, detection.recorder)

    def close(self, out: Output) -> None:
        """Emit the open minute's job rollup."""
        if self.minute is not None and self.acc.gpus:
            out.row(JOB_ROLLUP, self.acc.row(self.minute, self.job, self.tenant, self.pool))
        self.minute, self.acc = None, JobMinute()

    def flush(self, out: Output, detection: Detection | None = None) -> None:
        """End of input: release what waits and close the minute."""
        self._release(float("inf"), out, detection)
        self.close(out)

    @property
    def finished(self) -> bool:
        """No node runs the job any more and nothing waits."""
        return not self.nodes and not self.pending

    def to_state(self) -> dict:
        """Waiting samples are left out (they were not acknowledged: they come again after a restart),
        so each node's progress is saved as of what was released."""
        frontier = self.frontier if self.frontier != float("-inf") else None
        nodes = {n: self.released[n] for n in self.nodes if n in self.released}
        return {"v": STATE_VERSION, "nodes": nodes, "frontier": frontier, "minute": self.minute,
                "acc": self.acc.to_state(), "tenant": self.tenant, "pool": self.pool,
                "detect": self.detect.to_state()}

    @classmethod
    def from_state(cls, job: str, state: dict) -> JobProcessor:
        check_version(f"job {job}", state, STATE_VERSION)
        p = cls(job)
        try:
            p.nodes, frontier, p.minute = dict(state["nodes"]), state["frontier"], state["minute"]
            p.tenant, p.pool = state["tenant"], state["pool"]
            p.detect = JobDetector.from_state(state["detect"])
            p.acc = JobMinute.from_state(state["acc"])
        except KeyError as err:
            raise StateError(f"job {job}: saved state lacks {err}") from None
        p.released = dict(p.nodes)
        p.frontier = float("-inf") if frontier is None else frontier
        return p
