"""The watermarks the job stage runs on: partitions announce their lowest node, idle nodes stop holding it back."""
import json
from collections import namedtuple

from gpufleet.contracts.output import Output
from gpufleet.streams.clocks import INF, PartitionClock, SourceClock
from gpufleet.streams.eventtime import LowWatermark
from gpufleet.streams.jobs import JobProcessor
from gpufleet.streams.metrics import WorkerMetrics


def test_the_low_watermark_is_the_lowest_mark_and_marks_only_advance():
    w = LowWatermark()
    assert w.value() == -INF and w.value(empty=INF) == INF
    w.advance("a", 10)
    w.advance("b", 5)
    w.advance("b", 3)                      # never backwards
    assert w.value() == 5
    w.advance("b", 20)
    assert w.value() == 10
    w.remove("a")
    assert w.value() == 20


def test_a_partition_announces_its_lowest_node_and_nothing_before_it_has_one():
    c = PartitionClock()
    assert c.watermark() is None
    c.heard_from("n1", 100.0, now=0.0)
    c.heard_from("n2", 40.0, now=0.0)
    assert c.watermark() == 40.0
    c.ended = True
    assert c.watermark() == INF


def test_a_silent_node_stops_holding_the_partition_back_only_once_the_partition_is_read_to_the_end():
    c = PartitionClock()
    c.heard_from("alive", 1000.0, now=0.0)
    c.heard_from("dead", 500.0, now=0.0)
    c.heard_from("alive", 1100.0, now=100.0)
    assert not c.check_idle(now=130.0, idle_s=120.0, caught_up=False)     # a backlog: nobody is idle
    assert c.watermark() == 500.0
    assert c.check_idle(now=130.0, idle_s=120.0, caught_up=True)
    assert c.watermark() == 1100.0 and "dead" in c.idle
    c.heard_from("dead", None, now=140.0)                                  # it sends again
    assert c.watermark() == 500.0 and not c.idle
    saved = PartitionClock.from_state(json.loads(json.dumps(c.to_state())), "clock")
    assert saved.watermark() == 500.0


def test_a_partition_without_nodes_announces_no_limit_once_read_to_the_end_long_enough():
    c = PartitionClock()
    assert not c.check_idle(now=0.0, idle_s=60.0, caught_up=True)
    assert c.watermark() is None
    assert c.check_idle(now=61.0, idle_s=60.0, caught_up=True)
    assert c.watermark() == INF


def test_the_job_stage_waits_for_every_partition_then_takes_the_lowest():
    s = SourceClock(partitions=3)
    s.announce({"0": 100.0, "1": 50.0})
    assert s.watermark() == -INF
    s.announce({"2": None})                 # no limit: ended or idle
    assert s.watermark() == 50.0
    s.announce({"1": 40.0})                 # an older announcement (a redelivery) changes nothing
    assert s.watermark() == 50.0
    again = SourceClock.from_state(json.loads(json.dumps(s.to_state())), 3, "clock")
    assert again.watermark() == 50.0 and again.sources[2] == INF


def test_samples_of_a_node_taken_as_gone_are_late_not_merged():
    job, out = JobProcessor("j"), Output()
    gpus = [["GPU-0", 0, 90.0, 1800.0, 1980.0, 600.0, 700.0, 60.0, 0, 1, 2]]
    alive = {"job": "j", "node": "alive", "tenant": "t", "pool": "p", "interval": 5.0, "gpus": gpus}
    for ts in (100.0, 105.0, 110.0):
        job.push({**alive, "ts": ts}, out, ref=ts)
    job.release(111.0, out)                 # the dead node no longer holds the watermark back
    job.push({**alive, "node": "dead", "ts": 102.0}, out, ref="dead", source="by-job/0/9")
    assert out.counts["job_late"] == 1 and out.dead[0]["reason_code"] == "late"
    assert out.done == [100.0, 105.0, 110.0, "dead"]


def test_a_worker_stops_reporting_the_lag_of_partitions_it_no_longer_holds():
    m = WorkerMetrics()
    TP = namedtuple("TP", "topic partition")
    m.lag.labels("t", "0").set(5)
    m.lag.labels("t", "1").set(7)
    m.forget_partitions([TP("t", 1), TP("t", 3)])
    text = m.exposition().decode()
    assert 'partition="0"' in text and 'partition="1"' not in text
