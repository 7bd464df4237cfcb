"""One node's state, second by second, over the whole run, and small array helpers.

Workloads write what their GPUs and the host do in each second (how busy, how hard, what limits the
clock, what the host reads); the physics and the sampling turn that into what a collector would read.
Second ``s`` covers ``[t0 + s, t0 + s + 1)``.
"""
from __future__ import annotations

import math

import numpy as np


class Frame:
    """Per-second arrays of one node: rows are GPUs, columns seconds."""

    def __init__(self, t0: float, seconds: int, gpus: int):
        self.t0 = t0
        self.n = seconds
        self.t = t0 + np.arange(seconds, dtype=np.float64)
        shape = (gpus, seconds)
        self.busy = np.zeros(shape)         # share of the second a kernel ran (NVML utilization.gpu)
        self.load = np.zeros(shape)         # how hard the SMs worked, 1 = a dense kernel mix (drives power)
        self.memact = np.zeros(shape)       # share of the second memory was read or written
        self.clock = np.ones(shape)         # clock factor imposed by faults and events (1 = none)
        self.bits = np.zeros(shape, dtype=np.int64)   # clocks-event reasons raised by faults and events
        self.hot = np.zeros(shape)          # a temperature the GPU is held at or above (0 = none)
        self.pcie_rx = np.zeros(shape)      # bytes/s
        self.pcie_tx = np.zeros(shape)
        self.cores = np.zeros(seconds)      # host CPUs in use
        self.iowait = np.zeros(seconds)     # percent
        self.disk = np.zeros(seconds)       # bytes/s read from local disks
        self.net = np.zeros(seconds)        # bytes/s received on the front-end network
        self.host_mem = np.zeros(seconds)   # bytes

    def index(self, t: float) -> int:
        return min(self.n, max(0, math.ceil(t - self.t0 - 1e-9)))

    def span(self, a: float, b: float) -> slice:
        """The seconds that start in ``[a, b)``."""
        return slice(self.index(a), self.index(b))


def trailing_mean(x: np.ndarray, width: int) -> np.ndarray:
    """Mean over the last ``width`` seconds (fewer at the start), along the last axis."""
    c = np.cumsum(x, axis=-1)
    out = c.copy()
    out[..., width:] = c[..., width:] - c[..., :-width]
    counts = np.minimum(np.arange(1, x.shape[-1] + 1), width)
    return out / counts


def ema(x: np.ndarray, tau: float, first: np.ndarray | float | None = None) -> np.ndarray:
    """First-order lag with time constant ``tau`` seconds, along the last axis, vectorised by blocks."""
    a = math.exp(-1.0 / tau)
    block = max(1, int(tau * 8))
    out = np.empty_like(x, dtype=np.float64)
    prev = np.asarray(x[..., 0] if first is None else first, dtype=np.float64)
    for b0 in range(0, x.shape[-1], block):
        xb = x[..., b0:b0 + block]
        j = np.arange(xb.shape[-1])
        grow = a ** -(j + 1.0)
        acc = np.cumsum(xb * grow, axis=-1) * (1 - a)
        yb = (prev[..., None] + acc) / grow
        out[..., b0:b0 + block] = yb
        prev = yb[..., -1]
    return out


def on_off(rng: np.random.Generator, a: float, b: float, on_mean: float, off_mean: float) -> list[tuple[float, float]]:
    """Alternating on and off stretches in ``[a, b)``, exponential lengths, starting on."""
    out: list[tuple[float, float]] = []
    t = a
    while t < b:
        on = max(5.0, rng.exponential(on_mean))
        out.append((t, min(b, t + on)))
        t += on + max(5.0, rng.exponential(off_mean))
    return out


def mask_of(frame: Frame, sl: slice, spans: list[tuple[float, float]]) -> np.ndarray:
    """Boolean mask over ``frame`` seconds in ``sl`` that fall in any of ``spans``."""
    m = np.zeros(sl.stop - sl.start, dtype=bool)
    for a, b in spans:
        s = frame.span(a, b)
        lo, hi = max(s.start, sl.start), min(s.stop, sl.stop)
        if hi > lo:
            m[lo - sl.start:hi - sl.start] = True
    return m
