"""The corrections of streams/faust_compat.py are needed: each test pins the library behaviour it corrects.

When one of these fails after an upgrade of faust-streaming, the library changed: check whether the
correction is still needed, and remove it (and its test) if not.
"""
from collections import defaultdict, namedtuple
from types import SimpleNamespace

import faust
import pytest
from faust.transport.consumer import Consumer
from intervaltree import IntervalTree

from gpufleet.streams.faust_compat import KeyedTable

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
