"""The job stage: every GPU of a (multi-node) job in one place, ordered by event time.

The node stage hands each job the samples of its GPUs on that node (a *job
sample*), and a *leave* mark when the job is gone from the node. They are
released in ``(ts, node)`` order; one-minute job rollups (per-GPU means, then
their spread across the job) are what this stage emits, and the straggler
detector works on the same released stream.

Items are released by the stage's watermark: the lowest watermark over every
node of the fleet (in the distributed mode, over every telemetry partition, each
announcing the lowest of its nodes), so a job's samples are processed only once
no node can still send one older. Results therefore do not depend on how far
apart in event time the partitions are read.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from gpufleet.contracts import tables
from gpufleet.contracts.jobsample import CLOCK, POWER, UTIL, UUID
from gpufleet.contracts.output import Output, source_of
from gpufleet.contracts.state import StateError, check_version, load_fields, save_fields
from gpufleet.models.detectors import Detection, JobContext, JobDetectors, JobItem

STATE_VERSION = 3

JOB_ROLLUP = tables.JOB_ROLLUP_1M

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
class WaitingItem:
    """A job sample or leave mark waiting for the stage's watermark (not saved: it comes again after a restart)."""

    ts: float
    node: str
    sample: dict
    refs: list


def _order(item: WaitingItem) -> tuple[float, str]:
    return item.ts, item.node


def _ts(item: WaitingItem) -> float:
    return item.ts


class JobProcessor:
    """One job's state: the nodes that hold it, items waiting for the watermark, the open minute.

    The stage's watermark (the lowest event time every node of the fleet has passed) releases a job's
    waiting items in ``(ts, node)`` order: whatever order partitions are read in, each job sees its
    samples as if every node had reported in step. A sample behind what the job has released is a
    duplicate when its node already sent it, and late otherwise (counted and dead-lettered).
    """

    __slots__ = ("job", "members", "released", "pending", "frontier", "minute", "acc", "tenant", "pool", "detect")

    def __init__(self, job: str):
        self.job = job
        self.members: set[str] = set()           # nodes holding the job, as of what was released
        self.released: dict[str, float] = {}     # node -> the newest ts released from it
        self.pending: list[WaitingItem] = []     # in (ts, node) order
        self.frontier = float("-inf")            # the newest ts released
        self.minute: int | None = None
        self.acc = JobMinute()
        self.tenant = self.pool = None
        self.detect = JobDetectors()

    def push(self, sample: dict, out: Output, ref=None, source: str = "", received_at: float = 0.0) -> None:
        """Admit one job sample or leave mark; it waits until :meth:`release` passes its time."""
        node, ts = sample["node"], sample["ts"]
        if ts <= self.released.get(node, float("-inf")):
            out.counts["job_duplicates"] += 1      # released already (delivered again after a restart)
            out.done.append(ref)
            return
        pending = self.pending
        at = bisect_left(pending, (ts, node), key=_order)
        waiting = pending[at] if at < len(pending) and _order(pending[at]) == (ts, node) else None
        if waiting is not None:
            out.counts["job_duplicates"] += 1
            waiting.refs.append(ref)               # done when the one it repeats is (it may be the same input)
            return
        if ts < self.frontier and sample.get("silent"):   # a node found silent later than the job moved on (live
            self.detect.node_silent(node, ts, out)          # mode): its incidents end all the same
            self.members.discard(node)
            out.done.append(ref)
            return
        if ts < self.frontier:
            out.counts["job_late"] += 1
            out.dead_letter("late", f"ts: job sample of node {node} for job {self.job} is {self.frontier - ts:.1f} s "
                                    "behind what the job has released (its node was taken as gone, or it was "
                                    "read too late)", source, received_at, sample)
            out.done.append(ref)
            return
        pending.insert(at, WaitingItem(ts, node, sample, [ref]))       # kept in (ts, node) order

    def release(self, watermark: float, out: Output, detection: Detection | None = None) -> None:
        """Process, in ``(ts, node)`` order, the waiting items older than ``watermark``."""
        pending = self.pending
        if not pending or pending[0].ts >= watermark:
            return
        cut = bisect_left(pending, watermark, key=_ts)
        ready, self.pending = pending[:cut], pending[cut:]
        for p in ready:
            try:
                if p.sample.get("leave"):
                    if p.sample.get("silent"):           # the node stopped reporting: its incidents end now
                        self.detect.node_silent(p.node, p.ts, out)
                    self.members.discard(p.node)
                    if not self.members:
                        self.close(out)              # gone from every node: the job's last minute is complete
                        self.detect.end(p.ts, out)
                else:
                    self.members.add(p.node)
                    self._process(p.ts, p.node, p.sample, out, detection)
            except StateError:
                raise
            except Exception as err:             # one item never stops the job, nor the partition
                source = source_of(p.refs[0] if p.refs else None, f"job {self.job} node {p.node} at ts {p.ts}")
                out.internal_error(err, source, p.ts, p.sample)
            self.released[p.node] = p.ts
            self.frontier = p.ts
            out.done.extend(p.refs)
    def _process(self, ts: float, node: str, sample: dict, out: Output, detection: Detection | None) -> None:
        minute = int(ts // 60) * 60
        if self.minute is not None and minute > self.minute:
            self.close(out)
        if self.minute is None or minute > self.minute:
            self.minute = minute
        self.tenant, self.pool = sample["tenant"], sample["pool"]
        self.acc.add(node, ts, sample["gpus"])
        if detection is not None:
            self.detect.add(JobItem(ts, node, sample), detection,
                            JobContext(self.job, self.tenant, self.pool, out, detection.recorder))

    def close(self, out: Output) -> None:
        """Emit the open minute's job rollup."""
        if self.minute is not None and self.acc.gpus:
            out.row(JOB_ROLLUP, self.acc.row(self.minute, self.job, self.tenant, self.pool))
        self.minute, self.acc = None, JobMinute()

    def flush(self, out: Output, detection: Detection | None = None) -> None:
        """End of input: release what waits and close the minute."""
        self.release(float("inf"), out, detection)
        self.close(out)

    @property
    def finished(self) -> bool:
        """No node holds the job any more and nothing waits."""
        return not self.members and not self.pending

    def to_state(self) -> dict:
        """Waiting items are left out (they were not acknowledged: they come again after a restart)."""
        return {"v": STATE_VERSION, "members": sorted(self.members), "released": self.released,
                "frontier": None if self.frontier == float("-inf") else self.frontier, "minute": self.minute,
                "acc": self.acc.to_state(), "tenant": self.tenant, "pool": self.pool,
                "detect": self.detect.to_state()}

    @classmethod
    def from_state(cls, job: str, state: dict) -> JobProcessor:
        check_version(f"job {job}", state, STATE_VERSION)
        p = cls(job)
        try:
            p.members, p.released = set(state["members"]), dict(state["released"])
            frontier, p.minute = state["frontier"], state["minute"]
            p.tenant, p.pool = state["tenant"], state["pool"]
            p.detect = JobDetectors.from_state(state["detect"])
            p.acc = JobMinute.from_state(state["acc"])
        except KeyError as err:
            raise StateError(f"job {job}: saved state lacks {err}") from None
        p.frontier = float("-inf") if frontier is None else frontier
        return p
