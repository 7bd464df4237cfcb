"""The two stages of the distributed mode, wired through in-memory partitions, give replay's rows and events
however far apart in event time the partitions are read (the job stage runs on watermarks, not guesses)."""
import asyncio
import json
import zlib
from collections import namedtuple
from dataclasses import dataclass

import pytest

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.contracts.events import BILLING_SCHEMA
from gpufleet.contracts.telemetry import end_of_stream
from gpufleet.sql.memory import MemoryStore
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.durable import MemoryTable, Outlets, Rebalances, Stage, Topics
from gpufleet.streams.jobs import JobProcessor
from gpufleet.streams.metrics import WorkerMetrics
from gpufleet.streams.node import NodeProcessor
from gpufleet.streams.pipeline import Driver, Pipeline
from gpufleet.streams.sink import Sink, alert_row, ledger_row
from gpufleet.streams.stages import JobStage, NodeStage, saved

P = 4
CFG = StreamConfig()
KEY = b"control key"
TP = namedtuple("TP", "topic partition")


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


class Log:
    """Topics as lists of partitions, each a list of values (what a broker keeps)."""

    def __init__(self):
        self.topics: dict[str, list[list[bytes]]] = {}

    def partition(self, topic, p):
        return self.topics.setdefault(topic, [[] for _ in range(P)])[p]

    async def send(self, topic, key, partition, value):
        if partition is None:
            partition = zlib.crc32(key or b"") % P
        self.partition(topic, partition).append(value)
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def flush(self):
        pass


class Worker:
    """Both stages over one pipeline, as one worker runs them, with their state in memory tables."""

    def __init__(self, log: Log):
        self.tables = {name: MemoryTable() for name in ("nodes", "jobs", "clocks")}
        self.store = MemoryStore()
        def junk(table):              # as the worker does: a changelog value no gpufleet saved is dead-lettered
            return lambda name, raw, why: pipeline.unreadable_state(table, name, raw, why)
        pipeline = Pipeline(CFG, driver=Driver(
            route_jobs=False, load_node=saved(self.tables["nodes"], NodeProcessor.from_state, junk("nodes")),
            load_job=saved(self.tables["jobs"], JobProcessor.from_state, junk("jobs"))))
        topics = Topics("alerts", "dlq", "by-job", P, other={BILLING_SCHEMA: "billing"})
        rebalances, metrics = Rebalances(), WorkerMetrics()
        nodes = NodeStage(pipeline, self.tables["clocks"], live=False, assigned=lambda: set(range(P)),
                          control_key=KEY)
        self.node = Stage("node", nodes, Outlets(Sink(self.store, 1, 0), log, {
            "nodes": self.tables["nodes"], "clocks": self.tables["clocks"]}, topics), rebalances, metrics)
        self.job = Stage("job", JobStage(pipeline, self.tables["jobs"], self.tables["clocks"], P), Outlets(
            Sink(self.store, 1, 0), log, {"jobs": self.tables["jobs"], "clocks": self.tables["clocks"]}, topics),
            rebalances, metrics)

    async def ack(self, ev):
        pass

    def feed(self, stage, topic, partition, values, start, batch=200):
        for i in range(0, len(values), batch):
            chunk = [Event(Msg(TP(topic, partition), start + i + k), v) for k, v in enumerate(values[i:i + batch])]
            asyncio.run(self.settled(stage, stage.batch(chunk, self.ack)))

    @staticmethod
    async def settled(stage, step):
        await step
        await stage.settle()


def by_partition(messages):
    parts = [[] for _ in range(P)]
    for m in messages:
        parts[zlib.crc32(m["node"].encode()) % P].append(json.dumps(m).encode())
    for part in parts:
        part.append(end_of_stream(0.0, key=KEY))
    return parts


def reference(messages):
    p, rows, events = Pipeline(CFG), {}, []
    for i, m in enumerate(messages):
        p.submit(m, f"f:{i}")
    p.flush()
    for table, new in p.out.rows.items():
        rows.setdefault(table.name, []).extend(new)
    events += p.out.events
    rows["billing_ledger"] = [ledger_row(e) for e in events if e["schema"] == BILLING_SCHEMA]   # the sink's rows
    return rows, events


def stored(store):
    rows = {k: v for k, v in store.rows.items() if k not in ("alerts", "dead_letters")}
    return rows, sorted(store.rows.get("alerts", []))


@pytest.fixture(scope="module")
def fleet():
    spec = FleetSpec(nodes=6, gpus_per_node=4, hours=2, seed=12, faults_per_kind=2, training_share=0.7)
    return list(Simulation(spec).messages())


def catch_up(worker, log, read):
    """The job stage reads whatever the by-job partitions hold that it has not read yet."""
    for p in range(P):
        values = log.partition("by-job", p)
        worker.feed(worker.job, "by-job", p, values[read[p]:], read[p])
        read[p] = len(values)


@pytest.mark.parametrize("order", ["in step", "one partition at a time", "backlog while the job stage keeps up"])
def test_partitions_read_far_apart_give_replays_rows_and_events(fleet, order):
    ref_rows, ref_events = reference(fleet)
    assert any(r[4] > 1 for r in ref_rows["job_rollup_1m"]), "the fleet must have multi-node jobs"
    log = Log()
    worker = Worker(log)
    parts, read = by_partition(fleet), [0] * P
    if order == "in step":                        # partitions interleaved in small chunks
        for start in range(0, max(map(len, parts)), 50):
            for p in range(P):
                worker.feed(worker.node, "telemetry", p, parts[p][start:start + 50], start)
            catch_up(worker, log, read)
    else:                                         # a backlog: each partition read whole before the next
        for p in reversed(range(P)):
            worker.feed(worker.node, "telemetry", p, parts[p], 0)
            if order != "one partition at a time":
                catch_up(worker, log, read)
    catch_up(worker, log, read)
    rows, alerts = stored(worker.store)
    assert sorted(rows) == sorted(ref_rows)
    for table, expected in ref_rows.items():
        assert sorted(map(repr, rows[table])) == sorted(map(repr, expected)), table
    ref_alerts = sorted({alert_row(e) for e in ref_events if e["schema"] != BILLING_SCHEMA})
    assert sorted(set(alerts)) == ref_alerts and ref_alerts
    billing = [json.loads(v) for p in range(P) for v in log.partition("billing", p)]
    assert rows["billing_ledger"] and sorted(map(repr, billing)) == sorted(
        repr(e) for e in ref_events if e["schema"] == BILLING_SCHEMA)       # the billing topic: replay's records
    assert worker.store.count("dead_letters") == 0
