"""Turns a plan into ``gpufleet.telemetry.v1`` messages, tick by tick."""
from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from gpufleet.contracts.telemetry import SCHEMA

from .fleet import Node
from .plan import HW_POWER_BRAKE, HW_SLOWDOWN, HW_THERMAL, SW_POWER_CAP, SW_THERMAL, Allocation, Fault, Planner, _tide

RESERVED = 0.006      # share of GPU memory the driver holds, as NVML reports it
CAUSE_BITS = {"thermal": SW_THERMAL | HW_THERMAL, "power_cap": SW_POWER_CAP,
              "power_brake": HW_POWER_BRAKE, "hw_slowdown": HW_SLOWDOWN, "host_slow": 0}


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


class _Cursor:
    """The allocation active on one GPU, advanced as time moves forward."""

    __slots__ = ("allocs", "i")

    def __init__(self, allocs: list[Allocation]):
        self.allocs, self.i = allocs, 0

    def at(self, t: float) -> Allocation | None:
        allocs = self.allocs
        while self.i < len(allocs) and allocs[self.i].end <= t:
            self.i += 1
        if self.i < len(allocs) and allocs[self.i].start <= t:
            return allocs[self.i]
        return None


class Sampler:
    def __init__(self, plan: Planner, seed: int):
        self.plan = plan
        self.rng = random.Random(seed * 7919 + 17)
        self.fleet: list[Node] = plan.fleet
        by_gpu: dict[tuple[int, int], list[Allocation]] = {}
        for a in plan.allocations:
            for m in a.members:
                by_gpu.setdefault(m, []).append(a)
        self.cursors = {m: _Cursor(sorted(v, key=lambda a: a.start)) for m, v in by_gpu.items()}
        self.faults_on: dict[tuple[int, int], list[Fault]] = {}
        self.peer_faults: dict[int, list[Fault]] = {}   # by id(alloc): stragglers slow the whole job
        self.node_io: dict[int, list[Fault]] = {}
        for f in plan.faults:
            if f.kind == "idle":
                continue
            for m in f.members:
                self.faults_on.setdefault(m, []).append(f)
            if f.kind == "straggler":
                self.peer_faults.setdefault(id(f.alloc), []).append(f)
            if f.kind == "io_starvation":
                self.node_io.setdefault(f.members[0][0], []).append(f)
        self.spells: dict[int, list[Fault]] = {}
        for f in getattr(plan, "spells", ()):
            self.spells.setdefault(id(f.alloc), []).append(f)
        self.seq = [0] * len(self.fleet)
        self.seed = seed
        self.memory_noise: dict[tuple[str, int, int], tuple[float, float, float, float]] = {}
        # some nodes cannot report every field (no host metrics, no PCIe counters, no throttle reasons): null
        blind_rng = random.Random(seed * 104729 + 3)
        self.blind = [frozenset(f for f, p in (("host", 0.05), ("pcie", 0.1), ("throttle", 0.05))
                                if blind_rng.random() < p) for _ in self.fleet]

    # -- one GPU -----------------------------------------------------------
    def _active(self, faults: list[Fault] | None, t: float) -> list[Fault]:
        return [f for f in faults or () if f.start <= t < f.end]

    def _noise(self, alloc: Allocation, n: int, g: int) -> tuple[float, float, float, float]:
        """How one process's memory moves besides its steps and KV cache: the allocator's noise (its standard
        deviation, a share of the GPU's memory) and a slow wave (amplitude, period, phase; a third of the
        processes, from buffers that come and go). Drawn per process from its own generator, so that the rest
        of the fleet does not change with them; wide on purpose, so that the leak trees learn growth against
        any noise, not against one."""
        key = (alloc.job, n, g)
        p = self.memory_noise.get(key)
        if p is None:
            r = random.Random(f"{self.seed}:{alloc.job}:{n}:{g}")
            sd = math.exp(r.uniform(math.log(1e-4), math.log(5e-3)))
            amp = math.exp(r.uniform(math.log(1e-3), math.log(2e-2))) if r.random() < 1 / 3 else 0.0
            p = self.memory_noise[key] = (sd, amp, r.uniform(300.0, 3600.0), r.uniform(0.0, 2 * math.pi))
        return p

    def _straggling(self, f: Fault, t: float) -> bool:
        if f.params["period_s"] <= 0:
            return True
        return ((t - f.start) % f.params["period_s"]) < f.params["duty"] * f.params["period_s"]

    def gpu(self, n: int, g: int, t: float, dt: float) -> tuple[dict, float, float]:
        """One GPU's fields at ``t``; also its host CPU load and disk reads."""
        self._writing = False
        rng, node = self.rng, self.fleet[n]
        model = node.model
        alloc = self.cursors[(n, g)].at(t) if (n, g) in self.cursors else None
        total = model.mem_total_bytes
        out: dict = {
            "uuid": node.uuids[g], "parent_uuid": None, "mig_profile": None, "index": g, "model": model.name,
            "tenant": None, "job": None, "attribution": None,
            "mem_total_bytes": total, "power_limit_w": model.power_limit_w,
            "sm_clock_max_mhz": model.sm_clock_max_mhz, "ecc_dbe_total": 0, "xid_events": [], "processes": [],
        }
        s = _Reading(pcie_rx=rng.uniform(0, 2e6), pcie_tx=rng.uniform(0, 1e6), mem_used=RESERVED * total)
        if alloc is not None:
            self._rented(out, s, alloc, _Tick(n, g, t, dt))
        if s.power_frac is None:
            s.power_frac = s.util / 100 * 0.85
        power_frac = s.power_frac
        idle_w, limit = model.idle_power_w, model.power_limit_w
        out["util_pct"] = round(_clip(s.util, 0, 100), 1)
        out["mem_util_pct"] = round(_clip(s.mem_util, 0, 100), 1)
        out["mem_used_bytes"] = round(min(s.mem_used, total))
        out["power_w"] = round(_clip(idle_w + (limit - idle_w) * power_frac + rng.gauss(0, 3), 0, limit * 1.02), 1)
        out["temp_c"] = round(32 + 38 * power_frac + s.temp_extra + rng.gauss(0, 1), 1)
        out["sm_clock_mhz"] = round(min(model.sm_clock_max_mhz, model.sm_clock_max_mhz * s.clock_frac), 0)
        blind = self.blind[n]
        out["pcie_rx_bytes_per_s"] = None if "pcie" in blind else round(max(s.pcie_rx, 0.0))
        out["pcie_tx_bytes_per_s"] = None if "pcie" in blind else round(max(s.pcie_tx, 0.0))
        out["throttle_reasons"] = None if "throttle" in blind else s.throttle
        return out, s.cpu, s.disk

    def _rented(self, out: dict, s: _Reading, alloc: Allocation, tick: _Tick) -> None:
        """A rented GPU: its tenant, its process's memory, its workload, and the faults on it or its job."""
        n, g, t, dt = tick
        out["tenant"], out["job"], out["attribution"] = alloc.tenant, alloc.job, "simulated"
        faults = self._active(self.faults_on.get((n, g)), t)
        alive = self._process(out, s, alloc, tick)
        s.util, s.mem_util, s.clock_frac, s.power_frac, s.cpu, s.disk, s.pcie_rx, s.pcie_tx = self._workload(
            alloc, n, t, alive, dt)
        for f in faults:
            if f.kind == "straggler" and s.util > 50 and self._straggling(f, t):
                _straggle(s, f)
            elif f.kind == "io_starvation" and alive:
                s.util, s.mem_util, s.power_frac, s.pcie_rx = self._starved(f, t, dt, s.util, s.power_frac,
                                                                            s.pcie_rx)
                s.clock_frac = max(s.clock_frac, 0.85)
        for f in self.peer_faults.get(id(alloc), ()):
            # peers wait for the straggler at every collective: less power, less busy
            if f.start <= t < f.end and (n, g) not in f.members and s.util > 50 and self._straggling(f, t):
                slow = f.params["slowdown"] * f.params.get("wait", 0.3)
                s.power_frac = (s.power_frac or 0.8) * (1 - 0.8 * slow)
                s.util = _clip(s.util * (1 - slow * self.rng.uniform(0.6, 1.0)), 0, 100)
        for f in self.spells.get(id(alloc), ()):
            if f.start <= t < f.end:
                # the whole job or service throttled alike: slower, but no GPU waits for another
                s.throttle |= CAUSE_BITS[f.params["cause"]]
                s.clock_frac *= 1 - f.params["slowdown"]
                if f.params["cause"] == "thermal":
                    s.temp_extra = 15 + 10 * f.params["slowdown"]
        if s.util > 50 and s.throttle == 0 and self.rng.random() < 0.01:
            s.throttle = SW_POWER_CAP      # healthy GPUs brush the power cap now and then

    def _process(self, out: dict, s: _Reading, alloc: Allocation, tick: _Tick) -> bool:
        """The job's process on the GPU: its memory (warming up, a KV cache, the allocator's noise, a leak that
        grows until the out-of-memory kill and the restart); returns whether it runs."""
        n, g, t, _ = tick
        total = self.fleet[n].model.mem_total_bytes
        proc = alloc.procs.get((n, g))
        alive, pid, leak_bytes = proc is not None, proc.pid if proc else 0, 0.0
        leak = self._last_leak(n, g, t)
        if leak is not None and leak.alloc is alloc:
            if t < leak.end:
                grown = t - leak.start
                stair = leak.params.get("stair_s") or 0.0
                if stair:                # some leaks grow in steps, each allocation kept
                    grown = (grown // stair) * stair
                leak_bytes = leak.params["rate_bytes_per_s"] * grown
            elif t < leak.end + leak.params["restart_s"]:
                alive = False            # killed by the out-of-memory, restarting
            else:
                pid += 1                 # the restarted process
        if alive and proc is not None:
            age = t - alloc.start
            warm = _clip(age / proc.warmup_s, 0.0, 1.0) if proc.warmup_s > 0 else 1.0
            held = proc.base_bytes * (0.15 + 0.85 * warm) + sum(b for at, b in proc.steps if at <= t)
            if alloc.kv_cache:       # a KV cache grows and shrinks with the load
                load = 0.25 + 0.75 * _tide(t, alloc.tide_peak_h)
                wave = 0.5 + 0.5 * math.sin(t / (300.0 + 37 * g))
                held += alloc.kv_cache * total * warm * load * (0.6 + 0.4 * wave)
            sd, amp, period, phase = self._noise(alloc, n, g)
            jitter = self.rng.gauss(0, sd * total)           # the allocator breathes
            if amp:
                held += amp * total * warm * (0.5 + 0.5 * math.sin(2 * math.pi * t / period + phase))
            pmem = _clip(held + leak_bytes + jitter, 0.0, total * (1 - RESERVED) - 1)
            s.mem_used += pmem
            out["processes"] = [{"pid": pid, "mem_used_bytes": round(pmem)}]
        return alive

    def _last_leak(self, n: int, g: int, t: float) -> Fault | None:
        last = None
        for f in self.faults_on.get((n, g), ()):
            if f.kind == "memory_leak" and f.start <= t and (last is None or f.start > last.start):
                last = f
        return last

    def _workload(self, a: Allocation, n: int, t: float, alive: bool, dt: float):
        """(util, mem_util, clock fraction, power fraction, host cpu, disk read, pcie rx, pcie tx)."""
        rng = self.rng
        if not alive or a.kind == "idle_rental":
            return rng.uniform(0, 1.5), 0.0, rng.uniform(0.1, 0.3), 0.02, rng.uniform(0, 0.5), 0.0, \
                rng.uniform(0, 2e6), rng.uniform(0, 1e6)
        age = t - a.start
        if a.kind == "training":
            warm = _clip(age / 300.0, 0.05, 1.0)
            if a.checkpoint_every_s and age % a.checkpoint_every_s < a.checkpoint_len_s and age > a.checkpoint_len_s:
                self._writing = True         # the checkpoint is written to disk: iowait, but few reads
                return rng.uniform(0, 4), rng.uniform(0, 3), rng.uniform(0.3, 0.9), 0.08, 8.0, \
                    rng.uniform(1e6, 2e7), rng.uniform(0, 5e6), rng.uniform(1e8, 5e8)
            if a.eval_every_s and age % a.eval_every_s < a.eval_len_s and age > a.eval_len_s:
                u = _clip(55 + rng.gauss(0, 8), 0, 100)
                return u, u * 0.5, 0.97, 0.5, 20.0, rng.uniform(5e7, 2e8), rng.uniform(5e8, 2e9), rng.uniform(1e8, 5e8)
            if any(h <= t < h + 15 and hn == n for h, hn in a.hiccups):
                u = rng.uniform(15, 45)
                return u, u * 0.4, 0.9, 0.35, 35.0, rng.uniform(1e8, 4e8), rng.uniform(2e8, 1e9), rng.uniform(1e8, 5e8)
            u = _clip(100 * a.level * warm + rng.gauss(0, 1.5), 0, 100)
            return u, 35 + 20 * warm + rng.gauss(0, 3), _clip(0.985 + rng.gauss(0, 0.008), 0.9, 1.0), \
                _clip(0.8 * warm + rng.gauss(0, 0.03), 0.05, 1.0), 40.0, rng.uniform(1e8, 4e8), \
                rng.uniform(3e9, 6e9) * warm, rng.uniform(5e8, 1.5e9) * warm
        if a.kind == "inference":
            tide = _tide(t, a.tide_peak_h)
            u = _clip(100 * a.level * (0.25 + 0.75 * tide) + rng.gauss(0, 4), 2, 100)
            # a lightly loaded GPU parks its clock; under load it boosts
            clock = _clip(0.95 + rng.gauss(0, 0.02), 0.5, 1.0) if u > 30 or rng.random() < 0.5 else \
                _clip(0.3 + 0.6 * u / 30 + rng.gauss(0, 0.05), 0.15, 1.0)
            return u, 25 + 0.4 * u, clock, u / 100 * 0.8, 15.0 + u / 10, \
                rng.uniform(1e6, 2e7), 2e7 + 4e7 * u / 100, 1e7 + 3e7 * u / 100
        # notebook
        if any(s <= t < e for s, e in a.bursts):
            u = _clip(rng.uniform(30, 100), 0, 100)
            return u, 0.5 * u, 0.95, u / 100 * 0.75, 25.0, rng.uniform(1e6, 5e7), rng.uniform(1e8, 1e9), 1e7
        return rng.uniform(0, 2.5), rng.uniform(0, 1), rng.uniform(0.1, 0.4), 0.03, rng.uniform(0.5, 3), \
            rng.uniform(0, 1e6), rng.uniform(0, 2e6), rng.uniform(0, 1e6)

    def _starved(self, f: Fault, t: float, dt: float, util: float, power_frac, pcie_rx):
        """Saw-tooth: a short burst each time a batch arrives, then waiting on reads. While a batch is in, the GPU
        computes at the pace it has unstarved (``util``): a starved GPU is never busier than it would be fed, so
        a lightly loaded service falls a little, a training job a lot."""
        period, duty = f.params["period_s"], f.params["duty"]
        # share of the last interval the GPU spent computing
        busy, steps = 0.0, 10
        for k in range(steps):
            x = (t - dt + (k + 0.5) * dt / steps - f.start) % period
            busy += x < duty * period
        busy /= steps
        u = _clip(busy * util * self.rng.uniform(0.92, 1.0) + self.rng.gauss(0, 2), 0.0, 100.0)
        u = max(u, min(util, 6.0 + self.rng.uniform(0, 3))) if busy > 0 else u
        return u, 0.4 * u, 0.1 + 0.7 * u / 100, pcie_rx * 0.15

    # -- one tick ----------------------------------------------------------
    def messages(self, start: float, end: float, dt: float) -> Iterator[dict]:
        rng = self.rng
        order = sorted(range(len(self.fleet)), key=lambda i: (self.fleet[i].phase_s, i))
        k = 0
        while True:
            base = start + k * dt
            if base >= end:
                return
            for n in order:
                node = self.fleet[n]
                t = round(base + node.phase_s + rng.uniform(0, 0.02), 3)
                gpus, cpu, disk = [], 2.0, rng.uniform(1e6, 2e7)
                writing = False
                for g in range(len(node.uuids)):
                    s, c, d = self.gpu(n, g, t, dt)
                    gpus.append(s)
                    cpu += c / len(node.uuids)
                    disk += d
                    writing = writing or self._writing
                iowait = rng.uniform(0.2, 2.0) + (rng.uniform(5, 25) if writing else 0.0)
                net = rng.uniform(1e6, 1e7)
                for f in self.node_io.get(n, ()):
                    if f.start <= t < f.end:
                        source = f.params.get("source", "disk")
                        if source == "disk":
                            iowait += rng.uniform(25, 60) * (1 - f.params["duty"])
                            disk += rng.uniform(1.2e9, 3e9)
                        elif source == "network":      # network storage or an object store: few local reads
                            iowait += rng.uniform(0, 6)
                            net += rng.uniform(1.2e9, 4e9)
                        else:                          # the input pipeline on the host: CPUs saturated
                            cpu = max(cpu, rng.uniform(93, 100))
                if node.training:
                    net += sum(1 for x in gpus if x["util_pct"] > 50) * 2.5e8
                used_frac = 0.08 + 0.4 * cpu / 100
                msg = {
                    "schema": SCHEMA, "ts": t, "node": node.name,
                    "collector_id": f"sim-{node.name}", "seq": self.seq[n], "interval_s": dt,
                    "pool": node.pool, "dropped": 0,
                    "host": None if "host" in self.blind[n] else {
                        "cpu_util_pct": round(_clip(cpu + rng.gauss(0, 1.5), 0, 100), 1),
                        "iowait_pct": round(_clip(iowait, 0, 100), 1),
                        "disk_read_bytes_per_s": round(disk),
                        "net_rx_bytes_per_s": round(net),
                        "mem_used_bytes": round(node.mem_total_bytes * used_frac),
                        "mem_total_bytes": node.mem_total_bytes,
                    },
                    "gpus": gpus,
                }
                self.seq[n] += 1
                yield msg
            k += 1


class _Tick(NamedTuple):
    """Which GPU is sampled, and when: node, GPU, time, the interval since the last sample."""

    n: int
    g: int
    t: float
    dt: float


@dataclass(slots=True)
class _Reading:
    """What one GPU's sample reads, as the faults bend it."""

    pcie_rx: float
    pcie_tx: float
    mem_used: float
    util: float = 0.0
    mem_util: float = 0.0
    clock_frac: float = 0.25
    throttle: int = 0
    cpu: float = 0.0
    disk: float = 0.0
    temp_extra: float = 0.0
    power_frac: float | None = None


def _straggle(s: _Reading, f: Fault) -> None:
    """A straggling GPU, by its cause."""
    slow, cause = f.params["slowdown"], f.params["cause"]
    s.throttle |= CAUSE_BITS[cause]
    if cause == "host_slow":
        # its host feeds it slowly: clocks are fine, it computes less of the time
        s.util *= 1 - slow
        s.power_frac = (s.power_frac or 0.8) * (1 - 0.6 * slow)
        return
    s.clock_frac *= 1 - slow
    if cause == "thermal":
        s.temp_extra = 18 + 10 * slow
    elif cause == "power_brake":
        s.power_frac = (s.power_frac or 0.8) * (1 - 0.8 * slow)
    elif cause == "power_cap":
        s.power_frac = 0.99
