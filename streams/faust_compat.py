"""The places where the worker corrects faust-streaming (0.15) and aiokafka (0.14), each in one piece.

Every correction names the behaviour it corrects; tests/unit/test_faust_compat.py (and, for the
broker-side one, tests/integration/test_faust_compat.py) fail when the library's behaviour changes,
so that a correction that is no longer needed is noticed and removed.

1. :class:`KeyedTable`: Faust saves a table key to the partition of the event being processed
   (``Collection.partition_for_key`` reads ``current_event()``, and raises outside an event). A batch
   touches many keys from several partitions and saves them after the batch, so each key is saved to
   the partition its input came from, recorded by the stage.
2. :func:`rewind_from_zero`: after a rebalance Faust sends every partition back to its committed
   offset (``perform_seek``), to deliver again what was not acknowledged; aiokafka's
   ``seek_to_committed`` skips the seek when that offset is 0 (``if offset and offset > 0``), so inputs
   dropped during the table recovery of a partition committed at 0 would never come again.
3. Acknowledgement in offset order (durable.Stage): Faust's ``Consumer._new_offset`` commits past an
   unacknowledged offset when that offset is the only one at the committed position (it checks for a
   gap at the head only when ``min(acked) - committed > 1``, and not at all when nothing or 0 was
   committed), which would skip an input still waiting for the watermark. The stage therefore
   acknowledges an input only once every earlier one of its partition is acknowledged.
4. :func:`deliver_every_record`: Faust drops a record whose offset is below the highest it delivered of its
   partition (its "read offset"), and when a record is more than one past it, records the offsets between
   as a gap that its commit counts as acknowledged. Around a rebalance the read offset is wrong: a delivery
   under way when the revocation cleared it sets it again, records fetched from the committed offset
   between the resumption of the partitions and the seek are delivered before the seek, and the rest of
   a fetch goes on being delivered after it. So a partition came out of order, its records after the
   committed offset were dropped, and Faust could commit past records never processed (a waiting message
   of a node was then taken for one replayed: data lost). For the stream topics the read offset is kept
   empty: every record is delivered, repeats included, and the stage takes each partition in offset order
   from where reading restarts, which :func:`rewind_from_zero` reports (durable.Stage, Rebalances).
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable

from faust.tables.table import Table

log = logging.getLogger("gpufleet.worker")


class KeyedTable(Table):
    """A table whose keys are saved to the partition recorded in ``partition_of`` (correction 1);
    keys and values are bytes, saved as they are."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.key_serializer = self.value_serializer = "raw"
        self.partition_of: dict[bytes, int] = {}

    def partition_for_key(self, key) -> int:
        return self.partition_of[key]


def rewind_from_zero(consumer, topics: set[str],
                     started: Callable[[int, dict], None] | None = None) -> None:
    """Correction 2: after Faust's seek to the committed offsets, seek the partitions of ``topics`` that
    were committed at 0 (or never) to offset 0 (the broker moves an offset below its retention to the
    earliest one kept).

    Then ``started(generation, starts)`` is told, for the consumer generation the seek was made in, the
    offset each of those partitions is read from again (correction 4): the committed one, or the earliest
    one kept when that is later."""
    seek_committed = consumer.perform_seek

    async def perform_seek() -> None:
        generation = consumer.app.consumer_generation_id
        await seek_committed()
        committed = consumer._committed_offset        # Faust's record of what it committed, per partition
        starts = {}
        for tp in consumer.assignment():
            if tp.topic in topics:
                starts[tp] = committed.get(tp) or 0
                if not committed.get(tp):
                    await consumer.seek(tp, 0)
        if started is not None:
            try:
                earliest = await consumer.earliest_offsets(*starts) if starts else {}
            except Exception as err:      # the broker unreachable: a start below its retention holds the partition
                log.warning("earliest offsets not read after the seek: %s", err)
                earliest = {}
            started(generation, {tp: max(offset, earliest.get(tp) or 0) for tp, offset in starts.items()})
    consumer.perform_seek = perform_seek


class _Unread(defaultdict):
    """Faust's read offsets (correction 4), kept empty for the partitions of ``topics``."""

    def __init__(self, topics: set[str]):
        super().__init__(lambda: None)
        self.topics = topics

    def __getitem__(self, tp):
        return None if tp.topic in self.topics else super().__getitem__(tp)

    def __setitem__(self, tp, offset) -> None:
        if tp.topic not in self.topics:
            super().__setitem__(tp, offset)

    def update(self, *args, **kwargs) -> None:
        for tp, offset in dict(*args, **kwargs).items():
            self[tp] = offset


def deliver_every_record(consumer, topics: set[str]) -> None:
    """Correction 4: Faust drops no record of ``topics`` and records no gap in them (before it starts
    fetching: its fetch loop looks the read offsets up once)."""
    consumer._read_offset = _Unread(topics)
