"""Lay out a fleet: nodes and their collectors, what runs where and when, and which faults strike."""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import hardware as hw
from . import idle
from .faults import STRAGGLER_CAUSES, IoStarvation, JobSlowdown, LeakEpisode, Straggler
from .fleet import HOUR, Node, Run, gpu_uuid, hexid, lognormal
from .procs import Pids
from .workloads import (
    BatchJob,
    BurnIn,
    LeakPlan,
    Notebook,
    Replica,
    Reservation,
    Service,
    SyncJob,
    Workload,
    seeded,
)

INTERVALS = (1, 2, 5, 10, 15, 30, 60)
# how common each sampling interval is among collectors
INTERVAL_WEIGHT = {1: 0.02, 2: 0.04, 5: 0.26, 10: 0.28, 15: 0.17, 30: 0.14, 60: 0.09}
REGIONS = {"iad": -5.0, "fra": 1.0, "sin": 8.0}
ROLE_SHARE = (("train", 0.42), ("batch", 0.15), ("serve", 0.26), ("dev", 0.17))
ROLE_HW: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {"iad": ("h100x8", "h200x8"), "fra": ("a100x8", "h100x8")},
    "batch": {"fra": ("a100-40x8",), "iad": ("l40sx8",), "sin": ("h100x8",)},
    "serve": {"iad": ("l40sx8", "h100x8"), "sin": ("l4x8", "l40sx4"), "fra": ("l4x4",)},
    "dev": {"sin": ("rtx6000x4",), "iad": ("l40sx4",), "fra": ("a100x8",)},
}
TRAIN_TENANTS = ("borealis-ai", "cinder-labs", "fathom-ml", "kestrel-research", "quanta-bio", "tessellate")
BATCH_TENANTS = ("deltaforge", "ionic-data", "halcyon-bio", "marrow-analytics")
SERVE_TENANTS = ("lumen-search", "parlance", "vivid-media", "orchard-health", "sable-chat")
DEV_TENANTS = ("u-amara", "u-bjorn", "u-chen", "u-dara", "u-elif", "u-farid", "u-greta", "u-hiro", "u-ines")
TRAIN_JOBS = ("pretrain-7b", "sft-70b", "dpo-13b", "vit-h14", "asr-conformer", "sdxl-ft", "moe-8x7b", "dlrm-v3")
BATCH_JOBS = ("embed-corpus", "transcode", "batch-infer", "featurize", "eval-sweep")
SERVICES = ("chat-api", "rerank", "embed-svc", "vision-api", "tts", "code-assist")
DEFAULT_EPOCH = 1740960000.0   # 2025-03-03 00:00 UTC, a Monday


@dataclass(frozen=True)
class FleetSpec:
    """What to generate. ``None`` fault counts scale with the fleet (one of each kind per ~150 GPU-hours)."""

    seed: int = 1
    nodes: int = 16
    hours: float = 12.0
    start: float | None = None
    stragglers: int | None = None
    io_starvations: int | None = None
    leaks: int | None = None
    intervals: tuple[int, ...] = INTERVALS

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.nodes > 2000:
            raise ValueError("nodes must be between 1 and 2000")
        if not 0.25 <= self.hours <= 24 * 14:
            raise ValueError("hours must be between 0.25 and 336")
        if not self.intervals or any(i not in INTERVAL_WEIGHT for i in self.intervals):
            raise ValueError(f"intervals must be chosen from {','.join(map(str, INTERVALS))}")
        for name in ("stragglers", "io_starvations", "leaks"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"{name} must be 0 or more")

    def run(self) -> Run:
        start = self.start
        if start is None:   # a different weekday and hour of the day for each seed
            start = DEFAULT_EPOCH + (self.seed * 3 % 7) * 86400 + (self.seed * 5 % 24) * HOUR
        return Run(float(start), float(start) + self.hours * HOUR, self.seed)


@dataclass
class Fleet:
    run: Run
    nodes: list[Node]
    workloads: list[Workload]
    stragglers: list[Straggler] = field(default_factory=list)
    io: list[IoStarvation] = field(default_factory=list)
    leaks: list[LeakEpisode] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def on(self, node: Node) -> list[Workload]:
        return [w for w in self.workloads if w.rows(node)]

    def gpu_hours(self) -> float:
        return sum(n.gpus for n in self.nodes) * (self.run.t1 - self.run.t0) / HOUR

    def fault_labels(self) -> list[dict]:
        t1 = self.run.t1
        out = [s.label(t1) for s in self.stragglers] + [x.label(t1) for x in self.io]
        out += [e.label(t1) for e in self.leaks if e.onset < t1]
        return out


def _roles(n: int) -> list[str]:
    counts = {r: int(share * n) for r, share in ROLE_SHARE}
    rest = n - sum(counts.values())
    for r, _ in sorted(ROLE_SHARE, key=lambda x: -(x[1] * n - int(x[1] * n))):
        if rest <= 0:
            break
        counts[r] += 1
        rest -= 1
    if n >= 4 and counts["train"] < 2:
        donor = max(("serve", "dev", "batch"), key=lambda r: counts[r])
        counts[donor] -= 1
        counts["train"] += 1
    return [r for r, _ in ROLE_SHARE for _ in range(counts[r])]


def layout(spec: FleetSpec, run: Run, rng: np.random.Generator) -> tuple[list[Node], list[list[Node]]]:
    """Nodes grouped by role; training nodes in clusters (racks) that run multi-node jobs."""
    roles = _roles(spec.nodes)
    placed: list[tuple[str, str, str, int]] = []     # (role, region, shape, rack)
    rack = 0
    clusters_idx: list[list[int]] = []
    n_train = roles.count("train")
    left = n_train
    while left > 0:
        size = int(rng.choice([1, 2, 3, 4], p=[0.3, 0.35, 0.15, 0.2]))
        if not clusters_idx and n_train >= 2:
            size = max(size, 2)
        size = min(size, left)
        region = str(rng.choice(list(ROLE_HW["train"])))
        idx = []
        for _ in range(size):
            idx.append(len(placed))
            placed.append(("train", region, str(rng.choice(ROLE_HW["train"][region])), rack))
        clusters_idx.append(idx)
        rack += 1
        left -= size
    for role in ("batch", "serve", "dev"):
        for _ in range(roles.count(role)):
            region = str(rng.choice(list(ROLE_HW[role])))
            placed.append((role, region, str(rng.choice(ROLE_HW[role][region])), rack))
            rack += 1 if rng.random() < 0.5 else 0
    n = len(placed)
    order = rng.permutation(n)
    intervals = [0] * n
    allowed = [i for i in INTERVALS if i in spec.intervals]
    # one node of each interval, then the common ones: 1 s and 2 s collectors write most of the bytes
    extra = [i for i in allowed if i >= 5] or allowed
    w = np.array([INTERVAL_WEIGHT[i] for i in extra])
    for j, k in enumerate(order):
        intervals[k] = allowed[j] if j < len(allowed) else int(rng.choice(extra, p=w / w.sum()))
    no_host = set(rng.choice(n, size=max(1 if n >= 8 else 0, int(round(0.1 * n))), replace=False).tolist())
    no_pcie = set(rng.choice(n, size=max(1 if n >= 8 else 0, int(round(0.18 * n))), replace=False).tolist())
    no_thr = set(rng.choice(n, size=max(1 if n >= 8 else 0, int(round(0.14 * n))), replace=False).tolist())
    lossy = int(rng.integers(n)) if n >= 3 else -1      # at least one collector that loses messages
    nodes: list[Node] = []
    counter: dict[str, int] = {}
    inlet = {r: rng.uniform(20, 29) for r in range(rack + 1)}
    hours = run.t1 - run.t0
    for k, (role, region, shape_key, rk) in enumerate(placed):
        shape = hw.SHAPES[shape_key]
        nrng = seeded(run.seed, "node", k)
        stem = f"{region}{spec.seed}-{shape.gpu.key}-r{rk:02d}"    # one site per seed: fleets can be merged
        counter[stem] = counter.get(stem, 0) + 1
        name = f"{stem}-n{counter[stem]:02d}"
        restarts = []
        if nrng.random() < 0.15 and hours > 3 * HOUR:
            restarts.append((run.t0 + nrng.uniform(HOUR, hours - HOUR), nrng.uniform(15, 150)))
        nodes.append(Node(
            name=name, pool=f"{shape.gpu.key}-{region}-{role}", region=region, utc_offset=REGIONS[region],
            rack=f"{region}-r{rk:02d}", shape=shape, role=role, interval=intervals[k],
            phase=round(float(nrng.uniform(0, intervals[k])), 3), has_host=k not in no_host,
            has_pcie=k not in no_pcie, has_throttle=k not in no_thr,
            drop_every=float(nrng.uniform(150, 1500)) if nrng.random() < 0.3 or k == lossy else 0.0,
            restarts=restarts,
            uuids=[gpu_uuid(nrng) for _ in range(shape.gpus)], inlet_c=inlet[rk] + nrng.normal(0, 0.8),
            gpu_dt=[float(nrng.normal(0, 1.2) + 0.5 * (g % 4)) for g in range(shape.gpus)],
            ecc=[int(nrng.integers(1, 3)) if nrng.random() < 0.02 else 0 for _ in range(shape.gpus)],
            host_base={"cores": nrng.uniform(0.5, 3), "disk": nrng.uniform(0.2e6, 6e6),
                       "net": nrng.uniform(0.5e6, 25e6), "iowait": nrng.uniform(0, 0.6),
                       "mem": shape.host_mem * nrng.uniform(0.02, 0.05)},
            seed=run.seed, pids=Pids(seeded(run.seed, "pids", k))))
    clusters = [[nodes[k] for k in idx] for idx in clusters_idx]
    return nodes, clusters


class Planner:
    """Fills every GPU's time with workloads, then places faults and confounders."""

    def __init__(self, spec: FleetSpec):
        self.spec = spec
        self.run = spec.run()
        self.rng = np.random.default_rng([spec.seed, 0xF1EE7])
        self.workloads: list[Workload] = []
        self.host_busy: dict[str, list[tuple[float, float]]] = {}   # faults that show in a node's host metrics

    def _host_free(self, nodes: list[Node], a: float, b: float) -> bool:
        return all(b + 600 <= c or a >= d + 600 for n in nodes for c, d in self.host_busy.get(n.name, []))

    def _host_take(self, nodes: list[Node], a: float, b: float) -> None:
        for n in nodes:
            self.host_busy.setdefault(n.name, []).append((a, b))

    def _gap(self, node: Node, tenant: str | None, a: float, b: float, rows: list[int]) -> None:
        """Time between two jobs: kept by the tenant (rented, idle) or handed back (maybe burned in)."""
        rng = self.rng
        if b <= a:
            return
        if tenant is not None and rng.random() < 0.5:
            jid = f"alloc-{hexid(rng)}" if rng.random() < 0.5 else None
            self.workloads.append(Reservation(jid, tenant, a, b, node, rows, rng))
        elif b - a > 1800 and rng.random() < 0.2:
            s = a + rng.uniform(0, b - a - 900)
            self.workloads.append(BurnIn(f"burnin-{hexid(rng)}", s, s + rng.uniform(300, 600), node, rows))

    def _sequence(self, make: Callable[[str, float, float], Workload], lanes_nodes: list[tuple[Node, list[int]]],
                  median_h: float, tenants: tuple[str, ...], running: float) -> None:
        """Jobs one after another on the same GPUs, with short requeues or longer gaps between them."""
        rng = self.rng
        run = self.run
        tenant = str(rng.choice(tenants))
        if rng.random() < running:
            t = run.t0 - rng.uniform(0, median_h * HOUR)
        else:
            t = run.t0 + rng.uniform(0, 2400)
            for node, rows in lanes_nodes:
                self._gap(node, tenant, run.t0 - 3600, t, rows)
        while t < run.t1:
            d = lognormal(rng, median_h * HOUR, 0.6, max(1.0, median_h / 5) * HOUR, 30 * HOUR)
            self.workloads.append(make(tenant, t, t + d))
            t += d
            if rng.random() < 0.45:
                gap = rng.uniform(90, 200)
            else:
                gap = rng.uniform(1200, 3 * HOUR)
            for node, rows in lanes_nodes:
                self._gap(node, tenant, t, t + gap, rows)
            t += gap
            if rng.random() < 0.4:
                tenant = str(rng.choice(tenants))

    def workloads_for(self, nodes: list[Node], clusters: list[list[Node]]) -> None:
        rng = self.rng
        run = self.run
        for cluster in clusters:
            if len(cluster) == 1 and rng.random() < 0.3:
                lanes = [[0, 1, 2, 3], [4, 5, 6, 7]] if cluster[0].gpus == 8 else [list(range(cluster[0].gpus))]
            else:
                lanes = [list(range(cluster[0].gpus))]
            for rows in lanes:
                parts = [(n, list(rows)) for n in cluster]

                def train(tenant: str, a: float, b: float, parts=parts) -> Workload:
                    name = f"{rng.choice(TRAIN_JOBS)}-{hexid(rng)}"
                    return SyncJob(name, tenant, a, b, parts, seeded(run.seed, name))
                self._sequence(train, parts, 7.0, TRAIN_TENANTS, 0.75)
        for node in nodes:
            if node.role == "batch":
                whole = rng.random() < 0.6 or node.gpus < 8
                lanes = [list(range(node.gpus))] if whole else [[0, 1, 2, 3], [4, 5, 6, 7]]
                for rows in lanes:
                    def batch(tenant: str, a: float, b: float, node=node, rows=rows) -> Workload:
                        name = f"{rng.choice(BATCH_JOBS)}-{hexid(rng)}"
                        return BatchJob(name, tenant, a, b, node, list(rows), seeded(run.seed, name))
                    self._sequence(batch, [(node, rows)], 3.0, BATCH_TENANTS, 0.6)
            elif node.role == "serve":
                self._services(node)
            elif node.role == "dev":
                for g in range(node.gpus):
                    self._dev_gpu(node, g)

    def _services(self, node: Node) -> None:
        rng = self.rng
        run = self.run
        halves = [list(range(node.gpus))] if rng.random() < 0.6 else [
            list(range(node.gpus // 2)), list(range(node.gpus // 2, node.gpus))]
        for rows in halves:
            tenant = str(rng.choice(SERVE_TENANTS))
            name = f"{rng.choice(SERVICES)}-{hexid(rng, 4)}"
            tp = 2 if rng.random() < 0.3 and len(rows) % 2 == 0 else 1
            groups = [rows[j:j + tp] for j in range(0, len(rows), tp)]
            spare = rng.random()
            held_all: list[list[int]] = []
            if spare < 0.25 and len(groups) > 1:
                groups = groups[:-1]               # last GPUs never rented
            elif spare < 0.35 and len(groups) > 1:
                held_all = [groups.pop()]          # rented for headroom, never used
            elastic = rng.random() < 0.35 and len(groups) >= 2
            keep = math.ceil(len(groups) / 2)
            srng = seeded(run.seed, name)
            replicas = []
            for j, grp in enumerate(groups):
                pod = f"{name}-{hexid(srng, 9)}-{hexid(srng, 5)}"
                active = [(run.t0 - 86400, run.t1 + 86400)]
                held: list[tuple[float, float]] = []
                if elastic and j >= keep:
                    active, held = self._scale_in(node, srng)
                replicas.append(Replica(list(grp), pod, active, held))
            svc = Service(name, tenant, node, replicas, srng, run, shared_job=bool(srng.random() < 0.5))
            if not elastic and srng.random() < 0.4:
                svc.rollouts.append(run.t0 + srng.uniform(0.1, 0.9) * (run.t1 - run.t0))
            self.workloads.append(svc)
            for grp in held_all:
                self.workloads.append(Reservation(None, tenant, run.t0 - 86400, run.t1 + 86400, node, grp, srng))

    def _scale_in(self, node: Node, rng: np.random.Generator) -> tuple[list[tuple[float, float]],
                                                                          list[tuple[float, float]]]:
        """Nightly scale-in of a replica: the GPUs handed back, or kept rented with nothing on them."""
        run = self.run
        off = node.utc_offset * HOUR
        day0 = math.floor((run.t0 - 86400 + off) / 86400)
        active, held = [], []
        t = run.t0 - 86400
        for d in range(day0, day0 + int((run.t1 - run.t0) / 86400) + 4):
            a = d * 86400 - off + rng.uniform(0.5, 2.0) * HOUR
            b = d * 86400 - off + rng.uniform(6.0, 8.0) * HOUR
            if b <= t:
                continue
            active.append((t, a))
            if rng.random() < 0.4:
                held.append((a, b))
            t = b
            if t > run.t1 + 86400:
                break
        active.append((t, run.t1 + 86400))
        return active, held

    def _dev_gpu(self, node: Node, g: int) -> None:
        rng = self.rng
        run = self.run
        lo, hi = idle.band(node.interval)
        avoid = (lo - 2 * node.interval - 60, hi + 2 * node.interval + 60)
        t = run.t0 - rng.uniform(0, 3 * HOUR)
        while t < run.t1:
            x = rng.random()
            tenant = str(rng.choice(DEV_TENANTS))
            if x < 0.5:
                d = lognormal(rng, 2.5 * HOUR, 0.6, 1800, 10 * HOUR)
                name = f"jupyter-{tenant[2:]}-{hexid(rng, 4)}"
                self.workloads.append(Notebook(name, tenant, t, t + d, node, g, seeded(run.seed, name), avoid))
            elif x < 0.75:
                d = lognormal(rng, 3 * HOUR, 0.8, max(1200.0, avoid[1] + 120), 24 * HOUR)
                self.workloads.append(Reservation(f"alloc-{hexid(rng)}" if rng.random() < 0.5 else None, tenant,
                                                  t, t + d, node, [g], rng))
            else:
                d = lognormal(rng, 1.5 * HOUR, 0.8, 600, 12 * HOUR)
            t += d

    # -- faults ---------------------------------------------------------------------------------------------
    def _window(self, w: Workload, after: float, before: float = 300.0) -> tuple[float, float]:
        return max(w.start + after, self.run.t0 + 300), min(w.end, self.run.t1) - before

    def _slot(self, w: Workload, lo: float, hi: float, length: float, shortest: float = 600.0
              ) -> tuple[float, float] | None:
        """A free stretch of ``length`` in ``[lo, hi]`` of a workload, shorter when the workload is crowded."""
        room = hi - lo
        while True:
            size = min(length, room if room < 3 * shortest else max(shortest, 0.4 * room))
            if size < shortest:
                return None
            for _ in range(8):
                a = lo + self.rng.uniform(0, hi - lo - size)
                if w.free(a, a + size):
                    return a, a + size
            if length <= shortest:
                return None
            length = max(shortest, length / 2)

    def stragglers(self, count: int) -> list[Straggler]:
        rng = self.rng
        jobs = [w for w in self.workloads if isinstance(w, SyncJob)]
        out: list[Straggler] = []
        for _ in range(count * 30):
            if len(out) >= count or not jobs:
                break
            job = jobs[int(rng.integers(len(jobs)))]
            lo, hi = self._window(job, job.startup + 600)
            span = self._slot(job, lo, hi, lognormal(rng, 2700, 0.7, 600, 3 * HOUR))
            if span is None:
                continue
            a, b = span
            level = "node" if job.multi and rng.random() < 0.4 else "gpu"
            causes = [c for c, v in STRAGGLER_CAUSES.items() if v[0] == level]
            weights = {"thermal": 5, "power_brake": 3, "hw_slowdown": 3, "pcie_link": 3, "nvlink": 2, "slow_cpu": 4,
                       "node_thermal": 3, "node_power_brake": 2.5, "node_cpu": 2.5, "node_network": 2}
            p = np.array([weights[c] for c in causes])
            cause = str(rng.choice(causes, p=p / p.sum()))
            node, rows = job.parts[int(rng.integers(len(job.parts)))]
            host_seen = STRAGGLER_CAUSES[cause][1] == "host"
            if host_seen and not self._host_free([node], a, b):
                continue
            if host_seen:
                self._host_take([node], a, b)
            if level == "gpu":
                rows = [int(rng.choice(rows))]
            intermittent = rng.random() < 0.45
            on = [(a, b)]
            if intermittent:
                on = on_spans(rng, a, b)
            st = Straggler(job.name, job.tenant, node.pool, node.name, list(rows), [node.uuids[r] for r in rows],
                           cause, a, b, float(rng.uniform(0.1, 0.5)), on,
                           "intermittent" if intermittent else "steady",
                           pcie_factor=float(rng.uniform(0.12, 0.3) if cause == "pcie_link" else
                                             rng.uniform(0.2, 0.5) if cause == "node_network" else 1.0),
                           hot_margin=float(rng.uniform(0.5, 3.5)))
            job.stragglers.append(st)
            job.calendar.append((a, b))
            out.append(st)
        return out

    def io_starvations(self, count: int) -> list[IoStarvation]:
        rng = self.rng
        hosts: list[tuple[Workload, float]] = []
        for w in self.workloads:
            if isinstance(w, BatchJob) and w.node.has_host:
                hosts.append((w, 0.45))
            elif isinstance(w, SyncJob) and all(n.has_host for n, _ in w.parts):
                hosts.append((w, 0.2 if w.multi else 0.35))
        out: list[IoStarvation] = []
        if not hosts:
            return out
        p = np.array([x for _, x in hosts])
        sources = [str(x) for x in rng.permutation(["disk", "network", "cpu"])]
        placed = 0
        for _ in range(count * 30):
            if len(out) >= count:
                break
            w = hosts[int(rng.choice(len(hosts), p=p / p.sum()))][0]
            lo, hi = self._window(w, 900)
            span = self._slot(w, lo, hi, math.exp(rng.uniform(math.log(300), math.log(3600))), 300.0)
            if span is None:
                continue
            a, b = span
            if not self._host_free([n for n, _ in w.parts], a, b):
                continue
            self._host_take([n for n, _ in w.parts], a, b)
            source = sources[placed % 3]           # every source equally often
            placed += 1
            storage = {"disk": "local_nvme", "cpu": "host_pipeline"}.get(source) or str(
                rng.choice(["nfs", "object_store"]))
            severity = float(rng.uniform(0.3, 0.85))
            shape = "sawtooth" if rng.random() < 0.5 else "irregular"
            period = float(rng.uniform(8, 90) if shape == "sawtooth" else rng.uniform(3, 15))
            level = {"disk": {"iowait": rng.uniform(18, 50) * (0.6 + 0.5 * severity), "share": rng.uniform(0.55, 0.9)},
                     "network": {"share": rng.uniform(0.5, 0.9),
                                 "iowait": rng.uniform(4, 18) if storage == "nfs" else rng.uniform(0, 0.8)},
                     "cpu": {"cpu": rng.uniform(0.93, 0.99)}}[source]
            for node, rows in w.parts:
                io = IoStarvation(w.name, w.tenant, node.pool, node.name, list(rows), [node.uuids[r] for r in rows],
                                  a, b, source, storage, severity, shape, period, level)
                w.io.append(io)    # type: ignore[attr-defined]
                out.append(io)
            w.calendar.append((a, b))
        return out

    def leaks(self, count: int) -> list[LeakPlan]:
        rng = self.rng
        run = self.run
        hosts: list[tuple[str, Workload, float]] = []
        for w in self.workloads:
            if isinstance(w, Service) and w.static and not w.rollouts and any(len(r.active) == 1 for r in w.replicas):
                hosts.append(("serve", w, 0.45))
            elif isinstance(w, BatchJob) and min(w.end, run.t1) - max(w.start, run.t0) > 2 * HOUR:
                hosts.append(("batch", w, 0.3))
            elif isinstance(w, SyncJob) and min(w.end, run.t1) - max(w.start, run.t0) > 2 * HOUR:
                hosts.append(("train", w, 0.25))
        plans: list[LeakPlan] = []
        if not hosts:
            return plans
        p = np.array([x for _, _, x in hosts])
        used: set[tuple[str, int]] = set()
        for _ in range(count * 30):
            if len(plans) >= count:
                break
            kind, w, _ = hosts[int(rng.choice(len(hosts), p=p / p.sum()))]
            node, rows = w.parts[int(rng.integers(len(w.parts)))]
            gpu = node.shape.gpu
            if kind == "serve":
                assert isinstance(w, Service)
                reps = [r for r in w.replicas if len(r.active) == 1 and r.leak is None]
                if not reps:
                    continue
                rep = reps[int(rng.integers(len(reps)))]
                row = rep.rows[0]
                settled_at = run.t0
                settled = w.weights
            elif kind == "batch":
                assert isinstance(w, BatchJob)
                row = int(rng.choice(rows))
                if any(lp.row == row for lp in w.leaks):
                    continue
                settled_at = w.settled_at(row)
                settled = w.base + sum(s for _, s in w.steps[row])
            else:
                assert isinstance(w, SyncJob)
                if w.leak is not None:
                    continue
                row = int(rng.choice(rows))
                settled_at = w.start + w.settled_after()
                settled = w.base + sum(s for _, s in w.cache)
            if (node.name, row) in used:
                continue
            lo = max(settled_at + 300, run.t0 + 300)
            hi = min(w.end, run.t1) - 900
            if hi <= lo:
                continue
            onset = lo + rng.uniform(0, hi - lo)
            if kind == "train" and not w.free(onset, run.t1):
                continue
            headroom = gpu.mem_total - gpu.reserved - settled
            tto = math.exp(rng.uniform(math.log(600), math.log(12 * HOUR)))
            if w.end < run.t1:                  # the job must outlive the leak, or the label would lie
                tto = min(tto, w.end - onset - 600)
                if tto < 600:
                    continue
            period = float(rng.uniform(120, 600)) if rng.random() < 0.4 else 0.0
            if period and tto < 4 * period:
                period = 0.0
            rate = headroom / tto
            cycles = int(rng.choice([1, 2, 3], p=[0.6, 0.25, 0.15]))
            lp = LeakPlan(node, row, onset, rate, period, cycles)
            if isinstance(w, Service):
                rep.leak = lp
            elif isinstance(w, BatchJob):
                w.leaks.append(lp)
            elif isinstance(w, SyncJob):
                w.leak = lp
                w.calendar.append((onset, run.t1))
            used.add((node.name, row))
            plans.append(lp)
        return plans

    def confounders(self) -> None:
        """Whole-job slowdowns: every GPU throttled alike, no member behind the others."""
        rng = self.rng
        for w in self.workloads:
            if isinstance(w, SyncJob) and rng.random() < 0.35:
                lo, hi = self._window(w, w.startup + 600)
                span = self._slot(w, lo, hi, rng.uniform(300, 2400), 300.0)
                if span is None:
                    continue
                hot = rng.random() < 0.5
                bits = hw.SW_THERMAL if hot else hw.HW_POWER_BRAKE | hw.HW_SLOWDOWN
                w.slowdowns.append(JobSlowdown(span[0], span[1], float(rng.uniform(0.08, 0.35)), bits, hot))
                w.calendar.append(span)


def on_spans(rng: np.random.Generator, a: float, b: float) -> list[tuple[float, float]]:
    """On and off stretches of an intermittent fault, on between 30% and 80% of the time."""
    duty = rng.uniform(0.3, 0.8)
    on_mean = rng.uniform(30, 300)
    off_mean = on_mean * (1 - duty) / duty
    out: list[tuple[float, float]] = []
    for _ in range(20):
        out = []
        t = a
        while t < b:
            on = max(10.0, rng.exponential(on_mean))
            out.append((t, min(b, t + on)))
            t += on + max(10.0, rng.exponential(off_mean))
        if 0.25 <= sum(y - x for x, y in out) / (b - a) <= 0.9:
            break
    return out


def plan(spec: FleetSpec) -> Fleet:
    """The whole fleet, faults placed, every workload finalized (processes and events drawn)."""
    p = Planner(spec)
    run = p.run
    nodes, clusters = layout(spec, run, p.rng)
    p.workloads_for(nodes, clusters)
    per = max(2, round(sum(n.gpus for n in nodes) * spec.hours / 150))
    want = {"straggler": spec.stragglers if spec.stragglers is not None else per,
            "io_starvation": spec.io_starvations if spec.io_starvations is not None else per,
            "memory_leak": spec.leaks if spec.leaks is not None else per}
    fleet = Fleet(run, nodes, p.workloads)
    fleet.stragglers = p.stragglers(want["straggler"])
    fleet.io = p.io_starvations(want["io_starvation"])
    plans = p.leaks(want["memory_leak"])
    p.confounders()
    for w in p.workloads:
        w.finalize(run)
    fleet.leaks = [e for lp in plans for e in lp.episodes]
    got = {"straggler": len(fleet.stragglers), "io_starvation": len(fleet.io), "memory_leak": len(plans)}
    for kind, n in want.items():
        if got[kind] < n:
            fleet.notes.append(f"placed {got[kind]} of {n} {kind} faults: not enough suitable jobs; "
                               "add --nodes or --hours")
    return fleet


def warn(fleet: Fleet) -> None:
    for note in fleet.notes:
        print(f"evalfleet: {note}", file=sys.stderr)
