"""What one minute showed of a GPU's process: the evidence a leak's rules and page read."""
from __future__ import annotations

from dataclasses import dataclass

from ..base import Seen


@dataclass(slots=True, kw_only=True)
class LeakSeen(Seen):
    index: int = 0                   # the GPU's index on its node
    pid: int | None = None           # the process that grows
    rate_gb_h: float = 0.0           # its growth, GB an hour
    used_gb: float = 0.0
    total_gb: float = 0.0
    to_oom_min: float = float("inf")     # minutes to the out-of-memory at the nearer rate
    rate_over_min: int | None = None     # the minutes that rate was measured over (None: the 30-minute slope)
    shared: bool = False             # other jobs' GPUs on the node grow with it (rules.shared)
    runaway: bool = False            # rising every minute to the OOM (features.runaway)

    def lookback_s(self) -> float:
        return (self.rate_over_min or 0) * 60.0     # growing over the minutes its rate was measured over


SEEN = LeakSeen
