"""The fleet's shape: regions, pools, nodes and their collectors."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .hardware import NodeShape
from .procs import Pids

HOUR = 3600.0


@dataclass(frozen=True)
class Run:
    """The time range written, and the seed everything is drawn from."""

    t0: float
    t1: float
    seed: int


@dataclass
class Node:
    """A GPU server and its collector."""

    name: str
    pool: str
    region: str
    utc_offset: float        # hours, for the daily tide of its users
    rack: str
    shape: NodeShape
    role: str                # train, batch, serve, dev: what the capacity is sold for
    interval: int            # collector sampling interval, s
    phase: float             # first tick at run start + phase
    has_host: bool           # host metrics readable (no: `host` is null)
    has_pcie: bool           # NVML PCIe throughput supported
    has_throttle: bool       # NVML clocks-event reasons supported
    drop_every: float        # mean messages between single lost messages, 0 = none lost
    restarts: list[tuple[float, float]]   # collector restarts: (at, seconds without telemetry)
    uuids: list[str]
    inlet_c: float
    gpu_dt: list[float]      # per-GPU temperature offset (position in the chassis)
    ecc: list[int]           # volatile double-bit ECC count per GPU (constant over the run)
    host_base: dict[str, float]
    seed: int
    pids: Pids = field(repr=False)

    @property
    def gpus(self) -> int:
        return self.shape.gpus


def gpu_uuid(rng: np.random.Generator) -> str:
    h = "".join(f"{b:02x}" for b in rng.integers(0, 256, 16))
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def hexid(rng: np.random.Generator, n: int = 6) -> str:
    return "".join("0123456789abcdef"[int(i)] for i in rng.integers(0, 16, n))


def lognormal(rng: np.random.Generator, median: float, sigma: float, lo: float, hi: float) -> float:
    return float(np.clip(median * np.exp(rng.normal(0.0, sigma)), lo, hi))
