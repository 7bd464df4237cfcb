"""What the simulated fleet does and when: rentals, jobs and injected faults.

Everything here is decided up front from the seed, so a run is deterministic and
the ground-truth labels are known before a single sample is drawn.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from .fleet import GIB, TENANTS, Node

MIN = 60.0
HOUR = 3600.0

# NVML clocks-event-reason bits used by the simulator
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80


@dataclass
class Proc:
    """A compute process on one GPU of an allocation."""

    pid: int
    base_bytes: float
    warmup_s: float
    steps: list[tuple[float, float]] = field(default_factory=list)  # allocator cache growth: (at, bytes)


@dataclass
class Allocation:
    """GPUs rented to one tenant for one job (or held idle) over [start, end)."""

    kind: str                       # training | inference | notebook | idle_rental
    tenant: str
    job: str
    start: float
    end: float
    members: list[tuple[int, int]]  # (node index, gpu index)
    procs: dict[tuple[int, int], Proc] = field(default_factory=dict)
    level: float = 0.9              # typical utilization as a fraction
    checkpoint_every_s: float = 0.0
    checkpoint_len_s: float = 0.0
    eval_every_s: float = 0.0
    eval_len_s: float = 0.0
    bursts: list[tuple[float, float]] = field(default_factory=list)   # notebook activity
    kv_cache: float = 0.0           # inference: share of memory a KV cache takes at full load (it breathes)
    hiccups: list[tuple[float, int]] = field(default_factory=list)    # data-loader stalls: (at, node index)
    tide_peak_h: float = 15.0

    @property
    def nodes(self) -> list[int]:
        return sorted({n for n, _ in self.members})


@dataclass
class Fault:
    """An injected fault; ``label()`` is its ground truth."""

    kind: str                       # straggler | io_starvation | memory_leak | idle
    start: float
    end: float
    alloc: Allocation
    members: list[tuple[int, int]]  # the GPUs it acts on
    level: str                      # gpu | node | job
    params: dict = field(default_factory=dict)

    def label(self, fleet: list[Node]) -> dict:
        n0, g0 = self.members[0]
        node = fleet[n0]
        return {
            "kind": self.kind,
            "level": self.level,
            "node": node.name,
            "gpu_uuid": node.uuids[g0] if self.level == "gpu" else None,
            "gpus": [fleet[n].uuids[g] for n, g in self.members],
            "job": self.alloc.job,
            "tenant": self.alloc.tenant,
            "pool": node.pool,
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.params.items()},
        }


def _minus(spans: list[tuple[float, float]], holes) -> list[tuple[float, float]]:
    """Sorted, disjoint ``spans`` less the ``holes`` (each [start, end)): what is left of them, in order."""
    for lo, hi in holes:
        spans = [part for s, e in spans for part in ((s, min(e, lo)), (max(s, hi), e)) if part[0] < part[1]]
    return spans


def _slots(gpus: int, rng) -> list[list[int]]:
    """Cut one shared node's GPUs into groups rented together (e.g. 4+2+1+1)."""
    slots, i = [], 0
    while i < gpus:
        size = min(gpus - i, rng.choice((1, 1, 2, 4)))
        slots.append(list(range(i, i + size)))
        i += size
    return slots


def _tide(t: float, peak_h: float) -> float:
    """Daily demand tide in [0, 1], highest at ``peak_h`` UTC."""
    hour = (t % 86400.0) / HOUR
    return 0.5 + 0.5 * math.cos(2 * math.pi * (hour - peak_h) / 24.0)


class Planner:
    """Draws rentals, jobs and faults for a fleet over [start, end)."""

    def __init__(self, fleet: list[Node], start: float, end: float, interval_s: float,
                 idle_window_s: float, rng):
        self.fleet, self.start, self.end = fleet, start, end
        self.interval_s, self.idle_window_s, self.rng = interval_s, idle_window_s, rng
        self.allocations: list[Allocation] = []
        self.faults: list[Fault] = []
        self.spells: list[Fault] = []         # throttling that slows no one behind: not a fault
        self._jobs = 0
        self._pid = 1000
        self._busy: dict[tuple[int, int], list[tuple[float, float]]] = {}

    # -- rentals ---------------------------------------------------------
    def plan_rentals(self, training_share: float = 0.5) -> None:
        rng = self.rng
        by_pool: dict[str, list[int]] = {}
        for i, node in enumerate(self.fleet):
            by_pool.setdefault(node.pool, []).append(i)
        for nodes in by_pool.values():
            n_training = int(round(len(nodes) * training_share))
            if len(self.fleet[nodes[0]].uuids) >= 2 and n_training == 0 and len(nodes) >= 2:
                n_training = 1
            training, shared = nodes[:n_training], nodes[n_training:]
            while training:
                size = min(len(training), rng.choice((1, 2, 2, 4)))
                cluster, training = training[:size], training[size:]
                for n in cluster:
                    self.fleet[n].training = True
                self._plan_cluster(cluster)
            for n in shared:
                node = self.fleet[n]
                node.slots = _slots(len(node.uuids), rng)
                for slot in node.slots:
                    self._plan_slot([(n, g) for g in slot])

    def _job(self, prefix: str) -> str:
        self._jobs += 1
        return f"{prefix}-{self._jobs:04d}"

    def _proc(self, mem_total: float, frac: float, warmup_s: float, start: float, end: float) -> Proc:
        rng = self.rng
        self._pid += rng.randint(1, 400)
        steps = []
        t = start + warmup_s
        while True:  # allocator caches grow in steps, then hold
            t += rng.expovariate(1 / (2 * HOUR))
            if t >= end:
                break
            steps.append((t, rng.uniform(0.2, 2.0) * GIB))
        # a caching allocator may reserve nearly all of the memory and hold it: above 90% is no fault
        base = min(frac * mem_total, 0.97 * mem_total - sum(s for _, s in steps))
        return Proc(self._pid, max(base, 0.05 * mem_total), warmup_s, steps)

    def _add(self, alloc: Allocation, frac: tuple[float, float], warmup: tuple[float, float]) -> None:
        rng = self.rng
        total = self.fleet[alloc.members[0][0]].model.mem_total_bytes
        warmup_s = rng.uniform(*warmup)
        for m in alloc.members:
            alloc.procs[m] = self._proc(total, rng.uniform(*frac), warmup_s, alloc.start, alloc.end)
        self.allocations.append(alloc)

    def _plan_cluster(self, cluster: list[int]) -> None:
        rng = self.rng
        t = self.start + rng.uniform(0, 40 * MIN)
        members = [(n, g) for n in cluster for g in range(len(self.fleet[n].uuids))]
        while t < self.end - 20 * MIN:
            tenant = rng.choice(TENANTS[:5])
            dur = rng.uniform(1.5 * HOUR, 8 * HOUR)
            end = min(t + dur, self.end)
            job = Allocation(
                "training", tenant, self._job("train"), t, end, members,
                level=rng.uniform(0.93, 0.99),
                checkpoint_every_s=rng.uniform(20, 60) * MIN, checkpoint_len_s=rng.uniform(45, 180),
                eval_every_s=rng.uniform(50, 120) * MIN, eval_len_s=rng.uniform(3, 8) * MIN,
            )
            n_hiccups = int(rng.expovariate(1.0) * 4 * (end - t) / HOUR)
            job.hiccups = sorted((rng.uniform(t, end), rng.choice(cluster)) for _ in range(n_hiccups))
            self._add(job, (0.55, 0.97), (2 * MIN, 10 * MIN))
            t = end
            gap = rng.uniform(5 * MIN, 60 * MIN)
            if rng.random() < 0.4 and t + gap < self.end:   # the tenant keeps the nodes, unused
                gap = self._clear_of_window(gap)
                self._idle_rental(tenant, members, t, min(t + gap, self.end))
            t += gap

    def _plan_slot(self, members: list[tuple[int, int]]) -> None:
        rng = self.rng
        t = self.start + rng.uniform(0, 30 * MIN)
        while t < self.end - 10 * MIN:
            # Rentals follow the daily tide: more start during the day.
            tide = _tide(t, 14.0)
            r = rng.random()
            if r < 0.35:
                end = min(t + rng.uniform(2 * HOUR, 12 * HOUR), self.end)
                alloc = Allocation("inference", rng.choice(TENANTS), self._job("infer"), t, end, members,
                                   level=rng.uniform(0.15, 0.95), tide_peak_h=rng.uniform(13, 17),
                                   kv_cache=rng.choice((0.0, rng.uniform(0.05, 0.3))))
                self._add(alloc, (0.3, 0.65), (1 * MIN, 4 * MIN))
            elif r < 0.35 + 0.3 * (0.5 + tide):
                end = min(t + rng.uniform(0.5 * HOUR, 4 * HOUR), self.end)
                alloc = Allocation("notebook", rng.choice(TENANTS), self._job("nb"), t, end, members[:1])
                alloc.bursts = self._bursts(t, end)
                self._add(alloc, (0.05, 0.3), (0.5 * MIN, 2 * MIN))
            elif r < 0.8:
                dur = self._clear_of_window(rng.uniform(15 * MIN, 3 * HOUR))
                end = min(t + dur, self.end)
                self._idle_rental(rng.choice(TENANTS), members, t, end)
            else:
                end = t + rng.uniform(10 * MIN, 2 * HOUR) * (1.5 - tide)   # unrented
            t = end + rng.uniform(0, 5 * MIN)

    def _clear_of_window(self, dur: float) -> float:
        """Keep idle stretches well clear of the idle window so the ground truth is unambiguous."""
        margin = 3 * self.interval_s + 30
        lo, hi = self.idle_window_s - margin, self.idle_window_s + margin
        if lo < dur < hi:
            return hi + (dur - lo)
        return dur

    def _idle_rental(self, tenant: str, members, start: float, end: float) -> None:
        rng = self.rng
        alloc = Allocation("idle_rental", tenant, self._job("hold"), start, end, members)
        if rng.random() < 0.5:   # a process left holding memory, doing nothing
            self._add(alloc, (0.05, 0.5), (0.0, 10.0))
        else:
            self.allocations.append(alloc)
        if end - start >= self.idle_window_s:
            self.faults.append(Fault("idle", start, end, alloc, list(members[:1]), "gpu"))
            for m in members[1:]:
                self.faults.append(Fault("idle", start, end, alloc, [m], "gpu"))

    def _bursts(self, start: float, end: float) -> list[tuple[float, float]]:
        rng = self.rng
        bursts, t = [], start + rng.uniform(1, 8) * MIN
        while t < end:
            b = min(t + rng.uniform(1, 12) * MIN, end)
            bursts.append((t, b))
            t = b + self._clear_of_window(rng.expovariate(1 / (15 * MIN)) + 2 * MIN)
        return bursts

    def idle_labels_from_bursts(self) -> None:
        """Notebook stretches without work that reach the idle window are idle ground truth: between its bursts,
        and where its process, killed by a leak's out-of-memory, restarts, the part of a burst it missed (a burst
        that the restart cuts short at an end lengthens the stretch beside it)."""
        dead: dict[int, list[tuple[float, float]]] = {}
        for f in self.faults:
            if f.kind == "memory_leak" and f.params["reaches_oom"]:
                dead.setdefault(id(f.alloc), []).append((f.end, f.end + f.params["restart_s"]))
        for alloc in self.allocations:
            if alloc.kind != "notebook":
                continue
            bursts = _minus(alloc.bursts, dead.get(id(alloc), ()))
            edges = [alloc.start] + [x for b in bursts for x in b] + [alloc.end]
            for lo, hi in zip(edges[0::2], edges[1::2]):
                if hi - lo >= self.idle_window_s:
                    self.faults.append(Fault("idle", lo, hi, alloc, list(alloc.members), "gpu"))

    # -- faults ----------------------------------------------------------
    def _free(self, members, start: float, end: float) -> bool:
        return all(e <= start or s >= end for m in members for s, e in self._busy.get(m, ()))

    def _take(self, members, start: float, end: float) -> None:
        for m in members:
            self._busy.setdefault(m, []).append((start, end))

    def _window(self, alloc: Allocation, lo_s: float, hi_s: float):
        """A fault window inside an allocation, after its warm-up; None if it does not fit."""
        warm = max(p.warmup_s for p in alloc.procs.values()) if alloc.procs else 0.0
        dur = self.rng.uniform(lo_s, hi_s)
        first, last = alloc.start + warm + 5 * MIN, alloc.end - dur - 2 * MIN
        if last <= first:
            return None
        start = self.rng.uniform(first, last)
        return start, start + dur

    def plan_faults(self, per_kind: int) -> None:
        """Faults of every kind the detectors know (models/detectors registry): ``_place_<fault>`` each."""
        from gpufleet.models.detectors import REGISTRY
        rng = self.rng
        for fault in sorted(k.fault for k in REGISTRY.values() if k.fault is not None):
            placed, tries = 0, 0
            while placed < per_kind and tries < per_kind * 60:
                tries += 1
                placed += bool(getattr(self, f"_place_{fault}")(rng))
        self.idle_labels_from_bursts()
        self._place_spells(random.Random(rng.random()), per_kind)

    def _place_spells(self, rng, count: int) -> None:
        """Hot rows and facility power events: every GPU of a training job or an inference service
        throttled alike, with the throttle bits a straggler shows but no GPU behind its peers."""
        allocs = [a for a in self.allocations if a.kind in ("inference", "training")]
        for _ in range(count * 3 if allocs else 0):
            alloc = rng.choice(allocs)
            dur = rng.uniform(10 * MIN, 60 * MIN)
            if alloc.end - alloc.start < dur + 10 * MIN:
                continue
            start = rng.uniform(alloc.start + 5 * MIN, alloc.end - dur)
            if not self._free(alloc.members, start, start + dur):
                continue
            self.spells.append(Fault("throttled", start, start + dur, alloc, list(alloc.members), "job", {
                "cause": rng.choice(("thermal", "power_brake", "hw_slowdown")),
                "slowdown": rng.uniform(0.10, 0.40)}))
            if len(self.spells) >= count:
                break

    def _candidates(self, kinds: tuple[str, ...], min_gpus: int = 1) -> list[Allocation]:
        return [a for a in self.allocations if a.kind in kinds and len(a.members) >= min_gpus]

    def _place_straggler(self, rng) -> bool:
        jobs = self._candidates(("training",), 2)
        if not jobs:
            return False
        job = rng.choice(jobs)
        win = self._window(job, 10 * MIN, 45 * MIN)
        if win is None:
            return False
        if len(job.nodes) >= 2 and rng.random() < 0.25:
            n = rng.choice(job.nodes)
            members, level = [m for m in job.members if m[0] == n], "node"
            cause = "hw_slowdown"
        else:
            members, level = [rng.choice(job.members)], "gpu"
            cause = rng.choice(("thermal", "thermal", "power_cap", "power_brake", "host_slow"))
        if not self._free(job.members, *win):
            return False
        intermittent = rng.random() < 0.3
        self._take(job.members, *win)
        self.faults.append(Fault("straggler", win[0], win[1], job, members, level, {
            "cause": cause,
            "slowdown": rng.uniform(0.10, 0.60),
            "period_s": rng.uniform(60, 600) if intermittent else 0.0,
            "duty": rng.uniform(0.4, 0.8) if intermittent else 1.0,
            "wait": rng.uniform(0.2, 0.8),     # how much of the slowdown its peers spend waiting for it
        }))
        return True

    def _place_io_starvation(self, rng) -> bool:
        jobs = self._candidates(("training", "inference"))
        if not jobs:
            return False
        job = rng.choice(jobs)
        win = self._window(job, 10 * MIN, 45 * MIN)
        if win is None:
            return False
        n = rng.choice(job.nodes)
        members = [m for m in job.members if m[0] == n]
        if not self._free(members, *win):
            return False
        self._take(members, *win)
        self.faults.append(Fault("io_starvation", win[0], win[1], job, members, "job", {
            "period_s": rng.uniform(10, 120),
            "duty": rng.uniform(0.12, 0.5),
            "source": rng.choice(("disk", "disk", "network", "cpu")),   # local disk, network storage, host CPU
        }))
        return True

    def _place_memory_leak(self, rng) -> bool:
        allocs = [a for a in self._candidates(("training", "inference", "notebook")) if a.procs]
        if not allocs:
            return False
        alloc = rng.choice(allocs)
        member = rng.choice(alloc.members)
        proc = alloc.procs[member]
        total = self.fleet[member[0]].model.mem_total_bytes
        to_oom = math.exp(rng.uniform(math.log(10 * MIN), math.log(24 * HOUR)))
        onset = alloc.start + proc.warmup_s + rng.uniform(5 * MIN, 60 * MIN)
        oom = onset + to_oom
        reaches = oom <= alloc.end - 5 * MIN          # a slow leak may still be growing when the job ends
        until = oom + 5 * MIN if reaches else alloc.end
        if until - onset < 20 * MIN or not self._free([member], onset, until):
            return False
        self._take([member], onset, until)
        held = proc.base_bytes + sum(s for t, s in proc.steps if t < onset)
        proc.steps = [(t, s) for t, s in proc.steps if t < onset]   # keep the leak a clean ramp
        rate = (total - 0.3 * GIB - held) / to_oom
        self.faults.append(Fault("memory_leak", onset, oom if reaches else alloc.end, alloc, [member], "gpu", {
            "rate_bytes_per_s": rate, "oom_at": round(oom, 3), "reaches_oom": reaches,
            "restart_s": rng.uniform(30, 120),
            "stair_s": rng.choice((0.0, 0.0, rng.uniform(30, 180))),     # smooth, or in steps
        }))
        return True
