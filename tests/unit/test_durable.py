"""The durable-batch protocol (streams/durable.py) against an in-memory stream, bus, table and store."""
import asyncio
import json
import threading
from collections import namedtuple
from dataclasses import dataclass

import pytest
from helpers import gpu, message

from gpufleet.sql.memory import MemoryStore
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.durable import MemoryTable, Outlets, Rebalances, Stage, Topics
from gpufleet.streams.jobs import JobProcessor
from gpufleet.streams.metrics import WorkerMetrics
from gpufleet.streams.node import NodeProcessor
from gpufleet.streams.pipeline import Driver, Pipeline
from gpufleet.streams.sink import Sink
from gpufleet.streams.stages import NodeStage, saved

TP = namedtuple("TP", "topic partition")
TOPIC = "telemetry"


@dataclass
class Msg:
    tp: TP
    offset: int
    generation_id: int = 1

    @property
    def topic(self):
        return self.tp.topic

    @property
    def partition(self):
        return self.tp.partition


@dataclass
class Event:
    message: Msg
    value: bytes


def events(messages, partition=0, start=0, generation=1):
    return [Event(Msg(TP(TOPIC, partition), start + i, generation), json.dumps(m).encode())
            for i, m in enumerate(messages)]


class Log(list):
    """Every durable step, in the order it happened."""


class MemoryBus:
    def __init__(self, log: Log):
        self.log, self.sent = log, []

    async def send(self, topic, key, partition, value):
        self.sent.append((topic, key, partition, json.loads(value)))
        self.log.append(("send", topic))
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def flush(self):
        self.log.append(("flush",))


class LoggedTable(MemoryTable):
    def __init__(self, log: Log):
        super().__init__()
        self.log = log

    def __setitem__(self, key, value):
        self.log.append(("save", key))
        super().__setitem__(key, value)


class World:
    """One stage over a pipeline, with everything it talks to in memory."""

    def __init__(self, table=None, store=None, cfg=None, max_rows=1, log=None):
        self.log = log if log is not None else Log()
        self.store = store or MemoryStore()
        self.store.before_write = self.store.before_write or (lambda t: self.log.append(("write", t)))
        self.table = table if table is not None else LoggedTable(self.log)
        self.pipeline = Pipeline(cfg or StreamConfig(lateness_s=0), detect=False, driver=Driver(
            route_jobs=False, load_node=saved(self.table, NodeProcessor.from_state),
            load_job=saved(MemoryTable(), JobProcessor.from_state)))
        self.bus, self.rebalances, self.metrics = MemoryBus(self.log), Rebalances(), WorkerMetrics()
        self.acked = []
        self.clocks = MemoryTable()
        self.stage = Stage("node", NodeStage(self.pipeline, self.clocks, live=False), Outlets(
            Sink(self.store, max_rows, 0.0, backoff_s=(0.01, 0.02)), self.bus,
            {"nodes": self.table, "clocks": self.clocks}, Topics("alerts", "dlq", "by-job", 4)),
            self.rebalances, self.metrics)

    async def ack(self, ev):
        self.acked.append(ev.message.offset)
        self.log.append(("ack", ev.message.offset))

    def run(self, batch):
        asyncio.run(self.settled(self.stage.batch(batch, self.ack)))

    async def settled(self, step):
        """A step of the stage, and the durable work it started in the background, to its end."""
        await step
        await self.stage.settle()

    def counted(self, kind):
        return self.metrics.events.labels("node", kind)._value.get()


def ticks(n, node="n1", t0=1000.0, **gpu_fields):
    return [message(t0 + 5 * i, node=node, gpus=[gpu(0, **gpu_fields)]) for i in range(n)]


def test_results_are_durable_before_their_input_is_acknowledged():
    w = World()
    w.run(events(ticks(6)))
    # lateness 0: the newest message waits for the watermark; the others are processed
    assert w.acked == [0, 1, 2, 3, 4]
    first_ack = w.log.index(("ack", 0))
    steps = [s[0] for s in w.log[:first_ack]]
    assert "write" in steps and ("save", b"n1") in w.log[:first_ack] and steps[-1] == "flush"
    assert steps.index("flush") > max(i for i, s in enumerate(steps) if s in ("write", "send", "save"))
    assert w.store.count("gpu_samples") == 5
    assert w.bus.sent and all(topic == "by-job" for topic, *_ in w.bus.sent)
    # the job samples first, then the partition's watermark to every by-job partition
    assert [v for _, _, partition, v in w.bus.sent[-4:]] == [[{"watermarks": {"0": 1025.0}}]] * 4


def test_acknowledgements_go_out_in_offset_order_only():
    w = World(cfg=StreamConfig(lateness_s=12))
    msgs = ticks(6)
    # offset 2 is the newest tick: it waits for the watermark while later offsets (older ticks) are done
    order = [msgs[0], msgs[1], msgs[5], msgs[2], msgs[3], msgs[4]]
    w.run(events(order))
    assert w.acked == [0, 1]
    w.run(events(ticks(4, t0=1030.0), start=6))
    assert w.acked[:6] == [0, 1, 2, 3, 4, 5]


def test_a_batch_under_way_when_a_rebalance_starts_is_abandoned():
    gate, entered = threading.Event(), threading.Event()
    w = World()

    def slow_write(table):
        entered.set()
        gate.wait(5)
    w.store.before_write = slow_write

    async def scenario():
        task = asyncio.create_task(w.stage.batch(events(ticks(4)), w.ack))
        await asyncio.to_thread(entered.wait, 5)
        w.rebalances.revoked(consumer_generation=1)      # the revocation arrives mid-write
        w.stage.forget()
        gate.set()
        await task
        await w.stage.settle()
    asyncio.run(scenario())
    assert w.acked == [] and len(w.table) == 0 and len(w.clocks) == 0, "nothing acknowledged, no state saved"
    assert w.counted("batches_abandoned") == 1
    # what the revoked generation fetched and is handed over later is skipped; the next generation goes on
    w.store.before_write = None
    w.run(events(ticks(4), generation=1))
    assert w.acked == [] and w.counted("stale_skipped") == 4
    w.run(events(ticks(4), generation=2))
    assert w.acked == [0, 1, 2]


def test_the_next_inputs_are_processed_while_the_results_before_them_are_made_durable():
    gate, entered = threading.Event(), threading.Event()
    w = World()

    def slow_first_write(table):
        w.log.append(("write", table))
        if not entered.is_set():
            entered.set()
            gate.wait(5)
    w.store.before_write = slow_first_write

    async def scenario():
        first = asyncio.create_task(w.stage.batch(events(ticks(4)), w.ack))
        await asyncio.to_thread(entered.wait, 5)               # the first batch's store write is under way
        second = asyncio.create_task(w.stage.batch(events(ticks(4, t0=1020.0), start=4), w.ack))
        await asyncio.sleep(0.2)
        assert w.pipeline.nodes["n1"].gate.max_ts == 1035.0, "the second batch is processed meanwhile"
        assert w.acked == [] and len(w.table) == 0, "nothing of either is saved or acknowledged yet"
        gate.set()
        await first
        await second
        await w.stage.settle()
    asyncio.run(scenario())
    assert w.acked == [0, 1, 2, 3, 4, 5, 6]
    saves = [i for i, step in enumerate(w.log) if step == ("save", b"n1")]
    # each batch's state is saved after its rows are written, and before its own inputs are acknowledged:
    # the second batch's only once the first one's inputs are
    assert len(saves) == 2 and saves[0] < w.log.index(("ack", 0)) < w.log.index(("ack", 2)) < saves[1]
    assert saves[1] < w.log.index(("ack", 3))
    assert w.store.count("gpu_samples") == 7


def test_a_store_that_fails_and_recovers_loses_nothing_and_holds_the_acknowledgements():
    store = MemoryStore()
    store.unavailable = 3
    w = World(store=store)
    w.run(events(ticks(5)))
    assert w.stage.sink.failures == 3 and w.stage.sink.unavailable_since is None
    assert w.stage.sink.unavailable_s() > 0
    assert store.count("gpu_samples") == 4 and w.acked == [0, 1, 2, 3]


def test_inputs_delivered_again_after_a_restart_are_recognised_by_offset_and_counted_once():
    table = MemoryTable()
    first = World(table=table)
    first.run(events(ticks(8)))
    assert first.acked == list(range(7))
    # the worker dies before Faust commits: a new one restores the state and gets everything again
    again = World(table=table)
    again.clocks.update(first.clocks)
    again.stage.tables["clocks"] = again.clocks
    again.store = first.store
    again.stage.sink.store = first.store
    again.run(events(ticks(8)))
    assert again.pipeline.out is not None
    assert again.counted("replayed") == 7
    assert first.store.count("gpu_samples") == 7, "no row written twice"
    assert again.acked == list(range(7))


def test_results_gather_until_the_sink_is_due():
    w = World(max_rows=10_000)
    w.stage.sink.max_delay_s = 3600
    w.run(events(ticks(4)))
    assert w.acked == [] and w.store.count("gpu_samples") == 0 and w.stage.pending
    w.stage.sink.max_delay_s = 0
    asyncio.run(w.settled(w.stage.tick()))
    assert w.acked == [0, 1, 2] and w.store.count("gpu_samples") == 3


def test_after_a_rebalance_a_partition_is_taken_in_order_from_where_reading_restarts():
    # Faust delivered the inputs after the committed offset out of order around a rebalance (a stale read
    # offset): taken in that order, the inputs still waiting for the watermark when state was saved were
    # behind it and taken for inputs replayed, and their rows were never stored
    cfg = StreamConfig(lateness_s=12)
    msgs = ticks(12)                                  # ts 1000..1055 at offsets 0..11
    in_order = World(cfg=cfg)
    in_order.run(events(msgs))
    table, store = MemoryTable(), MemoryStore()
    first = World(table=table, store=store, cfg=cfg)
    first.run(events(msgs[:8]))
    assert first.acked == [0, 1, 2, 3, 4]             # 5, 6 and 7 wait for the watermark: committed at 5
    again = World(table=table, store=store, cfg=cfg)
    again.stage.tables["clocks"] = again.clocks = first.clocks
    again.rebalances.reports_starts = True
    again.rebalances.revoked(consumer_generation=1)
    again.run(events(msgs[10:], start=10, generation=2))      # before the seek to the committed offset
    assert again.acked == [] and store.count("gpu_samples") == 5, "nothing taken before the seek"
    again.rebalances.started(2, {TP(TOPIC, 0): 5})
    again.run(events(msgs[5:], start=5, generation=2))        # from the committed offset
    assert store.count("gpu_samples") == in_order.store.count("gpu_samples") == 9
    assert again.acked == [5, 6, 7, 8] and again.counted("replayed") == 0
    assert again.counted("out_of_order_skipped") == 2


def test_a_seek_reported_for_a_generation_revoked_since_places_nothing():
    w = World()
    w.rebalances.reports_starts = True
    w.rebalances.revoked(consumer_generation=1)
    w.rebalances.revoked(consumer_generation=2)
    w.rebalances.started(2, {TP(TOPIC, 0): 3})        # a seek made before the second revocation
    w.run(events(ticks(4), generation=3))
    assert w.acked == [] and w.store.count("gpu_samples") == 0
    w.rebalances.started(3, {TP(TOPIC, 0): 0})
    asyncio.run(w.settled(w.stage.poke()))            # what waited for the seek is taken now
    assert w.acked == [0, 1, 2] and w.store.count("gpu_samples") == 3


def test_inputs_delivered_again_after_the_seek_are_taken_once():
    # the consumer reads from the committed offset before the seek there, and again after it
    inputs = [*ticks(3), {"schema": "not telemetry"}, *ticks(3, t0=1015.0)]
    w = World()
    w.run(events(inputs[:5], generation=2))
    w.run(events(inputs, generation=2))
    assert w.store.count("dead_letters") == 1 and w.store.count("gpu_samples") == 5
    assert w.acked == [0, 1, 2, 3, 4, 5] and w.counted("repeats_skipped") == 5


def test_an_input_not_delivered_holds_its_partition_and_is_read_again():
    w = World()
    sent_back = []

    async def reread(tp, offset):
        sent_back.append((tp.partition, offset))
    w.stage.reread = reread
    msgs = events(ticks(6))
    w.run(msgs[:2])
    w.run(msgs[3:5])                                  # offset 2 never came: 3 and 4 are not taken
    w.run(msgs[3:5])
    assert w.acked == [0] and sent_back == [(0, 2)], "sent back once to the one missing"
    w.run(msgs[2:])
    assert w.acked == [0, 1, 2, 3, 4] and w.store.count("gpu_samples") == 5
    assert w.counted("out_of_order_skipped") == 4


def test_after_a_pause_a_worker_waits_to_hear_of_a_rebalance_before_acting():
    # frozen (SIGSTOP) past its session: the inputs it then holds belong to a generation the group revoked
    # meanwhile; acting on them at once would publish events the partitions' new owner publishes too
    w = World()
    w.run(events(ticks(2)))
    assert w.acked == [0]
    sent = len(w.bus.sent)

    async def scenario():
        w.stage.last_call -= w.stage.session_s + 1          # the last call was before the pause
        task = asyncio.create_task(w.stage.batch(events(ticks(4, t0=1010.0), start=2), w.ack))
        await asyncio.sleep(0.2)
        assert not task.done(), "the first call after a pause waits"
        w.rebalances.revoked(consumer_generation=1)        # the consumer hears of it meanwhile
        w.stage.forget()
        await task
        await w.stage.settle()
    asyncio.run(scenario())
    assert w.acked == [0] and len(w.bus.sent) == sent and w.counted("stale_skipped") == 4
    assert w.counted("pauses") == 1


def test_a_failure_while_results_are_made_durable_in_the_background_shows_at_the_next_tick():
    w = World()

    class Broken(Exception):
        pass

    async def flush():
        raise Broken("the broker is gone")
    w.bus.flush = flush

    async def scenario():
        await w.stage.batch(events(ticks(3)), w.ack)
        await asyncio.sleep(0.05)                 # the background step fails meanwhile
        with pytest.raises(Broken):
            await w.stage.tick()
        assert w.stage.inflight is None
    asyncio.run(scenario())
    assert w.acked == [], "nothing acknowledged"
