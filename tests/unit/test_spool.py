import os

import pytest

from gpufleet.collectors.spool import Spool


def rec(i: int, size: int = 100) -> bytes:
    return f'{{"seq":{i},"pad":"{"x" * size}"}}'.encode()


def test_records_come_back_in_order_and_acks_free_segments(tmp_path):
    s = Spool(str(tmp_path), max_bytes=100_000, segment_bytes=1000)
    for i in range(50):
        assert s.append(rec(i)) == i
    assert [o for o, _ in s.read(0, 1000)] == list(range(50))
    assert s.read(10, 3) == [(10, rec(10)), (11, rec(11)), (12, rec(12))]
    segments = len(os.listdir(tmp_path))
    s.ack(40)
    assert s.pending == 10 and len(os.listdir(tmp_path)) < segments
    assert s.read(0, 100)[0][0] == 40


def test_reading_beyond_the_memory_tail_goes_to_disk(tmp_path):
    s = Spool(str(tmp_path), max_bytes=1_000_000, segment_bytes=2000, cache_records=5)
    for i in range(100):
        s.append(rec(i))
    assert [o for o, _ in s.read(3, 10)] == list(range(3, 13))
    assert s.read(97, 10) == [(97, rec(97)), (98, rec(98)), (99, rec(99))]


def test_recovers_after_a_crash_and_cuts_a_torn_last_record(tmp_path):
    s = Spool(str(tmp_path), max_bytes=100_000, segment_bytes=1000, ack_every_s=0)
    for i in range(30):
        s.append(rec(i))
    s.ack(12)                                  # persisted at once (ack_every_s=0)
    last = sorted(p for p in os.listdir(tmp_path) if p.endswith(".seg"))[-1]
    with open(tmp_path / last, "ab") as f:
        f.write(b'{"seq":30,"pad":"xx')         # SIGKILL in the middle of a write
    again = Spool(str(tmp_path), max_bytes=100_000, segment_bytes=1000)
    assert again.acked == 12 and again.next_offset == 30 and again.pending == 18
    assert [o for o, _ in again.read(0, 100)] == list(range(12, 30))
    assert again.append(rec(30)) == 30


def test_the_bound_drops_the_oldest_and_counts_exactly(tmp_path):
    s = Spool(str(tmp_path), max_bytes=4000, segment_bytes=1000)
    for i in range(200):
        s.append(rec(i))
    kept = s.read(0, 1000)
    dropped = s.take_dropped()
    assert dropped == kept[0][0] == 200 - len(kept) > 0
    assert s.take_dropped() == 0 and s.dropped_total == dropped
    assert [o for o, _ in kept] == list(range(dropped, 200))
    assert s.size <= 4000


def test_acked_records_are_not_counted_as_dropped(tmp_path):
    s = Spool(str(tmp_path), max_bytes=4000, segment_bytes=1000)
    for i in range(200):
        s.append(rec(i))
        s.ack(i + 1)
    assert s.take_dropped() == 0 and s.pending == 0


def test_newlines_and_tiny_bounds_are_refused(tmp_path):
    with pytest.raises(ValueError):
        Spool(str(tmp_path), max_bytes=1000, segment_bytes=1000)
    with pytest.raises(ValueError):
        Spool(str(tmp_path)).append(b"a\nb")
