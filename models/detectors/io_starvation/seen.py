"""What one epoch showed of a job on a node: the evidence starvation's rules and page read."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..base import WINDOW_S, Seen
from .constants import SECONDS_PER_MINUTE


@dataclass(slots=True, kw_only=True)
class StarvedSeen(Seen):
    target: str = ""                 # node/job
    gpus: int = 0                    # the job's GPUs on the node
    util: float = 0.0                # their mean utilization, %
    iowait: float = 0.0              # the host's, %
    disk: float = 0.0                # disk reads, GB/s
    net: float = 0.0                 # network receive, GB/s
    cpu: float = 0.0                 # the host's CPUs busy, %
    cause: str = "disk"              # the input path the evidence names (wording.cause)
    also_seen: list[str] = field(default_factory=list)      # the other paths that showed
    window_min: float = WINDOW_S / SECONDS_PER_MINUTE       # the window's span

    def lookback_s(self) -> float:
        return self.window_min * SECONDS_PER_MINUTE         # starved since its first starved window began


SEEN = StarvedSeen
