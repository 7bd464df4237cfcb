"""Injected faults and the ground truth they produce.

Each fault knows what it does (the workloads read it while rendering) and writes its own label. Idle
stretches are not injected: they are found on the written samples by the idle rule (``idle.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import hardware as hw

# cause -> (level, how the slow member spends its extra time, clocks-event reasons while it is slowed)
STRAGGLER_CAUSES: dict[str, tuple[str, str, int]] = {
    "thermal": ("gpu", "compute", hw.SW_THERMAL),
    "power_brake": ("gpu", "compute", hw.HW_POWER_BRAKE | hw.HW_SLOWDOWN),
    "hw_slowdown": ("gpu", "compute", hw.HW_SLOWDOWN),
    "pcie_link": ("gpu", "transfer", 0),
    "nvlink": ("gpu", "transfer", 0),
    "slow_cpu": ("gpu", "host", 0),
    "node_thermal": ("node", "compute", hw.SW_THERMAL),
    "node_power_brake": ("node", "compute", hw.HW_POWER_BRAKE | hw.HW_SLOWDOWN),
    "node_cpu": ("node", "host", 0),
    "node_network": ("node", "transfer", 0),
}


@dataclass
class Straggler:
    """Some GPUs of a synchronous job take longer per step; the rest of the job waits for them."""

    job: str
    tenant: str | None
    pool: str | None
    node: str
    rows: list[int]
    uuids: list[str]
    cause: str
    start: float
    end: float
    slowdown: float                      # step time increase while it is on
    on: list[tuple[float, float]]        # when it is on (one span when steady)
    pattern: str                         # steady | intermittent
    pcie_factor: float = 1.0             # share of the usual PCIe rate left on a degraded link
    hot_margin: float = 2.0              # °C above the slowdown temperature while throttled

    @property
    def level(self) -> str:
        return STRAGGLER_CAUSES[self.cause][0]

    @property
    def kind(self) -> str:
        return STRAGGLER_CAUSES[self.cause][1]

    @property
    def bits(self) -> int:
        return STRAGGLER_CAUSES[self.cause][2]

    def duty(self) -> float:
        return sum(b - a for a, b in self.on) / max(self.end - self.start, 1e-9)

    def label(self, t_end: float) -> dict:
        gpu = self.level == "gpu"
        return {"kind": "straggler", "level": self.level, "node": self.node,
                "gpu_uuid": self.uuids[0] if gpu else None, "gpus": list(self.uuids), "job": self.job,
                "tenant": self.tenant, "pool": self.pool, "start": round(self.start, 3),
                "end": round(min(self.end, t_end), 3), "cause": self.cause,
                "slowdown": round(self.slowdown, 3), "pattern": self.pattern, "duty": round(self.duty(), 3)}


@dataclass
class JobSlowdown:
    """Not a fault of one member: every GPU of a job throttled alike (a hot row, a facility power event)."""

    start: float
    end: float
    slowdown: float
    bits: int
    hot: bool


@dataclass
class IoStarvation:
    """A job's GPUs on one node wait for input."""

    job: str
    tenant: str | None
    pool: str | None
    node: str
    rows: list[int]
    uuids: list[str]
    start: float
    end: float
    source: str                          # disk | network | cpu
    storage: str                         # local_nvme, nfs, object_store, host_pipeline
    severity: float                      # share of the time the GPUs wait
    shape: str                           # sawtooth | irregular
    period: float                        # seconds per saw-tooth, or mean burst length when irregular
    level: dict = field(default_factory=dict)   # host levels drawn for this episode

    def label(self, t_end: float) -> dict:
        return {"kind": "io_starvation", "level": "job", "node": self.node, "gpu_uuid": None,
                "gpus": list(self.uuids), "job": self.job, "tenant": self.tenant, "pool": self.pool,
                "start": round(self.start, 3), "end": round(min(self.end, t_end), 3), "source": self.source,
                "storage": self.storage, "severity": round(self.severity, 3), "shape": self.shape}


@dataclass
class LeakEpisode:
    """One process leaking until its out-of-memory (or past the end of the run)."""

    job: str | None
    tenant: str | None
    pool: str | None
    node: str
    uuid: str
    pid: int
    onset: float
    oom_at: float
    rate: float
    pattern: str                         # smooth | steps
    step_period: float
    settled_bytes: float

    def label(self, t_end: float) -> dict:
        return {"kind": "memory_leak", "level": "gpu", "node": self.node, "gpu_uuid": self.uuid,
                "gpus": [self.uuid], "job": self.job, "tenant": self.tenant, "pool": self.pool,
                "start": round(self.onset, 3), "end": round(min(self.oom_at, t_end), 3),
                "oom_at": round(self.oom_at, 3), "reaches_oom": self.oom_at <= t_end,
                "rate_bytes_per_s": round(self.rate, 1), "pid": self.pid, "pattern": self.pattern,
                "step_period_s": round(self.step_period, 1), "baseline_bytes": int(self.settled_bytes)}
