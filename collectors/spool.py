"""A bounded, append-only on-disk queue of telemetry messages.

Every message is written (and by default fsync'ed) here before it is handed to
Kafka, and stays until the broker acknowledges it, so an outage of any length
within the bound loses nothing and a collector killed with SIGKILL loses at
most the message it was writing. Records live in segment files named after
their first offset; fully acknowledged segments are deleted. When the bound is
exceeded the oldest segments are dropped and the unacknowledged records they
held are counted (``take_dropped``) so the next message can say so.
"""
from __future__ import annotations

import io
import logging
import os
import time
from collections import deque
from dataclasses import dataclass

log = logging.getLogger("gpufleet.collect")


@dataclass
class Segment:
    first: int
    path: str
    count: int
    size: int


class Spool:
    def __init__(self, directory: str, max_bytes: int = 256 << 20, segment_bytes: int = 4 << 20,
                 fsync: bool = True, ack_every_s: float = 1.0, cache_records: int = 256):
        if max_bytes < 2 * segment_bytes:
            raise ValueError("max_bytes must hold at least two segments")
        self.dir, self.max_bytes, self.segment_bytes, self.fsync = directory, max_bytes, segment_bytes, fsync
        self.ack_every_s = ack_every_s
        os.makedirs(directory, exist_ok=True)
        self.segments: list[Segment] = []
        self._dropped = 0
        self.dropped_total = 0
        # Called with the (offset, record) pairs the bound drops that were not acknowledged; the
        # publisher replaces it, since records already handed to Kafka may still arrive.
        self.on_drop = lambda records: self.count_dropped(len(records))
        self._writer: io.BufferedWriter | None = None
        self._ack_saved_at = 0.0
        self._tail: deque[tuple[int, bytes]] = deque(maxlen=cache_records)   # newest records, to send from memory
        self._recover()

    # -- state on disk -------------------------------------------------------------
    def _recover(self) -> None:
        names = sorted(n for n in os.listdir(self.dir) if n.endswith(".seg"))
        for name in names:
            path = os.path.join(self.dir, name)
            with open(path, "rb") as f:
                data = f.read()
            if data and not data.endswith(b"\n"):       # a write cut short by a crash
                data = data[: data.rfind(b"\n") + 1]
                with open(path, "r+b") as f:
                    f.truncate(len(data))
            self.segments.append(Segment(int(name[:-4]), path, data.count(b"\n"), len(data)))
        self.next_offset = self.segments[-1].first + self.segments[-1].count if self.segments else 0
        acked = self.segments[0].first if self.segments else 0
        try:
            with open(os.path.join(self.dir, "acked")) as f:
                acked = max(acked, int(f.read().strip() or 0))
        except (FileNotFoundError, ValueError):
            pass
        self.acked = min(acked, self.next_offset)
        if not self.segments and self.acked:
            self.next_offset = self.acked
        if self.pending:
            log.info("spool %s: %d messages from an earlier run wait to be sent", self.dir, self.pending)

    def _save_ack(self) -> None:
        tmp = os.path.join(self.dir, "acked.tmp")
        with open(tmp, "w") as f:
            f.write(str(self.acked))
        os.replace(tmp, os.path.join(self.dir, "acked"))
        self._ack_saved_at = time.monotonic()

    # -- writing -------------------------------------------------------------------
    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def pending(self) -> int:
        return self.next_offset - self.acked

    def append(self, data: bytes) -> int:
        """Store one record (no newline inside); returns its offset."""
        if b"\n" in data:
            raise ValueError("a spool record cannot contain a newline")
        seg = self.segments[-1] if self.segments else None
        if seg is None or seg.size >= self.segment_bytes:
            self._close_writer()
            path = os.path.join(self.dir, f"{self.next_offset:020d}.seg")
            seg = Segment(self.next_offset, path, 0, 0)
            self.segments.append(seg)
        writer = self._writer
        if writer is None or writer.name != seg.path:
            self._close_writer()
            writer = self._writer = open(seg.path, "ab")
        writer.write(data + b"\n")
        writer.flush()
        if self.fsync:
            os.fsync(writer.fileno())
        seg.count += 1
        seg.size += len(data) + 1
        offset = self.next_offset
        self._tail.append((offset, data))
        self.next_offset += 1
        self._enforce_bound()
        return offset

    def _enforce_bound(self) -> None:
        while self.size > self.max_bytes and len(self.segments) > 1:
            seg = self.segments[0]
            end = seg.first + seg.count
            first = max(self.acked, seg.first)
            lost = self.read(first, end - first) if end > first else []
            self.segments.pop(0)
            os.remove(seg.path)
            self.acked = max(self.acked, end)
            if lost:
                log.error("spool full (%d bytes): dropped the %d oldest unacknowledged messages",
                          self.max_bytes, len(lost))
                self.on_drop(lost)

    @property
    def first_offset(self) -> int:
        """The oldest record still kept."""
        return self.segments[0].first if self.segments else self.next_offset

    def count_dropped(self, n: int) -> None:
        self._dropped += n
        self.dropped_total += n

    def take_dropped(self) -> int:
        """Messages dropped since the last call (for the ``dropped`` field of the next message)."""
        n, self._dropped = self._dropped, 0
        return n

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    # -- reading and acknowledging ---------------------------------------------------------
    def read(self, offset: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` records from ``offset`` on (from the oldest kept if it was dropped)."""
        out: list[tuple[int, bytes]] = []
        offset = max(offset, self.acked, self.segments[0].first if self.segments else offset)
        if self._tail and self._tail[0][0] <= offset:
            start = offset - self._tail[0][0]
            return [self._tail[i] for i in range(start, min(len(self._tail), start + limit))]
        for seg in self.segments:
            end = seg.first + seg.count
            if end <= offset:
                continue
            with open(seg.path, "rb") as f:
                for i, line in enumerate(f):
                    at = seg.first + i
                    if at >= end:
                        break
                    if at >= offset:
                        out.append((at, line.rstrip(b"\n")))
                        if len(out) >= limit:
                            return out
            offset = end
        return out

    def ack(self, upto: int) -> None:
        """Every record before ``upto`` is delivered: delete the segments that are done."""
        if upto <= self.acked:
            return
        self.acked = min(upto, self.next_offset)
        # segments done with are deleted; the one being written stays until it rolls over
        while len(self.segments) > 1 and self.segments[0].first + self.segments[0].count <= self.acked:
            os.remove(self.segments.pop(0).path)
        if time.monotonic() - self._ack_saved_at >= self.ack_every_s:
            self._save_ack()

    def close(self) -> None:
        self._close_writer()
        self._save_ack()
