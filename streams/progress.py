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

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("gpufleet.worker")

RESTART_WINDOW_S = 60.0       # restarts are counted over this long


class PartitionProgress:
    """Each partition's committed offset and end, and since when the committed offset has not moved while records
    waited past it."""

    def __init__(self, stuck_after_s: float) -> None:
        self.stuck_after_s = stuck_after_s
        self.offsets: dict[Sequence, tuple[int, int]] = {}     # partition -> (committed, end)
        self.since: dict[Sequence, float] = {}                  # partition -> when its committed offset last moved

    def observe(self, partition: Sequence, committed: int | None, end: int, now: float) -> None:
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

    def lag(self, partition: Sequence) -> int:
        done, end = self.offsets.get(partition, (0, 0))
        return max(0, end - done)

    def waiting_s(self, partition: Sequence, now: float) -> float:
        """How long records have waited past a committed offset that does not move (0: it moves, or none wait)."""
        if self.lag(partition) == 0:
            return 0.0
        return max(0.0, now - self.since.get(partition, now))

    def stuck(self, now: float) -> dict[Sequence, float]:
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


class Watch:
    """What a worker knows of its own progress, for ``/metrics`` and ``/health``: each assigned partition's
    committed offset against its end (from the broker, read in a thread), whether it is read to its end (the
    consumer's position: idle nodes, clocks.py), and its agents' restarts."""

    def __init__(self, bootstrap: str, group: str, stuck_after_s: float, max_restarts: int, metrics) -> None:
        self.bootstrap, self.group, self.metrics = bootstrap, group, metrics
        self.progress = PartitionProgress(stuck_after_s)
        self.restarts = Restarts(max_restarts)
        self.unread: dict[tuple[str, int], int] = {}   # (topic, partition) -> records not read yet
        self._reader: Any = None                       # kafka.OffsetReader, made on first use

    def agent_started(self, name: str) -> None:
        self.restarts.started(name)
        if self.restarts.total.get(name):
            self.metrics.restarts.labels(name).inc()
            log.error("%s agent restarted (%d times in the last minute)", name, self.restarts.recent(name))

    def forget(self, partitions) -> None:
        """Partitions revoked: another worker's to report."""
        self.metrics.forget_partitions(partitions)
        self.progress.forget((tp.topic, tp.partition) for tp in partitions)
        for tp in partitions:
            self.unread.pop((tp.topic, tp.partition), None)

    async def read(self, consumer, sources: set[str]) -> None:
        """Read where each assigned partition of ``sources`` stands; a failure is logged, never raised (the
        broker down, a rebalance under way: a metric must never stop the worker)."""
        held = [tp for tp in consumer.assignment() if tp.topic in sources]
        try:
            for tp in held:
                position, high = await consumer.position(tp), consumer.highwater(tp)
                if position is not None and high is not None:
                    self.unread[(tp.topic, tp.partition)] = max(0, high - position)
        except Exception as err:
            log.debug("positions not read: %s", err)
        if self._reader is None:
            from .kafka import OffsetReader
            self._reader = OffsetReader(self.bootstrap, self.group)
        try:
            read = await asyncio.to_thread(self._reader.read, [(tp.topic, tp.partition) for tp in held])
        except Exception as err:
            log.debug("committed offsets not read: %s", err)
            return
        now, m = time.monotonic(), self.metrics
        for (topic, partition), (committed, end) in read.items():
            self.progress.observe((topic, partition), committed, end, now)
            labels, waited = (topic, str(partition)), self.progress.waiting_s((topic, partition), now)
            m.lag.labels(*labels).set(self.progress.lag((topic, partition)))
            m.committed.labels(*labels).set(committed or 0)
            m.stuck_seconds.labels(*labels).set(waited)
            m.stuck.labels(*labels).set(1 if waited >= self.progress.stuck_after_s else 0)

    def health(self, store_failing: bool) -> tuple[dict, int]:
        """``/health``'s answer and HTTP status: 503 while the store refuses writes, a partition is stuck or an
        agent keeps restarting, each named."""
        stuck = {"/".join(map(str, tp)): round(s) for tp, s in sorted(self.progress.stuck(time.monotonic()).items())}
        crashing = self.restarts.restarting()
        problems = (["store unavailable"] if store_failing else []) + \
            [f"{name} stuck: committed offset unmoved for {s} s while records wait" for name, s in stuck.items()] + \
            [f"{agent} agent restarted {n} times in the last minute" for agent, n in crashing.items()]
        status = "store unavailable" if store_failing else "degraded" if problems else "ok"
        return {"status": status, "problems": problems, "stuck": stuck, "restarting": crashing}, \
            503 if problems else 200
