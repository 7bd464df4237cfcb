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
"""
from __future__ import annotations

from faust.tables.table import Table


class KeyedTable(Table):
    """A table whose keys are saved to the partition recorded in ``partition_of`` (correction 1);
    keys and values are bytes, saved as they are."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.key_serializer = self.value_serializer = "raw"
        self.partition_of: dict[bytes, int] = {}

    def partition_for_key(self, key) -> int:
        return self.partition_of[key]


def rewind_from_zero(consumer, topics: set[str]) -> None:
    """Correction 2: after Faust's seek to the committed offsets, seek the partitions of ``topics`` that
    were committed at 0 (or never) to offset 0 (the broker moves an offset below its retention to the
    earliest one kept)."""
    seek_committed = consumer.perform_seek

    async def perform_seek() -> None:
        await seek_committed()
        committed = consumer._committed_offset        # Faust's record of what it committed, per partition
        for tp in consumer.assignment():
            if tp.topic in topics and not committed.get(tp):
                await consumer.seek(tp, 0)
    consumer.perform_seek = perform_seek
