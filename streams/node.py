"""Everything the stream keeps for one node, fed with that node's messages."""
from __future__ import annotations

from gpufleet.collectors.telemetry import Telemetry

from .config import StreamConfig
from .eventtime import Gate
from .idle import IdleTracker
from .output import Output
from .rollups import MinuteRollups
from .samples import sample_rows


class NodeProcessor:
    __slots__ = ("name", "gate", "rollups", "idle")

    def __init__(self, name: str):
        self.name = name
        self.gate = Gate()
        self.rollups = MinuteRollups()
        self.idle = IdleTracker()

    def push(self, msg: Telemetry, cfg: StreamConfig, out: Output) -> str:
        """Admit one message (any order within the lateness); process what the watermark releases."""
        status, ready = self.gate.push(msg, cfg.lateness_s, cfg.dedup_horizon_s)
        for m in ready:
            self._process(m, cfg, out)
        return status

    def _process(self, msg: Telemetry, cfg: StreamConfig, out: Output) -> None:
        out.counts["gpu_samples"] += len(msg.gpus)
        if cfg.raw_samples:
            sample_rows(msg, out)
        self.rollups.add(msg, out)
        self.idle.add(msg, cfg, out)

    def flush(self, cfg: StreamConfig, out: Output) -> None:
        """End of input: process what is waiting and close every open window."""
        for m in self.gate.drain():
            self._process(m, cfg, out)
        self.rollups.close(self.name, out)
        self.idle.flush(self.name, out)
