"""What one epoch showed of a GPU (or a whole node) of a job against its peers: the evidence a straggler's
rules and page read."""
from __future__ import annotations

from dataclasses import dataclass

from ..base import WINDOW_S, Seen


@dataclass(slots=True, kw_only=True)
class StragglerSeen(Seen):
    target: str = ""                 # the GPU's uuid, or the node
    level: str = "gpu"               # "gpu", or "node": a whole node against the job's other nodes
    index: int | None = None         # the GPU's index on its node (a GPU's)
    gpus: int = 0                    # the node's GPUs in the job (a node's)
    peers: int = 0                   # GPUs (nodes) it is held against
    independent: bool = False        # the job's GPUs do independent work: nobody waits (not judged)
    paused: bool = True              # the job's GPUs were seen pausing together (rules.paused_together_of)
    window_s: float = WINDOW_S       # the window's span
    bits: int = 0                    # the throttle reasons reported in the window, together
    slowdown: float = 0.0            # how far behind its peers, a share
    clock: float = float("nan")      # SM clock, a share of its maximum (NaN: not reported)
    peer_clock: float = float("nan")
    util: float = float("nan")       # utilization, %
    peer_util: float = float("nan")
    power: float = float("nan")      # power, a share of its limit
    peer_power: float = float("nan")
    throttled: float = 0.0           # share of the window throttled (not at the power cap)
    capped: float = 0.0              # share of the window at the power cap
    limit: float | None = None       # power limit, W (None: not reported)
    peer_limit: float | None = None

    def lookback_s(self) -> float:
        return self.window_s         # slow since the start of its first slow window


SEEN = StragglerSeen
