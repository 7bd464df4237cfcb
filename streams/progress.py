"""Whether a worker is getting anywhere: each partition's committed offset against its end, as the broker has
them, and how often the agents restart.

A partition is *stuck* when its committed offset has not moved for ``worker.stuck_after_s`` while records wait
past it. That is the one thing an operator cannot see from inside: a worker can read a partition to its end (so
the consumer's own position says there is nothing left) and still never finish what it read, for example when an
agent crashes on a record and is restarted on the same offset again and again. The lag this module reports is
therefore the broker's end offset less the group's committed offset, never the consumer's position.

Records may wait legitimately: the last messages of a node that stops sending wait for the watermark until the
node is found silent (``stream.silent_after_s``), and the committed offset of its partition cannot pass them
meanwhile. ``worker.stuck_after_s`` is therefore longer than that by default.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Hashable

RESTART_WINDOW_S = 60.0       # restarts are counted over this long


class PartitionProgress:
    """Each partition's committed offset and end, and since when the committed offset has not moved while records
    waited past it."""

    def __init__(self, stuck_after_s: float) -> None:
        self.stuck_after_s = stuck_after_s
        self.offsets: dict[Hashable, tuple[int, int]] = {}     # partition -> (committed, end)
        self.since: dict[Hashable, float] = {}                  # partition -> when its committed offset last moved

    def observe(self, partition: Hashable, committed: int | None, end: int, now: float) -> None:
        """The broker says ``partition`` is committed at ``committed`` (None: never) and ends at ``end``."""
        done = committed or 0
        before = self.offsets.get(partition)
        if before is None or done != before[0] or done >= end:
            self.since[partition] = now           # moved, or nothing waits: not stuck
        self.offsets[partition] = (done, end)

    def forget(self, partitions) -> None:
        """Partitions no longer assigned: another worker's to report."""
        for p in partitions:
            self.offsets.pop(p, None)
            self.since.pop(p, None)

    def lag(self, partition: Hashable) -> int:
        done, end = self.offsets.get(partition, (0, 0))
        return max(0, end - done)

    def waiting_s(self, partition: Hashable, now: float) -> float:
        """How long records have waited past a committed offset that does not move (0: it moves, or none wait)."""
        if self.lag(partition) == 0:
            return 0.0
        return max(0.0, now - self.since.get(partition, now))

    def stuck(self, now: float) -> dict[Hashable, float]:
        """The partitions stuck now, with how long."""
        out = {}
        for p in self.offsets:
            waited = self.waiting_s(p, now)
            if waited >= self.stuck_after_s:
                out[p] = waited
        return out


class Restarts:
    """When each agent started; more than ``limit`` restarts within a minute (its first start is not one) is an
    agent that keeps crashing."""

    def __init__(self, limit: int, clock=time.monotonic) -> None:
        self.limit, self.clock = limit, clock
        self.starts: dict[str, deque[float]] = {}
        self.first: dict[str, float] = {}
        self.total: dict[str, int] = {}             # restarts since the process began

    def started(self, agent: str) -> None:
        now = self.clock()
        if agent in self.first:
            self.total[agent] = self.total.get(agent, 0) + 1
        else:
            self.first[agent] = now
        starts = self.starts.setdefault(agent, deque())
        starts.append(now)
        while now - starts[0] > RESTART_WINDOW_S:
            starts.popleft()

    def recent(self, agent: str) -> int:
        """Restarts of ``agent`` in the last minute."""
        now = self.clock()
        starts = [t for t in self.starts.get(agent, ()) if now - t <= RESTART_WINDOW_S]
        return len(starts) - (1 if starts and starts[0] == self.first.get(agent) else 0)

    def restarting(self) -> dict[str, int]:
        """The agents that restarted more than ``limit`` times in the last minute, with how many times."""
        return {a: n for a in self.starts if (n := self.recent(a)) > self.limit}
