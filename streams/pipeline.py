"""Validation, dead letters and per-node processing: the part both modes share.

``Pipeline.submit`` takes one raw message (JSON text, bytes or a dict) with a
``source`` such as ``file.jsonl:42`` or ``topic/3/1187``; bad input is
dead-lettered with its reason and counted, never raised. What the processors
produce collects in ``pipeline.out`` for the driver to drain.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from gpufleet.collectors.telemetry import Telemetry, TelemetryError, check_clock, parse

from .config import StreamConfig
from .eventtime import DUPLICATE, LATE
from .node import NodeProcessor
from .output import Output


class Pipeline:
    def __init__(self, cfg: StreamConfig | None = None, *, live: bool = False,
                 clock: Callable[[], float] = time.time):
        self.cfg = cfg or StreamConfig()
        self.live = live
        self.clock = clock
        self.nodes: dict[str, NodeProcessor] = {}
        self.out = Output()

    def submit(self, payload: str | bytes | dict, source: str) -> Telemetry | None:
        """Validate and process one message; returns it, or None if it was dead-lettered."""
        out = self.out
        out.counts["messages"] += 1
        try:
            msg = parse(payload)
            if self.live:
                check_clock(msg, self.clock(), self.cfg.max_clock_skew_s)
        except TelemetryError as err:
            out.dead_letter(err.reason_code, err.reason, source, self.clock(), payload)
            return None
        return self.push(msg, source, payload)

    def push(self, msg: Telemetry, source: str = "", payload=None) -> Telemetry | None:
        """Process one already validated message."""
        node = self.nodes.get(msg.node)
        if node is None:
            node = self.nodes[msg.node] = NodeProcessor(msg.node)
        status = node.push(msg, self.cfg, self.out)
        if status == DUPLICATE:
            self.out.counts["duplicates"] += 1
        elif status == LATE:
            behind = node.gate.watermark(self.cfg.lateness_s) - msg.ts
            self.out.dead_letter(
                "late", f"ts: {behind:.1f} s behind the watermark of node {msg.node} "
                        f"(allowed lateness {self.cfg.lateness_s:g} s)",
                source, self.clock(), payload if payload is not None else msg.to_json())
            return None
        return msg

    def flush(self) -> None:
        """End of input: every open window is closed and emitted."""
        for node in self.nodes.values():
            node.flush(self.cfg, self.out)
