"""Event time for one node: watermark, allowed lateness, duplicates and reordering.

The watermark is the node's newest ``ts`` minus the allowed lateness. Messages
wait in a small buffer until the watermark passes them and are then released in
``ts`` order, so every processor downstream sees each node's samples ordered
and exactly once, whatever the arrival order within the lateness. A message
whose time was already released (remembered for ``dedup_horizon_s``) is a
duplicate; another one older than the watermark is late.

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


class Gate:
    __slots__ = ("max_ts", "pending", "released", "strings")

    def __init__(self):
        self.max_ts: float | None = None
        self.pending: dict[float, Waiting] = {}
        self.released = Released()
        self.strings = Strings()          # numbers the strings of the messages that wait packed

    def watermark(self, lateness_s: float) -> float | None:
        return None if self.max_ts is None else self.max_ts - lateness_s

    def push(self, msg: Telemetry, lateness_s: float, horizon_s: float,
             ref=None) -> tuple[str, list[tuple[Telemetry, list]]]:
        """Admit one message; returns its status and the ``(message, refs)`` now released, in ts order."""
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
        if self.strings.full():
            self.strings = Strings()
        self.pending[ts] = Waiting(msg, ref, self.strings)
        if self.max_ts is None or ts > self.max_ts:
            self.max_ts = ts
            return ACCEPTED, self._release(ts - lateness_s, horizon_s)
        return ACCEPTED, []

    def drain(self) -> list[tuple[Telemetry, list]]:
        """End of input: release everything still waiting."""
        return self._release(float("inf"), float("inf"))

    def _release(self, watermark: float, horizon_s: float) -> list[tuple[Telemetry, list]]:
        pending = self.pending
        if len(pending) == 1:
            (ts,) = pending
            ready = [ts] if ts < watermark else []
        else:
            ready = sorted(t for t in pending if t < watermark)
        out = []
        for t in ready:
            w = pending.pop(t)
            out.append((w.message(), w.refs))
        if ready:
            self.released.add(ready)
        if watermark != float("inf"):
            self.released.forget_before(watermark - horizon_s)
        return out

    def to_state(self) -> dict:
        """The newest time seen and the released times still remembered (waiting messages are left out)."""
        return {"max_ts": self.max_ts, "released": self.released.times.tolist()}

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
