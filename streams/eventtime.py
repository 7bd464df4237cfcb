"""Event time for one node: watermark, allowed lateness, duplicates and reordering.

The watermark is the node's newest ``ts`` minus the allowed lateness. Messages
wait in a small buffer until the watermark passes them and are then released in
``ts`` order, so every processor downstream sees each node's samples ordered
and exactly once, whatever the arrival order within the lateness. A message
older than the watermark is a duplicate if its time was already released
(remembered for ``dedup_horizon_s``), and late otherwise.
"""
from __future__ import annotations

from collections import deque

from gpufleet.collectors.telemetry import Telemetry

ACCEPTED, DUPLICATE, LATE = "accepted", "duplicate", "late"


class Gate:
    __slots__ = ("max_ts", "pending", "released", "_released_order")

    def __init__(self):
        self.max_ts: float | None = None
        self.pending: dict[float, Telemetry] = {}
        self.released: set[float] = set()
        self._released_order: deque[float] = deque()

    def watermark(self, lateness_s: float) -> float | None:
        return None if self.max_ts is None else self.max_ts - lateness_s

    def push(self, msg: Telemetry, lateness_s: float, horizon_s: float) -> tuple[str, list[Telemetry]]:
        """Admit one message; returns its status and the messages now released, in ts order."""
        ts = msg.ts
        if self.max_ts is not None and ts < self.max_ts - lateness_s:
            return (DUPLICATE if ts in self.released else LATE), []
        held = self.pending.get(ts)
        if held is not None:
            known = {g.uuid for g in held.gpus}
            new = [g for g in msg.gpus if g.uuid not in known]
            if not new:
                return DUPLICATE, []
            self.pending[ts] = held.model_copy(update={"gpus": [*held.gpus, *new]})
            return ACCEPTED, []
        self.pending[ts] = msg
        if self.max_ts is None or ts > self.max_ts:
            self.max_ts = ts
            return ACCEPTED, self._release(ts - lateness_s, horizon_s)
        return ACCEPTED, []

    def drain(self) -> list[Telemetry]:
        """End of input: release everything still waiting."""
        return self._release(float("inf"), float("inf"))

    def _release(self, watermark: float, horizon_s: float) -> list[Telemetry]:
        pending = self.pending
        if len(pending) == 1:
            (ts,) = pending
            ready = [ts] if ts < watermark else []
        else:
            ready = sorted(t for t in pending if t < watermark)
        out = [pending.pop(t) for t in ready]
        released, order = self.released, self._released_order
        released.update(ready)
        order.extend(ready)
        if watermark != float("inf"):
            forget = watermark - horizon_s
            while order and order[0] < forget:
                released.discard(order.popleft())
        return out
