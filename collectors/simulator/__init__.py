"""A simulated GPU fleet on a simulated clock, deterministic for a seed.

N nodes x G GPUs in pools, rented to tenants for multi-node training (with
checkpoint pauses and evaluation phases that every peer shares), inference that
follows a daily tide, bursty notebooks, GPUs rented but left idle, and unrented
GPUs. Faults are injected with their ground truth: straggler GPUs or nodes, IO
starvation, and memory leaks that end in an out-of-memory and a restart.

    sim = Simulation(FleetSpec(nodes=8, gpus_per_node=8, hours=6, seed=1))
    for message in sim.messages(): ...        # gpufleet.telemetry.v1 dicts, in ts order
    sim.labels()                              # ground truth, one dict per fault
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from .fleet import layout
from .plan import Planner
from .sampler import Sampler

DEFAULT_START = 1767571200.0  # 2026-01-05 00:00:00 UTC, a Monday


@dataclass(frozen=True)
class FleetSpec:
    nodes: int = 8
    gpus_per_node: int = 8
    hours: float = 6.0
    interval_s: float = 5.0
    seed: int = 1
    faults_per_kind: int = 2
    start: float = DEFAULT_START
    idle_window_s: float = 600.0
    training_share: float = 0.5

    # the range of each setting, inclusive
    RANGES: ClassVar[dict[str, tuple[float, float]]] = {
        "nodes": (1, 100_000), "gpus_per_node": (1, 64), "hours": (0.001, 24 * 366), "interval_s": (0.1, 600),
        "faults_per_kind": (0, 100_000), "training_share": (0, 1), "idle_window_s": (1, 7 * 86400)}

    def __post_init__(self):
        for name, (lo, hi) in self.RANGES.items():
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise ValueError(f"{name}: {value!r} is out of range: it must be between {lo:g} and {hi:g}")

    @property
    def end(self) -> float:
        return self.start + self.hours * 3600.0

    @property
    def ticks(self) -> int:
        return int(self.hours * 3600.0 / self.interval_s)

    @property
    def messages_total(self) -> int:
        return self.ticks * self.nodes


class Simulation:
    def __init__(self, spec: FleetSpec):
        self.spec = spec
        rng = random.Random(spec.seed)
        self.fleet = layout(spec.nodes, spec.gpus_per_node, spec.seed, spec.interval_s, rng)
        self.plan = Planner(self.fleet, spec.start, spec.end, spec.interval_s, spec.idle_window_s, rng)
        self.plan.plan_rentals(spec.training_share)
        self.plan.plan_faults(spec.faults_per_kind)

    def messages(self) -> Iterator[dict]:
        """Every node's message at every tick, in ts order."""
        return Sampler(self.plan, self.spec.seed).messages(self.spec.start, self.spec.end, self.spec.interval_s)

    def labels(self) -> list[dict]:
        """Ground truth: one dict per injected fault (and per planned idle stretch), by start."""
        out = [f.label(self.fleet) for f in self.plan.faults]
        return sorted(out, key=lambda d: (d["start"], d["kind"], d["node"], d["gpu_uuid"] or ""))
