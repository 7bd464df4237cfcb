"""What runs on the GPUs, second by second.

Each workload owns some GPUs for a span of time, says who rents them (``tenancy``), which processes hold
their memory (``procs``) and fills a node's :class:`Frame` with what its GPUs and the host do
(``render``). Faults attached to a workload change what it renders; nothing else does.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np

from . import hardware as hw
from .faults import IoStarvation, JobSlowdown, LeakEpisode, Straggler
from .fleet import Node, Run, lognormal
from .frame import Frame, mask_of, on_off
from .procs import MIB, Leak, MemCurve, Proc

# per-second phases of a synchronous job, in the order a later one overrides an earlier one
TRAIN, HICCUP, EPOCH, EVAL, CKPT, STARTUP, DOWN = range(7)

Tenancy = tuple[int, float, float, str | None, str | None]     # (gpu index, start, end, tenant, job)


def seeded(*parts: object) -> np.random.Generator:
    """A generator that depends only on the names given (stable across runs and processing order)."""
    return np.random.default_rng([zlib.crc32(str(p).encode()) for p in parts])


@dataclass
class LeakPlan:
    """A process slot that leaks: first onset, rate, pattern, and how many out-of-memory cycles at most."""

    node: Node
    row: int
    onset: float
    rate: float
    period: float
    cycles: int
    episodes: list[LeakEpisode] = field(default_factory=list)


class Workload:
    """Base: who, what GPUs, when."""

    kind = ""

    def __init__(self, name: str, tenant: str | None, start: float, end: float):
        self.name = name
        self.tenant = tenant
        self.start = start
        self.end = end
        self.parts: list[tuple[Node, list[int]]] = []
        self.calendar: list[tuple[float, float]] = []      # fault windows, kept apart
        self.xids: list[tuple[str, int, float, int]] = []   # (node, gpu, when, code)

    def rows(self, node: Node) -> list[int]:
        for n, rows in self.parts:
            if n.name == node.name:
                return rows
        return []

    def free(self, a: float, b: float, margin: float = 600.0) -> bool:
        return all(b + margin <= c or a >= d + margin for c, d in self.calendar)

    def tenancy(self, node: Node) -> list[Tenancy]:
        return [(r, self.start, self.end, self.tenant, self.name) for r in self.rows(node)]

    def procs(self, node: Node) -> list[Proc]:
        return []

    def finalize(self, run: Run) -> None:
        pass

    def render(self, frame: Frame, node: Node) -> None:
        pass


def _io_availability(frame: Frame, sl: slice, io: IoStarvation) -> np.ndarray:
    """Share of each second the GPUs have input to work on (1 outside the episode)."""
    n = sl.stop - sl.start
    a = np.ones(n)
    s = frame.span(io.start, io.end)
    lo, hi = max(s.start, sl.start) - sl.start, min(s.stop, sl.stop) - sl.start
    if hi <= lo:
        return a
    t = frame.t[sl][lo:hi]
    rng = seeded("io", io.job, round(io.start))
    keep = 1.0 - io.severity
    if io.shape == "sawtooth":
        # the prefetch queue refills in one go, then the GPUs drain it faster than it fills
        periods = io.period * rng.uniform(0.8, 1.25, 4096)
        edges = io.start + np.concatenate([[0.0], np.cumsum(periods)])
        k = np.searchsorted(edges, t, side="right") - 1
        k = np.clip(k, 0, len(periods) - 1)
        x = (t - edges[k]) / periods[k]
        gamma = 1.0 / keep - 1.0
        v = np.clip(1.0 - x, 0.0, 1.0) ** gamma
    else:
        spans = on_off(rng, io.start, io.end, io.period * keep * 2, io.period * io.severity * 2)
        v = mask_of(frame, slice(sl.start + lo, sl.start + hi), spans).astype(float)
        v = np.clip(v * rng.uniform(0.6, 1.0, len(v)) + rng.uniform(0, 0.08, len(v)), 0, 1)
    a[lo:hi] = v
    return a


def _io_host(frame: Frame, node: Node, sl: slice, io: IoStarvation, rng: np.random.Generator) -> None:
    s = frame.span(io.start, io.end)
    lo, hi = max(s.start, sl.start), min(s.stop, sl.stop)
    if hi <= lo:
        return
    n = hi - lo
    wobble = np.clip(rng.normal(1.0, 0.08, n), 0.7, 1.25)
    lv = io.level
    if io.source == "disk":
        frame.iowait[lo:hi] += lv["iowait"] * wobble
        frame.disk[lo:hi] += node.shape.disk_max * lv["share"] * wobble
    elif io.source == "network":
        frame.net[lo:hi] += node.shape.nic_max * lv["share"] * wobble
        frame.iowait[lo:hi] += lv["iowait"] * wobble
    else:
        frame.cores[lo:hi] = np.maximum(frame.cores[lo:hi], node.shape.cores * lv["cpu"] * np.minimum(wobble, 1.02))


class SyncJob(Workload):
    """Synchronous data-parallel training over one or more nodes: every GPU computes its share of a step,
    then all of them meet in an all-reduce. A slow member makes every other one wait at the collective."""

    kind = "train"

    def __init__(self, name: str, tenant: str, start: float, end: float, parts: list[tuple[Node, list[int]]],
                 rng: np.random.Generator):
        super().__init__(name, tenant, start, end)
        self.parts = parts
        self.rng = rng
        self.multi = len(parts) > 1
        self.step = lognormal(rng, 1.2, 0.6, 0.3, 6.0)
        self.c = rng.uniform(0.78, 0.93)              # compute share of a step, the rest is exposed comms
        self.hidden = rng.uniform(0.3, 0.8)           # share of a wait at the collective with no kernel queued
        self.load_c = rng.uniform(0.85, 1.08)
        self.memact_c = rng.uniform(0.25, 0.6)
        smallest = min(n.shape.gpu.mem_total for n, _ in parts)
        self.base = smallest * (rng.uniform(0.84, 0.9) if rng.random() < 0.2 else rng.uniform(0.4, 0.78))
        self.cache = [(rng.uniform(300, 2700), smallest * rng.uniform(0.008, 0.02))
                      for _ in range(int(rng.integers(1, 4)))]
        self.cores_per_gpu = rng.uniform(1.5, 6.0)
        self.source = "disk" if rng.random() < 0.5 else "network"
        self.read_per_gpu = lognormal(rng, 60e6, 0.8, 5e6, 500e6)
        self.load_rate = rng.uniform(0.8e9, 4e9)      # checkpoint read at start
        self.host_mem_per_gpu = rng.uniform(8, 60) * hw.GIB
        self.ckpt_every = rng.uniform(1800, 7200)
        self.ckpt_len = rng.uniform(45, 200)
        self.ckpt_iowait = rng.uniform(2, 9)
        self.eval_every = rng.uniform(3600, 14400) if rng.random() < 0.6 else 0.0
        self.eval_len = rng.uniform(90, 420)
        self.hiccup_every = rng.uniform(150, 1500)
        self.epoch_every = rng.uniform(3600, 6 * 3600) if rng.random() < 0.5 else 0.0
        self.comm_pcie = rng.uniform(4e9, 16e9) if self.multi else rng.uniform(0.03e9, 0.3e9)
        self.input_pcie = rng.uniform(0.1e9, 1.5e9)
        self.startup = rng.uniform(60, 200)
        self.stragglers: list[Straggler] = []
        self.slowdowns: list[JobSlowdown] = []
        self.io: list[IoStarvation] = []
        self.leak: LeakPlan | None = None
        self.breaks: list[tuple[float, float]] = []   # (process exit, seconds until the relaunch)
        self.events: list[tuple[float, float, int]] = []
        self._procs: dict[str, list[Proc]] = {}

    @property
    def gpu_count(self) -> int:
        return sum(len(r) for _, r in self.parts)

    def settled_after(self) -> float:
        """Seconds after a launch when memory stops moving (warm-up and allocator caches done)."""
        return self.startup + max(w for w, _ in self.cache) + 60

    def _curve(self, start: float) -> MemCurve:
        return MemCurve(start, self.startup * 0.8, self.base, 4, [(start + self.startup + w, s) for w, s in self.cache])

    def finalize(self, run: Run) -> None:
        rng = self.rng
        horizon = min(self.end, run.t1)
        if self.leak is not None:
            lp = self.leak
            gpu = lp.node.shape.gpu
            onset = lp.onset
            gen_start = self.start
            for _ in range(lp.cycles):
                settled = self._curve(gen_start).settled()
                leak = Leak(onset, lp.rate, lp.period)
                oom = leak.exhausts_at(gpu.mem_total - gpu.reserved - settled - 1 * MIB)
                if oom > self.end - 60 and self.end < run.t1:
                    break                   # the job would end first: this launch does not run into the leak
                lp.episodes.append(LeakEpisode(self.name, self.tenant, lp.node.pool, lp.node.name,
                                               lp.node.uuids[lp.row], -1, onset, oom, lp.rate,
                                               "steps" if lp.period else "smooth", lp.period, settled))
                if oom >= min(self.end, run.t1):
                    break
                delay = rng.uniform(60, 200)
                self.breaks.append((oom, delay))
                gen_start = oom + delay
                onset = gen_start + self.settled_after() + rng.uniform(300, 1800)
                if onset >= horizon - 600 or gen_start >= self.end:
                    break
        gens = []
        g0 = self.start
        for at, delay in self.breaks:
            gens.append((g0, at))
            self.events.append((at, at + delay, DOWN))
            g0 = at + delay
        gens.append((g0, self.end))
        for g0, g1 in gens:
            self.events.append((g0, g0 + self.startup, STARTUP))
            t = g0 + self.startup + self.ckpt_every * rng.uniform(0.2, 1.0)
            while t < g1:
                self.events.append((t, t + self.ckpt_len, CKPT))
                t += self.ckpt_every * rng.uniform(0.97, 1.03)
            if self.eval_every:
                t = g0 + self.startup + self.eval_every * rng.uniform(0.3, 1.0)
                while t < g1:
                    self.events.append((t, t + self.eval_len, EVAL))
                    t += self.eval_every * rng.uniform(0.97, 1.03)
            t = max(g0, run.t0 - 3600) + rng.exponential(self.hiccup_every)
            while t < min(g1, run.t1):
                self.events.append((t, t + rng.uniform(2, 12), HICCUP))
                t += rng.exponential(self.hiccup_every)
            if self.epoch_every:
                t = g0 + self.startup + self.epoch_every * rng.uniform(0.1, 1.0)
                while t < g1:
                    self.events.append((t, t + rng.uniform(20, 80), EPOCH))
                    t += self.epoch_every * rng.uniform(0.9, 1.1)
        self.events.sort(key=lambda e: (e[2], e[0]))
        for node, rows in self.parts:
            procs = []
            for gi, (g0, g1) in enumerate(gens):
                for r in rows:
                    curve = self._curve(g0)
                    p = Proc(node.pids.next(), r, g0, g1, curve)
                    mine = self.leak
                    if mine is not None and mine.node.name == node.name and mine.row == r and gi < len(mine.episodes):
                        ep = mine.episodes[gi]
                        curve.leak = Leak(ep.onset, ep.rate, ep.step_period)
                        ep.pid = p.pid
                    procs.append(p)
            self._procs[node.name] = procs
        for at, _ in self.breaks:
            node, rows = self.parts[int(rng.integers(len(self.parts)))]
            for r in rng.choice(rows, size=min(2, len(rows)), replace=False):
                self.xids.append((node.name, int(r), at + rng.uniform(0.5, 3), 43))

    def procs(self, node: Node) -> list[Proc]:
        return self._procs.get(node.name, [])

    def render(self, frame: Frame, node: Node) -> None:
        rows = self.rows(node)
        sl = frame.span(self.start, self.end)
        n = sl.stop - sl.start
        if not rows or n <= 0:
            return
        rng = seeded(self.name, node.name, "render")
        gpu = node.shape.gpu
        mb = gpu.memory_bound
        c = self.c
        R = len(rows)
        code = np.zeros(n, dtype=np.int8)
        for a, b, k in self.events:
            s = frame.span(a, b)
            lo, hi = max(s.start, sl.start) - sl.start, min(s.stop, sl.stop) - sl.start
            if hi > lo:
                code[lo:hi] = k
        big = np.zeros(n)                       # the slowest member's extra compute, whole job
        ec = np.zeros((R, n))
        et = np.zeros((R, n))
        eh = np.zeros((R, n))
        clock = np.ones((R, n))
        bits = np.zeros((R, n), dtype=np.int64)
        hot = np.zeros((R, n))
        pcie = np.ones((R, n))
        extra_cores = np.zeros(n)
        for st in self.stragglers:
            on = mask_of(frame, sl, st.on)
            e = st.slowdown / c
            big = np.where(on, np.maximum(big, e), big)
            if st.node != node.name:
                continue
            window = mask_of(frame, sl, [(st.start, st.end)])
            for r in st.rows:
                i = rows.index(r)
                if st.kind == "compute":
                    ec[i] = np.where(on, e, ec[i])
                    clock[i] = np.where(on, clock[i] / (1 + e / (1 - mb)), clock[i])
                elif st.kind == "transfer":
                    et[i] = np.where(on, e, et[i])
                    pcie[i] = np.where(on, st.pcie_factor, pcie[i])
                else:
                    eh[i] = np.where(on, e, eh[i])
                bits[i] |= np.where(on, st.bits, 0)
                if st.cause in ("thermal", "node_thermal"):
                    hot[i] = np.where(window, np.where(on, gpu.slowdown_c + st.hot_margin, gpu.slowdown_c - 6), hot[i])
                    if st.slowdown >= 0.35:
                        bits[i] |= np.where(on & (rng.random(n) < 0.3), hw.HW_THERMAL | hw.HW_SLOWDOWN, 0)
            if st.kind == "host":
                share = 0.95 if st.level == "node" else rng.uniform(0.08, 0.16)
                extra_cores = np.where(window, np.maximum(extra_cores, node.shape.cores * share), extra_cores)
        ej = np.zeros(n)
        for js in self.slowdowns:
            m = mask_of(frame, sl, [(js.start, js.end)])
            e = js.slowdown / c
            ej = np.where(m, e, ej)
            clock = np.where(m, clock / (1 + e / (1 - mb)), clock)
            bits |= np.where(m, js.bits, 0)
            if js.hot:
                hot = np.where(m, gpu.slowdown_c + rng.uniform(0.5, 3), hot)
        step = c * (1 + ej) * (1 + big) + (1 - c)
        own_c = c * (1 + ej) * (1 + ec)
        own_t = c * et
        own_h = c * eh
        comm = 1 - c
        wait = np.maximum(step - own_c - own_t - own_h - comm, 0.0)
        busy = (own_c + own_t + comm + wait * (1 - self.hidden)) / step
        load = (own_c * self.load_c + own_t * 0.22 + comm * 0.38 + wait * 0.07) / step
        memact = (own_c * self.memact_c + comm * 0.12 + own_t * 0.1) / step
        rx = (self.input_pcie * own_c + self.comm_pcie * (comm + own_t)) / step * pcie
        tx = (self.comm_pcie * (comm + own_t)) / step * pcie + 2e7
        avail = np.ones(n)
        for io in self.io:
            if io.node == node.name:
                avail = np.minimum(avail, _io_availability(frame, sl, io))
        busy = busy * avail + (1 - avail) * 0.01
        load = load * avail + (1 - avail) * 0.02
        memact = memact * avail
        rx = rx * avail
        # per-second wobble: kernels of uneven length, Python stalls
        busy = busy + rng.normal(0, 0.012, (R, n)) - (rng.random((R, n)) < 0.01) * rng.uniform(0.1, 0.4, (R, n))
        load = load * rng.normal(1.0, 0.025, (R, n))
        # shared phases override the step model
        for k, b_lvl, l_lvl in ((HICCUP, 0.05, 0.03), (EPOCH, 0.03, 0.02), (DOWN, 0.0, 0.0)):
            m = code == k
            if m.any():
                busy[:, m] = b_lvl * rng.random((R, int(m.sum())))
                load[:, m] = l_lvl
                memact[:, m] = 0.0
                rx[:, m] = 1e6
                tx[:, m] = 1e6
        m = code == EVAL
        if m.any():
            busy[:, m] *= rng.uniform(0.72, 0.86)
            load[:, m] *= 0.6
        m = code == STARTUP
        if m.any():
            k = int(m.sum())
            busy[:, m] = (rng.random((R, k)) < 0.03) * 0.25
            load[:, m] = 0.03
            memact[:, m] = 0.0
            rx[:, m] = np.where(np.arange(k) > 0.6 * k, gpu.pcie_gbs * 1e9 * 0.45, 5e6)
            tx[:, m] = 1e6
        m = code == CKPT
        if m.any():
            idx = np.flatnonzero(m)
            first = np.zeros(len(idx), dtype=bool)
            starts = np.flatnonzero(np.diff(np.concatenate([[0], m.astype(np.int8)])) == 1)
            for s0 in starts:
                first[(idx >= s0) & (idx < s0 + max(3, int(self.ckpt_len * 0.15)))] = True
            busy[:, idx] = np.where(first, 0.08, 0.004 * rng.random((R, len(idx))))
            load[:, idx] = np.where(first, 0.06, 0.0)
            memact[:, idx] = np.where(first, 0.05, 0.0)
            tx[:, idx] = np.where(first, min(gpu.pcie_gbs * 1e9 * 0.5, 14e9), 2e6)
            rx[:, idx] = 2e6
        working = (code == TRAIN) | (code == EVAL)
        bits = np.where(working, bits, 0)
        clock = np.where(working, clock, 1.0)
        rows_ix = np.asarray(rows)
        frame.busy[rows_ix, sl] = np.clip(busy, 0.0, 1.0)
        frame.load[rows_ix, sl] = np.clip(load, 0.0, 1.3)
        frame.memact[rows_ix, sl] = np.clip(memact, 0.0, 1.0)
        frame.clock[rows_ix, sl] = clock
        frame.bits[rows_ix, sl] |= bits
        frame.hot[rows_ix, sl] = np.maximum(frame.hot[rows_ix, sl], hot)
        frame.pcie_rx[rows_ix, sl] = rx
        frame.pcie_tx[rows_ix, sl] = tx
        # host: data loaders, checkpoint writes, start-up reads
        progress = busy.mean(axis=0)
        alive = code != DOWN
        cores = R * self.cores_per_gpu * (0.25 + 0.75 * np.clip(progress, 0, 1)) * alive
        cores += (code == CKPT) * R * 0.8 + (code == STARTUP) * R * 0.6 + extra_cores
        frame.cores[sl] += cores
        reads = R * self.read_per_gpu * np.clip(progress, 0, 1) * (code == TRAIN)
        reads += (code == EPOCH) * R * self.read_per_gpu * 6
        load_reads = (code == STARTUP) * self.load_rate * rng.uniform(0.7, 1.0, n)
        if self.source == "disk":
            frame.disk[sl] += np.minimum(reads + load_reads, node.shape.disk_max)
            frame.iowait[sl] += (reads + load_reads) / node.shape.disk_max * 6
        else:
            frame.net[sl] += np.minimum(reads + load_reads, node.shape.nic_max)
        frame.iowait[sl] += (code == CKPT) * self.ckpt_iowait
        frame.host_mem[sl] += R * self.host_mem_per_gpu * alive
        for io in self.io:
            if io.node == node.name:
                _io_host(frame, node, sl, io, rng)


class BatchJob(Workload):
    """Independent workers on one node's GPUs (offline inference, embeddings, preprocessing): each works
    through its own tasks; nothing keeps them in step."""

    kind = "batch"

    def __init__(self, name: str, tenant: str, start: float, end: float, node: Node, rows: list[int],
                 rng: np.random.Generator):
        super().__init__(name, tenant, start, end)
        self.parts = [(node, rows)]
        self.node = node
        self.rng = rng
        self.load_k = rng.uniform(0.55, 0.95)
        self.memact_k = rng.uniform(0.3, 0.75)
        self.cores_per_worker = rng.uniform(1.0, 5.0)
        self.source = "disk" if rng.random() < 0.5 else "network"
        self.read_per_worker = lognormal(rng, 50e6, 0.8, 3e6, 400e6)
        self.shard_read = rng.uniform(0.2e9, 1.2e9)
        self.base = node.shape.gpu.mem_total * rng.uniform(0.2, 0.6)
        self.setup = rng.uniform(60, 240)
        self.tasks: dict[int, list[tuple[float, float, float]]] = {}
        self.steps: dict[int, list[tuple[float, float]]] = {}
        self.io: list[IoStarvation] = []
        self.leaks: list[LeakPlan] = []
        self.down: dict[int, list[tuple[float, float]]] = {}
        self._procs: list[Proc] = []
        rows_rng = seeded(name, "tasks")
        for r in rows:
            tasks = []
            t = start + self.setup * rows_rng.uniform(0.8, 1.2)
            while t < end:
                d = lognormal(rows_rng, 900, 0.7, 120, 3600)
                tasks.append((t, min(end, t + d), rows_rng.uniform(0.55, 0.99)))
                t += d + rows_rng.uniform(5, 90)
            self.tasks[r] = tasks
            self.steps[r] = [(a, node.shape.gpu.mem_total * rows_rng.uniform(0.02, 0.07))
                             for a, _, _ in tasks[: int(rows_rng.integers(1, 4))]]

    def settled_at(self, row: int) -> float:
        return max([self.start + self.setup] + [a for a, _ in self.steps[row]]) + 60

    def finalize(self, run: Run) -> None:
        gpu = self.node.shape.gpu
        rng = self.rng
        warm = self.setup * 0.7
        for r in self.rows(self.node):
            lp = next((lp for lp in self.leaks if lp.row == r), None)
            g0 = self.start
            curve = MemCurve(g0, warm, self.base, 3, list(self.steps[r]))
            onset = lp.onset if lp is not None else None
            cycles = lp.cycles if lp is not None else 0
            while True:
                if lp is None or onset is None or cycles <= 0:
                    self._procs.append(Proc(self.node.pids.next(), r, g0, self.end, curve))
                    break
                settled = curve.settled()
                leak = Leak(onset, lp.rate, lp.period)
                oom = leak.exhausts_at(gpu.mem_total - gpu.reserved - settled - 1 * MIB)
                if oom > self.end - 60 and self.end < run.t1:
                    onset = None            # the job would end first: this worker does not run into the leak
                    continue
                curve.leak = leak
                p = Proc(self.node.pids.next(), r, g0, min(oom, self.end), curve)
                self._procs.append(p)
                lp.episodes.append(LeakEpisode(self.name, self.tenant, self.node.pool, self.node.name,
                                               self.node.uuids[r], p.pid, onset, oom, lp.rate,
                                               "steps" if lp.period else "smooth", lp.period, settled))
                cycles -= 1
                if oom >= self.end:
                    break
                delay = rng.uniform(10, 60)
                self.down.setdefault(r, []).append((oom, oom + delay + warm))
                g0 = oom + delay
                # the restarted worker meets the same shapes again: its caches come back during the warm-up
                curve = MemCurve(g0, warm, settled, 3)
                onset = g0 + warm + rng.uniform(300, 1500)
                if onset >= min(self.end, run.t1) - 600:
                    onset = None

    def procs(self, node: Node) -> list[Proc]:
        return self._procs if node.name == self.node.name else []

    def render(self, frame: Frame, node: Node) -> None:
        if node.name != self.node.name:
            return
        sl = frame.span(self.start, self.end)
        n = sl.stop - sl.start
        if n <= 0:
            return
        rng = seeded(self.name, "render")
        rows = self.rows(node)
        R = len(rows)
        busy = np.zeros((R, n))
        gaps = np.ones((R, n), dtype=bool)
        for i, r in enumerate(rows):
            for a, b, level in self.tasks[r]:
                s = frame.span(a, b)
                lo, hi = max(s.start, sl.start) - sl.start, min(s.stop, sl.stop) - sl.start
                if hi > lo:
                    busy[i, lo:hi] = level
                    gaps[i, lo:hi] = False
            for a, b in self.down.get(r, []):
                m = mask_of(frame, sl, [(a, b)])
                busy[i, m] = 0.0
        before = mask_of(frame, sl, [(self.start, self.start + self.setup)])
        gaps[:, before] = False
        busy = np.where(busy > 0, np.clip(busy + rng.normal(0, 0.04, (R, n)), 0.05, 1.0), rng.random((R, n)) * 0.01)
        avail = np.ones(n)
        for io in self.io:
            avail = np.minimum(avail, _io_availability(frame, sl, io))
        busy = busy * avail + (1 - avail) * 0.01 * (busy > 0.05)
        rows_ix = np.asarray(rows)
        frame.busy[rows_ix, sl] = busy
        frame.load[rows_ix, sl] = busy * self.load_k
        frame.memact[rows_ix, sl] = busy * self.memact_k
        frame.pcie_rx[rows_ix, sl] = busy * rng.uniform(0.2e9, 1.0e9) + gaps * 0.3e9
        frame.pcie_tx[rows_ix, sl] = busy * rng.uniform(0.05e9, 0.4e9)
        frame.cores[sl] += (0.3 + self.cores_per_worker * busy).sum(axis=0)
        reads = (busy * self.read_per_worker + gaps * self.shard_read).sum(axis=0)
        if self.source == "disk":
            frame.disk[sl] += np.minimum(reads, node.shape.disk_max)
            frame.iowait[sl] += reads / node.shape.disk_max * 6
        else:
            frame.net[sl] += np.minimum(reads, node.shape.nic_max)
        frame.host_mem[sl] += R * 12 * hw.GIB
        for io in self.io:
            _io_host(frame, node, sl, io, rng)


@dataclass
class Replica:
    """One replica of a service: its GPUs (more than one under tensor parallelism) and its pod."""

    rows: list[int]
    pod: str
    active: list[tuple[float, float]]                 # deployed
    held: list[tuple[float, float]]                   # scaled in but the GPUs kept (rented, nothing running)
    restarts: list[tuple[float, float]] = field(default_factory=list)   # (exit, back) of the process
    leak: LeakPlan | None = None


class Service(Workload):
    """An inference service: independent replicas behind a load balancer, load following the daily tide
    of its users, very low at night."""

    kind = "serve"

    def __init__(self, name: str, tenant: str, node: Node, replicas: list[Replica], rng: np.random.Generator,
                 run: Run, shared_job: bool):
        super().__init__(name, tenant, run.t0 - 86400, run.t1 + 86400)
        self.node = node
        self.parts = [(node, sorted(r for rep in replicas for r in rep.rows))]
        self.replicas = replicas
        self.rng = rng
        self.shared_job = shared_job
        self.night = rng.uniform(0.04, 0.09) if rng.random() < 0.5 else rng.uniform(0.12, 0.3)
        self.peak = rng.uniform(0.5, 0.95)
        self.trough_h = rng.uniform(2.5, 5.5)
        self.sharp = rng.uniform(1.0, 2.2)
        self.weekend = rng.uniform(0.55, 0.9)
        self.waves = [(rng.uniform(0.03, 0.1), rng.uniform(900, 4 * 3600), rng.uniform(0, 2 * math.pi))
                      for _ in range(3)]
        self.load_k = rng.uniform(0.45, 0.75)
        self.memact_k = rng.uniform(0.55, 0.9)
        gpu = node.shape.gpu
        self.static = rng.random() < 0.55                  # engines that take a fixed share up front
        if self.static:
            self.hold = gpu.mem_total * rng.uniform(0.88, 0.95) - gpu.reserved
            self.weights, self.kv = self.hold, 0.0
        else:
            self.weights = gpu.mem_total * rng.uniform(0.25, 0.5)
            self.kv = gpu.mem_total * rng.uniform(0.15, 0.4)
        self.warm = rng.uniform(60, 240)
        self.rollouts: list[float] = []
        self._procs: list[Proc] = []

    def demand(self, t: np.ndarray) -> np.ndarray:
        """Busy share a replica sees, before second-scale burstiness."""
        loc = t + self.node.utc_offset * 3600
        h = (loc % 86400) / 3600
        weekday = (np.floor(loc / 86400) + 3) % 7
        s = (0.5 - 0.5 * np.cos(2 * np.pi * (h - self.trough_h) / 24)) ** self.sharp
        wk = np.where(weekday >= 5, self.weekend, 1.0)
        base = self.night + (self.peak - self.night) * s * wk
        slow = 1 + sum(a * np.sin(2 * np.pi * t / p + ph) for a, p, ph in self.waves)
        return np.clip(base * slow, 0.005, 0.97)

    def tenancy(self, node: Node) -> list[Tenancy]:
        if node.name != self.node.name:
            return []
        out: list[Tenancy] = []
        for rep in self.replicas:
            job = self.name if self.shared_job else rep.pod
            for r in rep.rows:
                out += [(r, a, b, self.tenant, job) for a, b in rep.active]
                out += [(r, a, b, self.tenant, None) for a, b in rep.held]
        return out

    def finalize(self, run: Run) -> None:
        rng = self.rng
        gpu = self.node.shape.gpu
        for at in self.rollouts:
            for j, rep in enumerate(self.replicas):
                t = at + j * rng.uniform(40, 120)
                rep.restarts.append((t, t + rng.uniform(15, 60)))
        for rep in self.replicas:
            lp = rep.leak
            if lp is not None:
                onset = lp.onset
                for _ in range(lp.cycles):
                    settled = self.weights
                    leak = Leak(onset, lp.rate, lp.period)
                    oom = leak.exhausts_at(gpu.mem_total - gpu.reserved - settled - 1 * MIB)
                    lp.episodes.append(LeakEpisode(self.name if self.shared_job else rep.pod, self.tenant,
                                                   self.node.pool, self.node.name, self.node.uuids[rep.rows[0]], -1,
                                                   onset, oom, lp.rate, "steps" if lp.period else "smooth",
                                                   lp.period, settled))
                    if oom >= run.t1:
                        break
                    back = oom + rng.uniform(10, 60)
                    rep.restarts.append((oom, back))
                    onset = back + self.warm + rng.uniform(300, 1500)
                    if onset >= run.t1 - 600:
                        break
            rep.restarts.sort()
            for a, b in rep.active:
                starts = [a] + [back for exit_, back in rep.restarts if a < exit_ < b]
                ends = [exit_ for exit_, back in rep.restarts if a < exit_ < b] + [b]
                for g0, g1 in zip(starts, ends):
                    leak_on = None
                    if lp is not None:
                        leak_on = next((e for e in lp.episodes if g0 <= e.onset < g1), None)
                    for r in rep.rows:
                        curve = MemCurve(g0, self.warm * 0.9, self.weights, 5)
                        if self.kv:
                            curve.follow = lambda t, kv=self.kv: kv * self.demand(t) / self.peak
                        pid = self.node.pids.next()
                        if leak_on is not None and r == rep.rows[0]:
                            curve.leak = Leak(leak_on.onset, leak_on.rate, leak_on.step_period)
                            leak_on.pid = pid
                        self._procs.append(Proc(pid, r, g0, g1, curve))

    def procs(self, node: Node) -> list[Proc]:
        return self._procs if node.name == self.node.name else []

    def render(self, frame: Frame, node: Node) -> None:
        if node.name != self.node.name:
            return
        rng = seeded(self.name, node.name, "render")
        sl = slice(0, frame.n)
        t = frame.t
        base = self.demand(t)
        for j, rep in enumerate(self.replicas):
            on = mask_of(frame, sl, rep.active)
            share = 1 + 0.08 * np.sin(2 * np.pi * t / rng.uniform(1800, 7200) + j)
            m = np.clip(base * share, 0.0, 0.97)
            k = 0.6 + 8 * m
            busy = np.clip(m * rng.gamma(k, 1 / k), 0, 1) * on
            warm = np.zeros(frame.n, dtype=bool)
            for a, _ in rep.active:
                warm |= mask_of(frame, sl, [(a, a + self.warm)])
            for a, b in rep.restarts:
                busy[mask_of(frame, sl, [(a, b)])] = 0.0
                warm |= mask_of(frame, sl, [(b, b + self.warm)])
            busy[warm] = 0.0
            for r in rep.rows:
                b_r = np.clip(busy * rng.normal(1.0, 0.02, frame.n), 0, 1)
                frame.busy[r] = b_r
                frame.load[r] = b_r * self.load_k
                frame.memact[r] = b_r * self.memact_k
                frame.pcie_rx[r] = b_r * 25e6 + warm * node.shape.gpu.pcie_gbs * 1e9 * 0.3
                frame.pcie_tx[r] = b_r * 12e6
            frame.cores += on * (0.5 + 3 * busy)
            frame.net += on * busy * 6e6
            frame.disk += warm * rng.uniform(0.5e9, 1.5e9)
            frame.host_mem += on * 24 * hw.GIB


class Notebook(Workload):
    """An interactive session on one GPU: long quiet stretches, short bursts when a cell runs."""

    kind = "notebook"

    def __init__(self, name: str, tenant: str, start: float, end: float, node: Node, row: int,
                 rng: np.random.Generator, avoid: tuple[float, float]):
        super().__init__(name, tenant, start, end)
        self.node = node
        self.parts = [(node, [row])]
        self.row = row
        self.bursts: list[tuple[float, float, float]] = []
        gpu = node.shape.gpu
        t = start + rng.uniform(30, 300)
        self.kernel_start = t
        steps: list[tuple[float, float]] = []
        held = 0.0
        while t < end:
            d = lognormal(rng, 60, 1.0, 8, 1200)
            self.bursts.append((t, min(end, t + d), rng.uniform(0.3, 1.0)))
            if rng.random() < 0.4 and held < 0.75 * gpu.mem_total:
                size = gpu.mem_total * rng.uniform(0.02, 0.15)
                steps.append((t, size))
                held += size
            elif rng.random() < 0.1 and held > 0:
                steps.append((t, -held * 0.5))
                held *= 0.5
            while True:
                gap = lognormal(rng, 420, 1.1, 40, 7200)
                if not avoid[0] < gap < avoid[1]:
                    break
            t += d + gap
        self.curve = MemCurve(self.kernel_start, 5.0, 500 * MIB, 1, steps)
        self._pid = 0

    def procs(self, node: Node) -> list[Proc]:
        if node.name != self.node.name:
            return []
        return [Proc(self._pid, self.row, self.kernel_start, self.end, self.curve)]

    def finalize(self, run: Run) -> None:
        self._pid = self.node.pids.next()

    def render(self, frame: Frame, node: Node) -> None:
        if node.name != self.node.name:
            return
        rng = seeded(self.name, "render")
        r = self.row
        for a, b, level in self.bursts:
            s = frame.span(a, b)
            k = s.stop - s.start
            if k <= 0:
                continue
            x = np.clip(level * rng.lognormal(0, 0.3, k), 0.05, 1.0)
            frame.busy[r, s] = x
            frame.load[r, s] = x * 0.7
            frame.memact[r, s] = x * 0.4
            frame.pcie_rx[r, s] = x * 0.3e9
            frame.pcie_tx[r, s] = x * 0.05e9
            frame.cores[s] += 0.5 + x * 1.5
        sl = frame.span(self.start, self.end)
        frame.host_mem[sl] += 6 * hw.GIB


class Reservation(Workload):
    """GPUs rented and left alone: nothing runs, or a process sits on memory doing nothing."""

    kind = "reserved"

    def __init__(self, name: str | None, tenant: str, start: float, end: float, node: Node, rows: list[int],
                 rng: np.random.Generator):
        super().__init__(name or "", tenant, start, end)
        self.job = name
        self.node = node
        self.parts = [(node, rows)]
        self.holder = rng.uniform(0.05, 0.6) * node.shape.gpu.mem_total if rng.random() < 0.4 else 0.0
        self._procs: list[Proc] = []

    def tenancy(self, node: Node) -> list[Tenancy]:
        return [(r, self.start, self.end, self.tenant, self.job) for r in self.rows(node)]

    def finalize(self, run: Run) -> None:
        if self.holder:
            for r in self.rows(self.node):
                self._procs.append(Proc(self.node.pids.next(), r, self.start + 20, self.end,
                                        MemCurve(self.start + 20, 30, self.holder, 2)))

    def procs(self, node: Node) -> list[Proc]:
        return self._procs if node.name == self.node.name else []


class BurnIn(Workload):
    """An operator's diagnostic or burn-in run on unrented GPUs: busy, but nobody's bill."""

    kind = "burnin"

    def __init__(self, name: str, start: float, end: float, node: Node, rows: list[int]):
        super().__init__(name, None, start, end)
        self.node = node
        self.parts = [(node, rows)]
        self._procs: list[Proc] = []

    def finalize(self, run: Run) -> None:
        gpu = self.node.shape.gpu
        for r in self.rows(self.node):
            self._procs.append(Proc(self.node.pids.next(), r, self.start, self.end,
                                    MemCurve(self.start, 10, gpu.mem_total * 0.6, 2)))

    def procs(self, node: Node) -> list[Proc]:
        return self._procs if node.name == self.node.name else []

    def render(self, frame: Frame, node: Node) -> None:
        if node.name != self.node.name:
            return
        s = frame.span(self.start, self.end)
        rows = np.asarray(self.rows(node))
        frame.busy[rows, s] = 0.99
        frame.load[rows, s] = 0.95
        frame.memact[rows, s] = 0.7
        frame.cores[s] += len(rows) * 1.0
