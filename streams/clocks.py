"""How far the fleet has got in event time, as the distributed stages see it.

The job stage may process a job's samples at time ``t`` only once no node can
still send one older, whatever order the partitions are read in. The node stage
therefore announces, for each telemetry partition it owns, a *partition
watermark*: the lowest watermark of the partition's nodes. The job stage keeps
the latest announcement of every partition (:class:`SourceClock`) and releases
what is older than the lowest of them, once every partition has spoken.

In the live mode a node that stops sending (dead collector, node down) must not
hold every job back for ever: once it has been silent for ``stream.node_idle_s``
of wall-clock time while its partition is read to the end, it is *idle* and left
out of its partition's watermark until it sends again (its samples are then
behind what the jobs released: late). A partition with no node that is not idle
announces no limit. A partition that saw the end-of-stream marker announces no
limit too. Replays never use the wall clock.
"""
from __future__ import annotations

from gpufleet.contracts.state import StateError, check_version

from .eventtime import LowWatermark

INF = float("inf")
CLOCK_VERSION = 1


class PartitionClock:
    """The node stage's view of one telemetry partition."""

    __slots__ = ("marks", "idle", "heard", "ended", "announced", "quiet_since")

    def __init__(self) -> None:
        self.marks = LowWatermark()              # node -> its watermark (idle nodes are left out)
        self.idle: dict[str, float] = {}         # idle node -> its watermark when it went idle
        self.heard: dict[str, float] = {}        # node -> wall time of its latest message (not saved)
        self.ended = False                       # the end-of-stream marker was processed
        self.announced: float | None = None      # the watermark last sent to the job stage (not saved)
        self.quiet_since: float | None = None    # wall time since when the partition has no active node

    def heard_from(self, node: str, watermark: float | None, now: float) -> None:
        self.ended = False
        self.heard[node] = now
        if node in self.idle:
            self.marks.advance(node, self.idle.pop(node))
        if watermark is not None:
            self.marks.advance(node, watermark)

    def nodes(self) -> list[str]:
        return sorted({*self.marks.marks, *self.idle})

    def watermark(self) -> float | None:
        """What the partition vouches for: its lowest active node's watermark; +inf when nothing holds it
        back (ended, or every node idle); None while it has no node at all and is not known to be idle."""
        if self.ended:
            return INF
        if self.marks.marks:
            return self.marks.value()
        return INF if self.idle or self.quiet_since == -INF else None

    def check_idle(self, now: float, idle_s: float, caught_up: bool) -> bool:
        """Live mode: mark the nodes silent for ``idle_s`` idle, if the partition is read to the end;
        returns whether anything changed."""
        if not caught_up:
            return False
        changed = False
        for node in list(self.marks.marks):
            if now - self.heard.setdefault(node, now) > idle_s:
                self.idle[node] = self.marks.marks[node]
                self.marks.remove(node)
                changed = True
        if not self.marks.marks and not self.idle:      # a partition without any node
            if self.quiet_since is None:
                self.quiet_since = now
            elif self.quiet_since != -INF and now - self.quiet_since > idle_s:
                self.quiet_since = -INF                  # known to be empty
                changed = True
        return changed

    def to_state(self) -> dict:
        return {"v": CLOCK_VERSION, "nodes": self.marks.marks, "idle": self.idle, "ended": self.ended,
                "empty": self.quiet_since == -INF}

    @classmethod
    def from_state(cls, state: dict, what: str) -> PartitionClock:
        check_version(what, state, CLOCK_VERSION)
        c = cls()
        try:
            for node, mark in state["nodes"].items():
                c.marks.advance(node, mark)
            c.idle, c.ended = dict(state["idle"]), state["ended"]
            c.quiet_since = -INF if state["empty"] else None
        except (KeyError, TypeError):
            raise StateError(f"{what}: saved state lacks nodes, idle, ended or empty") from None
        return c


class SourceClock:
    """The job stage's view of every telemetry partition: the latest watermark each announced."""

    __slots__ = ("sources", "partitions", "flushed")

    def __init__(self, partitions: int) -> None:
        self.sources: dict[int, float] = {}
        self.partitions = partitions
        self.flushed = False                     # every source ended and the jobs were flushed

    def announce(self, marks: dict[str, float | None]) -> None:
        for partition, mark in marks.items():
            value = INF if mark is None else mark
            p = int(partition)
            if value > self.sources.get(p, -INF):
                self.sources[p] = value
            if value != INF:
                self.flushed = False

    def watermark(self) -> float:
        """The lowest announcement, once every partition has spoken; -inf before."""
        if len(self.sources) < self.partitions:
            return -INF
        return min(self.sources.values())

    def to_state(self) -> dict:
        return {"v": CLOCK_VERSION, "sources": {str(k): (None if v == INF else v) for k, v in self.sources.items()},
                "flushed": self.flushed}

    @classmethod
    def from_state(cls, state: dict, partitions: int, what: str) -> SourceClock:
        check_version(what, state, CLOCK_VERSION)
        c = cls(partitions)
        try:
            c.sources = {int(k): (INF if v is None else v) for k, v in state["sources"].items()}
            c.flushed = state["flushed"]
        except (KeyError, TypeError, ValueError):
            raise StateError(f"{what}: saved state lacks sources or flushed") from None
        return c
