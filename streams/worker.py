"""``gpufleet worker``: the stream processors on Kafka, as a faust-streaming app.

Composed top to bottom: topics, tables, the two stages (node, job), sinks, web
endpoints. Each stage works in batches, in this order, so that a worker killed
at any moment loses nothing and counts nothing twice:

1. process the batch's messages (the same plain-Python processors as the embedded mode);
2. write the resulting rows to ClickHouse (idempotent, retried while it is down);
3. send alerts, dead letters and job samples to their topics and wait for the broker;
4. save each touched processor's state to its table (changelog), waiting for the broker;
5. acknowledge, in offset order, the messages whose results are all durable; Faust commits
   up to the oldest message not acknowledged (one still waiting for the watermark stays so).

After a crash, state comes back from the changelog and the messages after the
committed offset come again: those already in the saved state are repeats and
ignored, the others are processed, and the rows they give are stored once.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from collections.abc import Callable

import faust
from faust.tables.table import Table

from .jobs import JobProcessor
from .node import NodeProcessor
from .output import Output
from .pipeline import Pipeline
from .sink import Sink

log = logging.getLogger("gpufleet.worker")
RAW = dict(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")


def topic_names(settings) -> dict[str, str]:
    p = settings.kafka.topic_prefix
    return {"telemetry": settings.kafka.telemetry_topic, "dlq": f"{settings.kafka.telemetry_topic}.dlq",
            "alerts": f"{p}.alerts", "by_job": f"{settings.kafka.telemetry_topic}.by-job"}


def internal_topics(settings) -> dict[str, int]:
    """Every topic the worker needs, with its partition count (created before Faust starts)."""
    n, app_id = settings.kafka.partitions, settings.worker.app_id
    t = topic_names(settings)
    return {t["telemetry"]: n, t["by_job"]: n, t["dlq"]: n, t["alerts"]: n,
            f"{app_id}-nodes-changelog": n, f"{app_id}-jobs-changelog": n, f"{app_id}-__assignor-__leader": 1}


class KeyedTable(Table):
    """A table whose keys are saved to the partition their input came from, whatever event is in hand
    (a batch ends with many keys touched; Faust would otherwise use the current event's partition)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.key_serializer = self.value_serializer = "raw"     # keys and values are bytes, saved as they are
        self.partition_of: dict[bytes, int] = {}

    def partition_for_key(self, key) -> int:
        return self.partition_of[key]


JOB_SAMPLES_PER_MESSAGE = 500      # job samples travel in groups, one Kafka message per group


def job_partition(job: str, partitions: int) -> int:
    """The by-job partition of ``job``: stable across workers and restarts."""
    return zlib.crc32(job.encode()) % partitions


class Share:
    """One part of a message that carries several job samples: the message is done when all are."""

    __slots__ = ("event", "left")

    def __init__(self, event, parts: int):
        self.event, self.left = event, parts


class Metrics:
    """The worker's Prometheus metrics, in a registry of its own."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        self.registry = r = CollectorRegistry()
        self.counts = Counter("gpufleet_worker_events", "What the stages saw, by kind", ["stage", "kind"], registry=r)
        self.clock_skew = Counter("gpufleet_worker_clock_skew", "Messages ahead of the clock, by node", ["node"],
                                  registry=r)
        self.sink_seconds = Histogram("gpufleet_worker_sink_batch_seconds", "Writing one batch to ClickHouse",
                                      registry=r, buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.sink_failures = Gauge("gpufleet_worker_sink_failures", "Failed store writes (retried)", registry=r)
        self.lag = Gauge("gpufleet_worker_consumer_lag", "Messages not yet read, by topic and partition",
                         ["topic", "partition"], registry=r)
        self.batches = Counter("gpufleet_worker_batches", "Batches made durable", ["stage"], registry=r)
        self.last_batch = Gauge("gpufleet_worker_last_batch_timestamp", "When a batch last became durable",
                                registry=r)

    def count(self, stage: str, counts) -> None:
        for kind, n in counts.items():
            if kind.startswith("clock_skew:"):
                self.clock_skew.labels(kind.split(":", 1)[1]).inc(n)
                log.warning("clock skew: %d messages from node %s are ahead of this worker's clock",
                            n, kind.split(":", 1)[1])
            else:
                self.counts.labels(stage, kind).inc(n)


class Stage:
    """One stage's batch loop (see the module docstring), around processors kept live in memory."""

    def __init__(self, name: str, app: faust.App, table: KeyedTable, sink: Sink, metrics: Metrics,
                 process: Callable, save: Callable, topics: dict, generation: Callable[[], int], partitions: int,
                 stale_upto: Callable[[], int]):
        self.name, self.app, self.table, self.sink, self.metrics = name, app, table, sink, metrics
        self.process, self.save, self.topics, self.generation = process, save, topics, generation
        self.stale_upto = stale_upto
        self.partitions = partitions
        self.out = Output()
        # Acknowledgements go out in offset order only: Faust commits past a message that is not
        # acknowledged when it is the only one at the committed offset (faust-streaming 0.15,
        # Consumer._new_offset), which would skip a message still waiting for the watermark.
        self.received: dict = {}      # tp -> {offset: event} not acknowledged yet
        self.finished: dict = {}      # tp -> offsets whose results are durable

    def forget(self) -> None:
        self.received.clear()
        self.finished.clear()

    async def _acknowledge(self, stream, done) -> None:
        for ev in done:
            if isinstance(ev, Share):
                ev.left -= 1
                if ev.left:
                    continue
                ev = ev.event
            if ev is not None:
                self.finished.setdefault(ev.message.tp, set()).add(ev.message.offset)
        for tp, waiting in self.received.items():
            finished = self.finished.get(tp, set())
            for offset in sorted(waiting):
                if offset not in finished:
                    break
                finished.discard(offset)
                await stream.ack(waiting.pop(offset))

    async def batch(self, stream, events) -> None:
        generation = self.generation()
        stale = self.stale_upto()
        fresh = [ev for ev in events if (ev.message.generation_id or 0) > stale]
        if len(fresh) != len(events):
            # Fetched in a consumer generation that has since been revoked (still in the batch buffer,
            # or taken between the revocation and the next assignment): the consumer is sent back to
            # the committed offsets, so they come again, in order, after the ones before them. Taken
            # now, they could move the watermark past messages not yet replayed, or save state ahead
            # of what the partition's new owner replays.
            self.metrics.counts.labels(self.name, "stale_skipped").inc(len(events) - len(fresh))
            log.info("%s stage: %d messages fetched before the rebalance skipped", self.name, len(events) - len(fresh))
            events = fresh
        for ev in events:
            tp = ev.message.tp
            if tp not in self.received:
                log.info("%s stage: %s/%s from offset %s (committed %s)", self.name, tp.topic, tp.partition,
                         ev.message.offset, self.app.consumer._committed_offset.get(tp))
            self.received.setdefault(tp, {})[ev.message.offset] = ev
        out = self.out
        touched = self.process(events, out)          # {state key: partition it belongs to}
        self.table.partition_of.update(touched)
        rows, alerts, dead = out.drain()
        job_samples, out.job_samples = out.job_samples, []
        done, out.done = out.done, []
        started = time.monotonic()
        self.sink.add(rows, alerts, dead)
        try:
            await asyncio.to_thread(self.sink.flush)      # retries while the store is down: backpressure
        finally:
            self.metrics.sink_failures.set(self.sink.failures)
        self.metrics.sink_seconds.observe(time.monotonic() - started)
        sends = [(self.topics["alerts"], a["dedup_key"].encode(), None, a) for a in alerts]
        sends += [(self.topics["dlq"], None, None, d) for d in dead]
        groups: dict[int, list] = {}                      # by-job partition -> its samples, in order
        for sample in job_samples:
            groups.setdefault(job_partition(sample["job"], self.partitions), []).append(sample)
        for partition, samples in sorted(groups.items()):
            for i in range(0, len(samples), JOB_SAMPLES_PER_MESSAGE):
                sends.append((self.topics["by_job"], None, partition, samples[i:i + JOB_SAMPLES_PER_MESSAGE]))
        delivered = []
        for topic, key, partition, value in sends:        # one at a time: a job's samples keep their order
            delivered.append(await topic.send(key=key, partition=partition, value=json.dumps(value).encode()))
        for fut in delivered:
            await fut                                     # acknowledged by the broker
        if self.generation() != generation:
            # A rebalance happened meanwhile: these partitions may belong to another worker now, which
            # restored the saved state and gets the unacknowledged messages again. Rows and events
            # written so far are idempotent; saving state or acknowledging now could undo its work.
            self.metrics.counts.labels(self.name, "batches_abandoned").inc()
            return
        for key in touched:
            value = self.save(key)
            if value is None:
                self.table.pop(key, None)                 # finished: a tombstone in the changelog
            else:
                self.table[key] = value
        await self.app.producer.flush()
        if self.generation() != generation:
            self.metrics.counts.labels(self.name, "batches_abandoned").inc()
            return
        await self._acknowledge(stream, done)
        self.metrics.count(self.name, out.counts)
        out.counts.clear()
        self.metrics.batches.labels(self.name).inc()
        self.metrics.last_batch.set(time.time())


def rewind_from_zero(consumer, topics: set[str]) -> None:
    """After a rebalance Faust sends every partition back to its committed offset, to deliver again what
    was not acknowledged; aiokafka skips the seek when that offset is 0 (or none was committed), so
    messages dropped during the table recovery would be lost there. This seeks those to offset 0
    (the broker moves an offset below its retention to the earliest one kept)."""
    seek_committed = consumer.perform_seek

    async def perform_seek() -> None:
        await seek_committed()
        for tp in consumer.assignment():
            if tp.topic in topics and not consumer._committed_offset.get(tp):
                await consumer.seek(tp, 0)
    consumer.perform_seek = perform_seek


def make_app(settings, store, model=None) -> faust.App:
    """The worker app for ``settings``, writing to ``store`` (nothing starts until it runs)."""
    cfg, w = settings.stream, settings.worker
    app = faust.App(
        w.app_id, broker=f"kafka://{settings.kafka.bootstrap}", store="memory://",
        topic_partitions=settings.kafka.partitions, topic_allow_declare=False, stream_wait_empty=False,
        broker_session_timeout=w.session_timeout_s, broker_heartbeat_interval=min(3.0, w.session_timeout_s / 3),
        broker_commit_interval=w.commit_interval_s, consumer_auto_offset_reset="earliest", producer_acks=-1,
        producer_compression_type="lz4", web_port=w.web_port, web_bind=w.web_host, datadir=w.data_dir,
        web_in_thread=False)
    names = topic_names(settings)
    topics = {k: app.topic(v, **RAW) for k, v in names.items()}
    rewind_from_zero(app.consumer, {names["telemetry"], names["by_job"]})
    nodes = app.tables.add(KeyedTable(app, name="nodes", default=None, partitions=settings.kafka.partitions,
                                      key_type=bytes, value_type=bytes, help="each node's processor state"))
    jobs = app.tables.add(KeyedTable(app, name="jobs", default=None, partitions=settings.kafka.partitions,
                                     key_type=bytes, value_type=bytes, help="each job's processor state"))
    metrics = Metrics()

    def load_node(name: str):
        raw = nodes.get(name.encode())
        return NodeProcessor.from_state(name, json.loads(raw)) if raw else None

    def load_job(name: str):
        raw = jobs.get(name.encode())
        return JobProcessor.from_state(name, json.loads(raw)) if raw else None

    pipeline = Pipeline(cfg, live=True, route_jobs=False, load_node=load_node, load_job=load_job, model=model)

    def process_telemetry(events, out: Output) -> dict[bytes, int]:
        pipeline.out, touched = out, {}
        for ev in events:
            m = ev.message
            msg = pipeline.submit(ev.value, f"{m.topic}/{m.partition}/{m.offset}", ref=ev,
                                  position=(m.partition, m.offset))
            if msg is not None:
                touched[msg.node.encode()] = m.partition
        return touched

    def process_job_samples(events, out: Output) -> dict[bytes, int]:
        touched = {}
        now = time.time()
        for ev in events:
            samples = json.loads(ev.value)
            if not samples:
                out.done.append(ev)
                continue
            share = Share(ev, len(samples))
            for sample in samples:
                pipeline.job(sample["job"]).push(sample, out, ref=share, node_timeout_s=cfg.job_node_timeout_s,
                                                 detection=pipeline.detection, now=now)
                touched[sample["job"].encode()] = ev.message.partition
        return touched

    def save_node(key: bytes):
        return json.dumps(pipeline.nodes[key.decode()].to_state()).encode()

    def save_job(key: bytes):
        job = pipeline.jobs[key.decode()]
        if job.finished:
            del pipeline.jobs[key.decode()]
            return None
        return json.dumps(job.to_state()).encode()

    generation = [0]              # rebalances seen: a batch under way when it changes is abandoned
    stale_gen = [-1]              # consumer generation last revoked: what it fetched is stale

    node_stage = Stage("node", app, nodes, Sink(store, max_rows=10_000_000, max_delay_s=0.0), metrics,
                       process_telemetry, save_node, topics, lambda: generation[0], settings.kafka.partitions,
                       lambda: stale_gen[0])
    job_stage = Stage("job", app, jobs, Sink(store, max_rows=10_000_000, max_delay_s=0.0), metrics,
                      process_job_samples, save_job, topics, lambda: generation[0], settings.kafka.partitions,
                      lambda: stale_gen[0])

    @app.on_partitions_revoked.connect
    async def forget(app, revoked, **kwargs) -> None:
        # Unacknowledged messages come again from the committed offsets after any rebalance,
        # and state comes from the tables: live processors are dropped, not reused, and a batch
        # under way is abandoned before it saves state or acknowledges anything.
        generation[0] += 1
        stale_gen[0] = app.consumer_generation_id
        pipeline.nodes.clear()
        pipeline.jobs.clear()
        node_stage.forget()
        job_stage.forget()

    @app.agent(topics["telemetry"], name="nodes")
    async def node_agent(stream):
        async for events in stream.noack_take(w.batch_max, within=w.batch_within_s):
            await node_stage.batch(stream, events)

    @app.agent(topics["by_job"], name="jobs")
    async def job_agent(stream):
        async for events in stream.noack_take(w.batch_max, within=w.batch_within_s):
            await job_stage.batch(stream, events)

    @app.timer(interval=5.0)
    async def consumer_lag() -> None:
        consumer = app.consumer
        sources = {names["telemetry"], names["by_job"]}
        try:
            for tp in consumer.assignment():
                if tp.topic in sources:
                    position, high = await consumer.position(tp), consumer.highwater(tp)
                    if position is not None and high is not None:
                        metrics.lag.labels(tp.topic, tp.partition).set(max(0, high - position))
        except Exception as err:     # a metric must never stop the worker (e.g. during a rebalance)
            log.debug("consumer lag not read: %s", err)

    @app.page("/metrics")
    async def metrics_page(web, request):
        from prometheus_client import generate_latest
        return web.bytes(generate_latest(metrics.registry), content_type="text/plain; version=0.0.4")

    @app.page("/health")
    async def health(web, request):
        failing = [s.name for s in (node_stage, job_stage) if s.sink.unavailable_since]
        status = 503 if failing else 200
        return web.json({"status": "store unavailable" if failing else "ok",
                         "partitions": sorted(f"{tp.topic}/{tp.partition}" for tp in app.consumer.assignment()),
                         "last_batch": metrics.last_batch._value.get()}, status=status)

    app.gpufleet = {"metrics": metrics, "pipeline": pipeline, "stages": (node_stage, job_stage)}
    return app


def run(settings, store, model=None, loglevel: str = "WARNING") -> int:
    """Run the worker until SIGTERM or SIGINT."""
    from faust.worker import Worker
    app = make_app(settings, store, model)
    worker = Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()
    return 0
