"""The corrections of streams/faust_compat.py are needed: each test pins the library behaviour it corrects.

When one of these fails after an upgrade of faust-streaming, the library changed: check whether the
correction is still needed, and remove it (and its test) if not.
"""
import asyncio
from collections import defaultdict, namedtuple
from types import SimpleNamespace

import faust
import pytest
from faust.transport.consumer import Consumer
from intervaltree import IntervalTree

from gpufleet.streams.faust_compat import KeyedTable, deliver_every_record

TP = namedtuple("TP", "topic partition")


def test_faust_saves_a_table_key_only_within_an_event_so_keyed_table_records_partitions():
    app = faust.App("compat-test", broker="kafka://127.0.0.1:1", store="memory://")
    plain = faust.Table(app, name="plain", default=None, partitions=4, key_type=bytes, value_type=bytes)
    with pytest.raises(TypeError, match="outside of stream iteration"):
        plain.partition_for_key(b"node-1")            # correction 1 is needed
    keyed = KeyedTable(app, name="keyed", default=None, partitions=4, key_type=bytes, value_type=bytes)
    keyed.partition_of[b"node-1"] = 3
    assert keyed.partition_for_key(b"node-1") == 3


def new_offset(committed, acked):
    tp = TP("t", 0)
    consumer = SimpleNamespace(_acked={tp: list(acked)}, _gap=defaultdict(IntervalTree),
                               _committed_offset={tp: committed}, _acked_index=defaultdict(set))
    return Consumer._new_offset(consumer, tp)


def test_faust_commits_past_an_unacknowledged_offset_so_the_stage_acknowledges_in_order():
    # committed 31 (the next to read): offset 31 is not acknowledged, 32 is; Faust commits 33 anyway
    assert new_offset(31, [32]) == 33                 # correction 3 is needed
    # and with nothing committed yet, a hole at the head is not seen at all
    assert new_offset(None, [1, 2]) == 3
    # a wider hole is seen
    assert new_offset(31, [33]) is None


def drain(script, correct: bool):
    """Faust's fetch loop over ``script``: fetches (lists of offsets of one partition) and ``("seek", offset)``
    (what its seek to the committed offset does to the read offset). Returns the offsets delivered and the
    offset Faust would commit once every delivered one is acknowledged, and whether it recorded a gap."""
    async def go():
        app = faust.App("compat-drain", broker="kafka://127.0.0.1:1", store="memory://")
        consumer, tp, delivered = app.consumer, faust.types.TP("telemetry", 0), []
        if correct:
            deliver_every_record(consumer, {"telemetry"})
        consumer._read_offset[tp] = 5      # set by a delivery still under way when the revocation cleared it
        consumer._committed_offset[tp] = 2
        fetcher, steps = SimpleNamespace(_stopped=asyncio.Event()), iter(script)

        async def getmany(timeout):
            step = next(steps, None)
            if step is None:
                fetcher._stopped.set()
            elif step[0] == "seek":
                await consumer.seek(tp, step[1])
            else:
                for offset in step:
                    yield tp, SimpleNamespace(offset=offset, topic=tp.topic, key=None, value=None)

        async def deliver(message):
            delivered.append(message.offset)

        async def broker_seek(partition, offset):      # the broker's half of a seek: nothing to see here
            pass
        consumer.getmany, consumer.callback, consumer._seek = getmany, deliver, broker_seek
        app.topics.acks_enabled_for = lambda topic: True
        await consumer._drain_messages(fetcher)
        consumer._acked[tp] = sorted(set(delivered))
        gaps = bool(consumer._gap[tp])
        return delivered, consumer._new_offset(tp), gaps
    return asyncio.run(go())


def test_faust_drops_records_below_its_read_offset_and_commits_past_them_so_it_is_turned_off():
    # after the rebalance the fetch starts at the committed offset 2; the seek there comes while the rest
    # of that fetch (8, 9) is still being delivered; then the fetch from the seek
    script = [[2, 3, 4, 5, 6, 7], ("seek", 2), [8, 9], [2, 3, 4, 5, 6, 7, 8, 9, 10]]
    delivered, commit, gaps = drain(script, correct=False)
    assert delivered == [5, 6, 7, 8, 9, 9, 10]         # 2, 3 and 4 never delivered (correction 4 is needed)
    assert gaps and commit == 6, "and, counting a gap as acknowledged, committed past them"
    delivered, commit, gaps = drain(script, correct=True)
    assert delivered == [2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6, 7, 8, 9, 10]   # the stage takes each once
    assert not gaps and commit == 11
