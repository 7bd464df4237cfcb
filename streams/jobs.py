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

from .detect import Detection, JobDetector
from .output import Output, Table

JOB_ROLLUP = Table("job_rollup_1m", (
    "minute", "job", "tenant", "pool", "nodes", "gpus", "samples", "util_pct_mean", "util_pct_min_gpu",
    "util_pct_max_gpu", "sm_clock_mhz_mean", "sm_clock_mhz_min_gpu", "power_w_mean", "slowest_gpu",
    "slowest_node"))

# fields of one GPU in a job sample, in order
JOB_GPU_FIELDS = ("uuid", "index", "util_pct", "sm_clock_mhz", "sm_clock_max_mhz", "power_w", "power_limit_w",
                  "temp_c", "throttle_reasons", "mem_used_bytes", "mem_total_bytes")


def job_samples(msg, out: Output, known: set[str]) -> set[str]:
    """The job samples of one released node message, and leave marks for jobs gone from the node."""
    by_job: dict[str, list] = {}
    tenants = {}
    for g in msg.gpus:
        if g.job is not None:
            by_job.setdefault(g.job, []).append([getattr(g, f) for f in JOB_GPU_FIELDS])
            tenants[g.job] = g.tenant
    for job, gpus in by_job.items():
        out.job_samples.append({"job": job, "node": msg.node, "ts": msg.ts, "tenant": tenants[job],
                                "pool": msg.pool, "interval": msg.interval_s, "gpus": gpus})
    for job in known.difference(by_job):
        out.job_samples.append({"job": job, "node": msg.node, "ts": msg.ts, "leave": True})
    return set(by_job)


class JobMinute:
    """Per-GPU sums over one minute: util, sm clock, power (each with its own count)."""

    __slots__ = ("gpus", "samples", "power_ticks")

    def __init__(self):
        self.gpus: dict[str, list] = {}      # uuid -> [node, n_util, util, n_clock, clock, n_power, power]
        self.samples = 0
        self.power_ticks: dict[float, float] = {}   # ts bucket -> job power at that tick

    def add(self, node: str, ts: float, gpus: list) -> None:
        self.samples += 1
        power = 0.0
        for g in gpus:
            acc = self.gpus.get(g[0])
            if acc is None:
                acc = self.gpus[g[0]] = [node, 0, 0.0, 0, 0.0, 0, 0.0]
            if g[2] is not None:
                acc[1] += 1
                acc[2] += g[2]
            if g[3] is not None:
                acc[3] += 1
                acc[4] += g[3]
            if g[5] is not None:
                acc[5] += 1
                acc[6] += g[5]
                power += g[5]
        self.power_ticks[round(ts)] = self.power_ticks.get(round(ts), 0.0) + power

    def row(self, minute: int, job: str, tenant, pool) -> tuple:
        util = [a[2] / a[1] for a in self.gpus.values() if a[1]]
        clocks = {u: a[4] / a[3] for u, a in self.gpus.items() if a[3]}
        slowest = min(clocks, key=lambda u: (clocks[u], u)) if clocks else ""
        return (minute, job, tenant or "", pool or "", len({a[0] for a in self.gpus.values()}), len(self.gpus),
                self.samples, sum(util) / len(util) if util else None, min(util) if util else None,
                max(util) if util else None, sum(clocks.values()) / len(clocks) if clocks else None,
                clocks[slowest] if clocks else None,
                sum(self.power_ticks.values()) / len(self.power_ticks) if self.power_ticks else None,
                slowest, self.gpus[slowest][0] if slowest else "")

    def to_state(self) -> list:
        return [self.gpus, self.samples, [[k, v] for k, v in self.power_ticks.items()]]

    @classmethod
    def from_state(cls, state: list) -> JobMinute:
        m = cls.__new__(cls)
        m.gpus, m.samples, ticks = state
        m.power_ticks = {k: v for k, v in ticks}
        return m


class JobProcessor:
    """One job's state: its nodes' progress, samples waiting for the watermark, the open minute."""

    __slots__ = ("job", "nodes", "released", "pending", "frontier", "minute", "acc", "tenant", "pool", "detect",
                 "heard")

    def __init__(self, job: str):
        self.job = job
        self.nodes: dict[str, float] = {}        # node -> its latest ts admitted
        self.released: dict[str, float] = {}     # node -> its latest ts released
        self.pending: list = []                  # [ts, node, sample, refs]
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
            waiting = next((p for p in self.pending if p[0] == ts and p[1] == node), None)
            if waiting is not None:
                waiting[3].append(ref)             # done when the one it repeats is (it may be the same input)
            else:
                out.done.append(ref)
            return
        else:
            if node not in self.nodes and ts <= self.frontier:
                out.counts["job_late"] += 1
            self.nodes[node] = ts
            self.pending.append([ts, node, sample, [ref]])
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
        ready = [p for p in self.pending if p[0] <= watermark]
        if not ready:
            return
        self.pending = [p for p in self.pending if p[0] > watermark]
        ready.sort(key=lambda p: (p[0], p[1]))
        for ts, node, sample, refs in ready:
            self._process(ts, node, sample, out, detection)
            self.released[node] = ts
            out.done.extend(refs)
        self.frontier = max(self.frontier, ready[-1][0])

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

    def to_state(self) -> list:
        """Waiting samples are left out (they were not acknowledged: they come again after a restart),
        so each node's progress is saved as of what was released."""
        frontier = self.frontier if self.frontier != float("-inf") else None
        nodes = {n: self.released[n] for n in self.nodes if n in self.released}
        return [nodes, frontier, self.minute, self.acc.to_state(), self.tenant, self.pool, self.detect.to_state()]

    @classmethod
    def from_state(cls, job: str, state: list) -> JobProcessor:
        p = cls(job)
        p.nodes, frontier, p.minute, acc, p.tenant, p.pool, detect = state
        p.detect = JobDetector.from_state(detect)
        p.released = dict(p.nodes)
        p.frontier = float("-inf") if frontier is None else frontier
        p.acc = JobMinute.from_state(acc)
        return p
