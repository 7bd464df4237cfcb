"""Event time for one node: watermark, allowed lateness, duplicates, reordering and clock steps.

The watermark is the node's newest trusted ``ts`` minus the allowed lateness. Messages
wait in a small buffer until the watermark passes them and are then released in
``ts`` order, so every processor downstream sees each node's samples ordered
and exactly once, whatever the arrival order within the lateness. A message
whose time was already released (remembered for ``dedup_horizon_s``) is a
duplicate; another one older than the watermark is late.

A node's clock can step (an NTP correction forward and back, a host whose clock was
wrong), and a message can be copied with a time in the node's future. Neither may
move the watermark, or every good message after it would be late. So each message
is judged against its collector's own sequence (``collector_id``, ``seq``, +1 per
message, and ``interval_s``): from the latest trusted message, seq ``s`` is due at
about ``ts + (s - seq) x interval``. A message far ahead of that (more than
:func:`step_tolerance`) is *ahead of its sequence*: it waits to be released in
``ts`` order like any other, but does not move the watermark. One whose seq the
sequence already passed is a copy, and a duplicate (so is one held ahead whose seq a
trusted message then brings). Messages ahead of the sequence that agree with each
other for ``stream.clock_step_s`` of their own time are the node's new clock: the
watermark follows them from then on (a host frozen for a while looks the same, and
is followed the same way). A message without a sequence, or from a collector that
started since (a new ``collector_id``), is trusted as it is; a ``dropped`` count
counts as seqs passed.

Each admitted message may carry a reference (the Kafka event it came in); the
references come back out with the message when it is released, so a driver
can acknowledge an input only once everything derived from it is durable. The
saved state leaves waiting messages out on purpose: they were not acknowledged,
so after a restart they are delivered again and admitted again.
"""
from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left

from pydantic import BaseModel

from gpufleet.contracts.state import StateError
from gpufleet.contracts.telemetry import Telemetry

from .decode import Strings, pack_message, unpack_message, with_gpus

ACCEPTED, DUPLICATE, LATE, REPLAYED = "accepted", "duplicate", "late", "replayed"
HELD = "held"      # a repeat of a message still waiting: its reference is done when that one is


class Waiting:
    """A message waiting for the watermark, and the references of every input that carried it.

    A decoded message (:mod:`.decode`'s structs) waits packed (:func:`.decode.pack_message`: its values in
    field order, its strings as their numbers in the node's :class:`.decode.Strings`, compressed with LZ4, about
    a tenth of the JSON it came in) and is unpacked when it is released, which costs about as much as decoding
    its JSON again. (zlib's fastest level takes a little less room for about nine times LZ4's CPU.) A pydantic
    message waits as it is."""

    __slots__ = ("msg", "packed", "strings", "refs")

    def __init__(self, msg: Telemetry, ref, strings: Strings | None = None) -> None:
        if isinstance(msg, BaseModel):
            self.msg, self.packed, self.strings = msg, None, None
        else:
            self.msg, self.packed, self.strings = None, pack_message(msg, strings), strings
        self.refs = [ref]

    def message(self) -> Telemetry:
        msg = self.msg
        if msg is None:
            assert self.packed is not None
            msg = self.msg = unpack_message(self.packed, self.strings)
            self.packed = self.strings = None
        return msg


_INT32 = 2**31


class Released:
    """The sample times already released, remembered for the dedup horizon, sorted and searched by bisection.
    Times are released in order, so adding is an append and forgetting cuts the front.

    A collector's times are whole milliseconds (``round(ts, 3)``): they are kept as milliseconds after the first
    one, 4 bytes a time (sampled every second over a 15-minute horizon, 3.6 kB a node less than doubles). A time
    that is not a whole millisecond, or more than 24 days from the first, turns the store into doubles (8 bytes
    a time) for good. Either way a time is found exactly as the float it came as."""

    __slots__ = ("base", "ms", "secs")

    def __init__(self, times=()) -> None:
        self.base: int | None = None           # the first time in whole milliseconds; None: doubles
        self.ms = array("i")                   # milliseconds after base, sorted
        self.secs: array | None = None         # the times as doubles, sorted, once one is not whole milliseconds
        ordered = sorted(times)
        if ordered:
            self.add(ordered)

    def _offset(self, ts: float) -> int | None:
        """``ts`` as milliseconds after base, when it is exactly that (None otherwise)."""
        try:
            k = round(ts * 1000)
        except (OverflowError, ValueError):     # not finite
            return None
        if k / 1000 != ts or self.base is None:
            return None
        k -= self.base
        return k if -_INT32 <= k < _INT32 else None

    @property
    def times(self) -> array:
        """Every remembered time, as doubles, oldest first."""
        if self.secs is not None:
            return self.secs
        base = self.base or 0                  # no base: no time either
        return array("d", [(base + k) / 1000 for k in self.ms])

    def __contains__(self, ts: float) -> bool:
        if self.secs is not None:
            times = self.secs
            if not times or ts > times[-1]:
                return False
            i = bisect_left(times, ts)
            return times[i] == ts
        k = self._offset(ts)
        if k is None or not self.ms or k > self.ms[-1]:
            return False
        i = bisect_left(self.ms, k)
        return self.ms[i] == k

    def __len__(self) -> int:
        return len(self.secs) if self.secs is not None else len(self.ms)

    def add(self, ready: list[float]) -> None:
        """Add times (sorted), some possibly before the newest remembered (after a drain)."""
        times: array
        if self.secs is None:
            if self.base is None:
                self.base = round(ready[0] * 1000)
            new: list = [self._offset(t) for t in ready]
            if None in new:                     # from now on, doubles
                self.secs, self.base, self.ms = self.times, None, array("i")
        if self.secs is None:
            times = self.ms
        else:
            times, new = self.secs, ready
        if not times or new[0] > times[-1]:
            times.extend(new)
            return
        for t in new:
            i = bisect_left(times, t)
            if i == len(times) or times[i] != t:
                times.insert(i, t)

    def forget_before(self, ts: float) -> None:
        if self.secs is not None:
            del self.secs[:bisect_left(self.secs, ts)]
            return
        ms, base = self.ms, self.base
        if not ms or base is None or ts <= (base + ms[0]) / 1000:
            return
        if ts > (base + ms[-1]) / 1000:
            del ms[:]
            return
        i = bisect_left(ms, round(ts * 1000) - base - 1)       # then exactly: the first time at or after ts
        while (base + ms[i]) / 1000 < ts:
            i += 1
        del ms[:i]


STEP_INTERVALS = 3           # a message this many intervals ahead of its sequence may be a step (below: jitter)
STEP_DRIFT = 0.05            # ... or this share of the time its seq says passed (intervals are not exact)
CLOCK_STEP_S = 600.0         # stream.clock_step_s's default


def step_tolerance(lateness_s: float, interval_s: float, seqs: int) -> float:
    """How far (s) a message may be ahead of the time its sequence predicts, ``seqs`` messages after the anchor,
    before it is taken for a clock step: the lateness, three intervals, or 5 % of the time predicted."""
    return max(lateness_s, STEP_INTERVALS * interval_s, STEP_DRIFT * abs(seqs) * interval_s)


class Anchor:
    """The latest trusted message of a collector: (collector_id, seq, ts, interval_s)."""

    __slots__ = ("collector", "seq", "ts", "interval")

    def __init__(self, collector: str, seq: int, ts: float, interval: float) -> None:
        self.collector, self.seq, self.ts, self.interval = collector, seq, ts, interval

    def ahead(self, msg: Telemetry, lateness_s: float) -> float | None:
        """How far ``msg`` is ahead of the time this anchor predicts for its seq (None: not of this collector, or
        within the tolerance)."""
        if msg.seq is None or msg.collector_id != self.collector:
            return None
        seqs = msg.seq - self.seq
        if seqs > 0:
            seqs += msg.dropped or 0            # messages its spool dropped since the one before it took no seq
        by = msg.ts - (self.ts + seqs * self.interval)
        return by if by > step_tolerance(lateness_s, self.interval, seqs) else None

    def to_state(self) -> list:
        return [self.collector, self.seq, self.ts, self.interval]


class Ahead:
    """Messages held ahead of their collector's sequence, by seq, and the run of them that agree with each
    other (a clock that stepped: confirmed once it spans ``stream.clock_step_s``)."""

    __slots__ = ("held", "run")

    def __init__(self) -> None:
        self.held: dict[int, float] = {}      # seq -> ts of each message held ahead
        self.run: Anchor | None = None        # the first message of the latest run that agrees with itself

    def add(self, msg: Telemetry, interval: float, lateness_s: float) -> float:
        """Hold ``msg``; returns the time its run spans so far."""
        assert msg.seq is not None and msg.collector_id is not None
        self.held[msg.seq] = msg.ts
        run = self.run
        if run is None or msg.seq <= run.seq or run.ahead(msg, lateness_s) is not None \
                or run.ts - (msg.ts - (msg.seq - run.seq) * run.interval) > step_tolerance(lateness_s, interval,
                                                                                          msg.seq - run.seq):
            self.run = run = Anchor(msg.collector_id, msg.seq, msg.ts, interval)
        return msg.ts - run.ts


class Gate:
    __slots__ = ("max_ts", "pending", "released", "strings", "anchor", "ahead", "copies")

    def __init__(self):
        self.max_ts: float | None = None
        self.pending: dict[float, Waiting] = {}
        self.released = Released()
        self.strings = Strings()          # numbers the strings of the messages that wait packed
        self.anchor: Anchor | None = None  # the latest trusted message with a sequence
        self.ahead = Ahead()               # messages waiting that are ahead of their sequence (not saved)
        self.copies: list[list] = []       # references of copies dropped from the waiting messages

    def watermark(self, lateness_s: float) -> float | None:
        return None if self.max_ts is None else self.max_ts - lateness_s

    def push(self, msg: Telemetry, lateness_s: float, horizon_s: float,
             ref=None, step_s: float = CLOCK_STEP_S) -> tuple[str, list[tuple[Telemetry, list]]]:
        """Admit one message; returns its status and the ``(message, refs)`` now released, in ts order.
        ``step_s``: ``stream.clock_step_s`` (see the module's docstring)."""
        ts = msg.ts
        if ts in self.released:
            # a repeat, even within the lateness: the end of input (drain) releases the newest messages
            # before the watermark passes them
            return DUPLICATE, []
        if self.max_ts is not None and ts < self.max_ts - lateness_s:
            return LATE, []
        held = self.pending.get(ts)
        if held is not None:
            first = held.message()
            known = {g.uuid for g in first.gpus}
            new = [g for g in msg.gpus if g.uuid not in known]
            held.refs.append(ref)
            if not new:
                # the same input may even be delivered twice; acknowledging the repeat now could
                # commit past the original before what it carries is durable
                return HELD, []
            held.msg = with_gpus(first, [*first.gpus, *new])
            return ACCEPTED, []
        trusted, stepped = True, False
        anchor, ahead = self.anchor, self.ahead
        if anchor is not None and msg.seq is not None and msg.collector_id == anchor.collector:
            if self.max_ts is not None and ts > self.max_ts and anchor.ahead(msg, lateness_s) is not None:
                if msg.seq <= anchor.seq or msg.seq in ahead.held:
                    return DUPLICATE, []          # a seq the sequence already had, stamped in the future: a copy
                trusted = stepped = ahead.add(msg, anchor.interval, lateness_s) >= step_s   # a clock step
            elif msg.seq in ahead.held:
                self._drop_copy(ahead.held.pop(msg.seq))     # the original of a copy held ahead: the copy goes
        if self.strings.full():
            self.strings = Strings()
        self.pending[ts] = Waiting(msg, ref, self.strings)
        if not trusted:
            return ACCEPTED, []
        if msg.seq is not None and msg.collector_id is not None and (
                anchor is None or self.max_ts is None or ts >= self.max_ts or msg.collector_id != anchor.collector):
            self._anchor(msg, stepped)
        if self.max_ts is None or ts > self.max_ts:
            self.max_ts = ts
            return ACCEPTED, self._release(ts - lateness_s, horizon_s)
        return ACCEPTED, []

    def _drop_copy(self, ts: float) -> None:
        waiting = self.pending.pop(ts, None)
        if waiting is not None:
            self.copies.append(waiting.refs)

    def _anchor(self, msg: Telemetry, stepped: bool) -> None:
        """``msg`` is the latest trusted message of its collector (``stepped``: the one that confirmed a clock
        step): what is still held ahead is judged from it from now on."""
        assert msg.seq is not None and msg.collector_id is not None
        previous = self.anchor
        interval = msg.interval_s or (previous.interval if previous is not None else 1.0)
        self.anchor = Anchor(msg.collector_id, msg.seq, msg.ts, interval)
        ahead = self.ahead
        if stepped or previous is None or previous.collector != msg.collector_id:
            ahead.held.clear()             # the step's messages are the node's time now; another collector: anew
            ahead.run = None
        elif ahead.run is not None and ahead.run.ts <= msg.ts:
            ahead.run = None               # the trusted time caught up with the run: nothing stepped

    def newest(self) -> float | None:
        """The newest time among the messages waiting and the trusted one (a node whose messages wait ahead of
        its sequence is still heard from)."""
        return max(self.pending, default=self.max_ts)

    def take_copies(self) -> list[list]:
        """The references of the copies dropped since the last call (done: their originals carry them)."""
        copies, self.copies = self.copies, []
        return copies

    def drain(self) -> list[tuple[Telemetry, list]]:
        """End of input: release everything still waiting, but the messages still ahead of their collector's
        sequence (:meth:`unconfirmed`: take them first)."""
        return self._release(float("inf"), float("inf"))

    def unconfirmed(self, lateness_s: float) -> list[tuple[Telemetry, list, float]]:
        """The messages held ahead of their sequence that the sequence went on without (a later seq came on the
        old clock) and that the watermark never reached, each with how far ahead (s), taken out of the waiting
        ones: at the end of input (or of a node found silent) nothing will ever place them (a message stamped by
        a clock that jumped for an instant). Those the sequence ends with are the node's last messages on a clock
        that stepped (or a host that was frozen for a while): they stay, and are released with the rest."""
        anchor, held = self.anchor, self.ahead.held
        out: list[tuple[Telemetry, list, float]] = []
        if anchor is None:
            return out
        for seq, ts in sorted(held.items()):
            waiting = self.pending.get(ts)
            if waiting is None or seq >= anchor.seq:
                continue
            msg = waiting.message()
            del self.pending[ts]
            out.append((msg, waiting.refs, ts - anchor.ts))
        held.clear()
        self.ahead.run = None
        return out

    def _release(self, watermark: float, horizon_s: float) -> list[tuple[Telemetry, list]]:
        pending = self.pending
        if len(pending) == 1:
            (ts,) = pending
            ready = [ts] if ts < watermark else []
        else:
            ready = sorted(t for t in pending if t < watermark)
        out = []
        held = self.ahead.held
        for t in ready:
            w = pending.pop(t)
            m = w.message()
            if held and m.seq is not None and held.get(m.seq) == t:
                del held[m.seq]
            out.append((m, w.refs))
        if ready:
            self.released.add(ready)
        if watermark != float("inf"):
            self.released.forget_before(watermark - horizon_s)
        return out

    def to_state(self) -> dict:
        """The newest trusted time, the released times still remembered and the latest trusted message of the
        node's collector (waiting messages are left out: they come again)."""
        return {"max_ts": self.max_ts, "released": self.released.times.tolist(),
                "anchor": None if self.anchor is None else self.anchor.to_state()}

    @classmethod
    def from_state(cls, state: dict) -> Gate:
        gate = cls()
        try:
            gate.max_ts, order = state["max_ts"], state["released"]
        except (KeyError, TypeError):
            raise StateError(f"gate: saved state {sorted(state) if isinstance(state, dict) else state!r} lacks "
                             "max_ts or released") from None
        try:
            gate.released = Released(order)
        except TypeError:
            raise StateError("gate: saved released times must be numbers") from None
        anchor = state.get("anchor")            # absent: saved before the sequence was judged
        if anchor is not None:
            try:
                gate.anchor = Anchor(*anchor)
            except TypeError:
                raise StateError("gate: saved anchor must be [collector, seq, ts, interval]") from None
        return gate


class LowWatermark:
    """The lowest of several watermarks (one per node, or one per partition), kept as they advance.

    A key's mark only moves forward; :attr:`value` is the lowest current mark (a lazy heap, so an
    update costs O(log n) however many keys there are).
    """

    __slots__ = ("marks", "_heap")

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def advance(self, key: str, mark: float) -> None:
        if mark <= self.marks.get(key, float("-inf")):
            return
        self.marks[key] = mark
        heapq.heappush(self._heap, (mark, key))

    def remove(self, key: str) -> None:
        self.marks.pop(key, None)

    def value(self, empty: float = float("-inf")) -> float:
        """The lowest mark; ``empty`` when there is none."""
        heap, marks = self._heap, self.marks
        while heap and marks.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        if len(heap) > 4 * len(marks) + 64:          # stale entries of removed keys: rebuild
            self._heap = heap = [(m, k) for k, m in marks.items()]
            heapq.heapify(heap)
        return heap[0][0] if heap else empty


class FleetWatermark:
    """The embedded mode's job watermark: the lowest node watermark of each input partition, then the lowest of
    those. With ``partitions`` (a log of that many partitions) nothing is vouched for until every partition has
    been heard from: a partition read later than the others may hold nodes no one has seen yet. A partition whose
    nodes were all removed (silent) holds nothing back; with none left at all, nothing is vouched for."""

    __slots__ = ("parts", "of", "partitions")

    def __init__(self, partitions: int | None = None) -> None:
        self.parts: dict[int | None, LowWatermark] = {}
        self.of: dict[str, int | None] = {}          # node -> its partition
        self.partitions = partitions

    def advance(self, node: str, mark: float, partition: int | None = None) -> None:
        self.of[node] = partition
        part = self.parts.get(partition)
        if part is None:
            part = self.parts[partition] = LowWatermark()
        part.advance(node, mark)

    def remove(self, node: str) -> None:
        partition = self.of.get(node, None)
        if partition in self.parts:
            self.parts[partition].remove(node)

    def heard_from_all(self) -> bool:
        return self.partitions is None or len(self.parts) >= self.partitions

    def value(self) -> float:
        if not self.heard_from_all():
            return float("-inf")
        lowest = min((p.value(float("inf")) for p in self.parts.values()), default=float("inf"))
        return float("-inf") if lowest == float("inf") else lowest
