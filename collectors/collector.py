"""One node's telemetry message per tick: NVML, /proc and attribution put together."""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from gpufleet.contracts.telemetry import SCHEMA

from .attribution import Attributor
from .host import HostSampler
from .nvml import NvmlReader


class Collector:
    def __init__(self, node: str, gpus: NvmlReader, host: HostSampler | None = None,
                 attributor: Attributor | None = None, *, pool: str | None = None, interval_s: float = 5.0,
                 clock: Callable[[], float] = time.time):
        self.node, self.gpus, self.host, self.attributor = node, gpus, host, attributor
        self.pool, self.interval_s, self.clock = pool, interval_s, clock
        self.collector_id = f"{node}-{uuid.uuid4().hex[:12]}"   # new for every process start
        self.seq = 0

    def collect(self, dropped: int = 0) -> dict:
        """Sample everything now; ``dropped`` is what the spool lost since the last message."""
        ts = self.clock()
        gpus = self.gpus.read()
        if self.attributor is not None:
            self.attributor.refresh()
            for g in gpus:
                g["tenant"], g["job"], g["attribution"] = self.attributor.attribute(
                    g["uuid"], [p["pid"] for p in g["processes"]])
        else:
            for g in gpus:
                g["tenant"] = g["job"] = g["attribution"] = None
        msg = {"schema": SCHEMA, "ts": round(ts, 3), "node": self.node, "collector_id": self.collector_id,
               "seq": self.seq, "interval_s": self.interval_s, "pool": self.pool, "dropped": dropped,
               "host": self.host.sample() if self.host is not None else None, "gpus": gpus}
        self.seq += 1
        return msg
