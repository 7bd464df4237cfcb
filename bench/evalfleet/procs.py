"""GPU processes and how their memory moves: warm-up at start, allocator caches that grow in a few steps
and hold, caches that follow load, and leaks that grow until the out-of-memory."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

MIB = 1 << 20


@dataclass
class Leak:
    """Memory that grows from ``onset`` at ``rate`` bytes/s, smoothly (``period`` 0) or one step of
    ``rate * period`` bytes right after ``onset`` and every ``period`` seconds after that."""

    onset: float
    rate: float
    period: float = 0.0

    def extra(self, t: np.ndarray) -> np.ndarray:
        dt = np.maximum(t - self.onset, 0.0)
        if self.period > 0:
            return np.ceil(dt / self.period) * self.rate * self.period
        return dt * self.rate

    def exhausts_at(self, headroom: float) -> float:
        """When the leak has taken ``headroom`` bytes (the allocation that fails)."""
        if self.period > 0:
            step = self.rate * self.period
            return self.onset + self.period * math.floor(headroom / step)
        return self.onset + headroom / self.rate


@dataclass
class MemCurve:
    """Bytes a process holds on its GPU over time."""

    start: float
    warmup: float                    # seconds from start to ``base``
    base: float                      # bytes once warmed up
    stairs: int = 4                  # the warm-up climbs in this many steps
    steps: list[tuple[float, float]] = field(default_factory=list)   # (when, bytes): caches that then hold
    leak: Leak | None = None
    follow: Callable[[np.ndarray], np.ndarray] | None = None         # extra bytes as a function of time

    def at(self, t: np.ndarray) -> np.ndarray:
        x = np.clip((t - self.start) / max(self.warmup, 1.0), 0.0, 1.0)
        ctx = min(self.base, 500 * MIB)
        m = ctx + (self.base - ctx) * np.ceil(x * self.stairs - 1e-9) / self.stairs
        for when, size in self.steps:
            m = m + np.where(t >= when, size, 0.0)
        if self.follow is not None:
            m = m + self.follow(t) * (x >= 1.0)
        if self.leak is not None:
            m = m + self.leak.extra(t)
        return m

    def settled(self) -> float:
        """Bytes held once the warm-up and every cache step are done (leak and load aside)."""
        return self.base + sum(size for _, size in self.steps)

    def settled_at(self) -> float:
        return max([self.start + self.warmup] + [when for when, _ in self.steps])


@dataclass
class Proc:
    """A compute process on one GPU of a node (``gpu`` is the index on the node)."""

    pid: int
    gpu: int
    start: float
    end: float
    mem: MemCurve


class Pids:
    """Process ids of one node: random, as Linux hands them out with a large pid_max, never reused."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.used: set[int] = set()

    def next(self) -> int:
        while True:
            pid = int(self.rng.integers(1200, 4_194_304))
            if pid not in self.used:
                self.used.add(pid)
                return pid
