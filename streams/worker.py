"""``gpufleet worker``: the stream processors on Kafka, as a faust-streaming app.

Composed top to bottom: topics, state tables, the two stages (node, job) with their sinks, the agents
that feed them, timers, web endpoints. The batch protocol that makes results durable before inputs
are acknowledged is in durable.py; the corrections to Faust are in faust_compat.py.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import faust

from gpufleet.contracts.events import BILLING_SCHEMA
from gpufleet.contracts.state import StateError

from .durable import Rebalances, Stage, Topics
from .faust_compat import KeyedTable, deliver_every_record, rewind_from_zero
from .jobs import JobProcessor
from .metrics import WorkerMetrics
from .node import NodeProcessor
from .pipeline import Pipeline
from .progress import PartitionProgress, Restarts
from .sink import Sink
from .stages import CLOCKS, JOBS, NODES, JobStage, NodeStage, saved

log = logging.getLogger("gpufleet.worker")


def topic_names(settings) -> dict[str, str]:
    p = settings.kafka.topic_prefix
    return {"telemetry": settings.kafka.telemetry_topic, "dlq": f"{settings.kafka.telemetry_topic}.dlq",
            "alerts": f"{p}.alerts", "billing": f"{p}.billing",
            "by_job": f"{settings.kafka.telemetry_topic}.by-job"}


def internal_topics(settings) -> dict[str, int]:
    """Every topic the worker needs, with its partition count (created before Faust starts)."""
    n, app_id = settings.kafka.partitions, settings.worker.app_id
    t = topic_names(settings)
    return {t["telemetry"]: n, t["by_job"]: n, t["dlq"]: n, t["alerts"]: n, t["billing"]: n,
            f"{app_id}-nodes-changelog": n,
            f"{app_id}-jobs-changelog": n, f"{app_id}-clocks-changelog": n, f"{app_id}-__assignor-__leader": 1}


class FaustBus:
    """The broker through the app's producer (durable.Bus)."""

    def __init__(self, app: faust.App, topics: dict[str, faust.TopicT]):
        self.app, self.topics = app, topics

    async def send(self, topic: str, key, partition, value):
        return await self.topics[topic].send(key=key, partition=partition, value=value)

    async def flush(self) -> None:
        await self.app.producer.flush()


def make_app(settings, store, model=None) -> faust.App:
    """The worker app for ``settings``, writing to ``store`` (nothing starts until it runs)."""
    w, n = settings.worker, settings.kafka.partitions
    app = faust.App(
        w.app_id, broker=f"kafka://{settings.kafka.bootstrap}", store="memory://", topic_partitions=n,
        topic_allow_declare=False, stream_wait_empty=False, broker_session_timeout=w.session_timeout_s,
        broker_heartbeat_interval=min(3.0, w.session_timeout_s / 3), broker_commit_interval=w.commit_interval_s,
        consumer_auto_offset_reset="earliest", producer_acks=-1, producer_compression_type="lz4",
        web_port=w.web_port, web_bind=w.web_host, datadir=w.data_dir, web_in_thread=False)

    # topics
    names = topic_names(settings)
    topics = {name: app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
              for name in names.values()}
    # each stream partition is delivered whole and taken in order from where reading restarts (durable.py)
    rebalances = Rebalances(reports_starts=True)
    sources = {names["telemetry"], names["by_job"]}
    rewind_from_zero(app.consumer, sources, rebalances.started)
    deliver_every_record(app.consumer, sources)

    # state tables (changelogs <app_id>-nodes-changelog, -jobs-changelog, -clocks-changelog)
    tables = {name: KeyedTable(app, name=name, default=None, partitions=n, key_type=bytes, value_type=bytes,
                               help=what)
              for name, what in ((NODES, "each node's processor state"), (JOBS, "each job's processor state"),
                                 (CLOCKS, "each partition's clock, for the job stage's watermark"))}
    for table in tables.values():
        app.tables.add(table)

    # the stages: one pipeline, state restored from the tables on first use
    def junk(table: str):         # a changelog value no gpufleet saved: dead-lettered, the key starts afresh
        return lambda name, raw, why: pipeline.unreadable_state(table, name, raw, why)
    pipeline = Pipeline(settings.stream, live=True, route_jobs=False, model=model, billing=settings.billing,
                        load_node=saved(tables[NODES], NodeProcessor.from_state, junk(NODES)),
                        load_job=saved(tables[JOBS], JobProcessor.from_state, junk(JOBS)))
    metrics = WorkerMetrics()
    outputs = Topics(alerts=names["alerts"], dead_letters=names["dlq"], by_job=names["by_job"], partitions=n,
                     other={BILLING_SCHEMA: names["billing"]})
    bus = FaustBus(app, topics)
    unread: dict[tuple[str, int], int] = {}        # (topic, partition) -> records not read yet (for idle nodes)
    progress = PartitionProgress(w.stuck_after_s)
    restarts = Restarts(w.max_restarts_per_minute)
    offsets: list = []                             # the broker's offsets, read in a thread (kafka.OffsetReader)

    def sink() -> Sink:
        return Sink(store, settings.store.batch_rows, settings.store.batch_seconds)

    def assigned() -> set[int]:
        return {tp.partition for tp in app.consumer.assignment() if tp.topic == names["telemetry"]}

    key = settings.kafka.control_key
    nodes = NodeStage(pipeline, tables[CLOCKS], assigned=assigned,
                      lag=lambda partition: unread.get((names["telemetry"], partition)),
                      control_key=key.get_secret_value().encode() if key is not None else None)
    jobs = JobStage(pipeline, tables[JOBS], tables[CLOCKS], n)
    node_stage = Stage("node", nodes, sink(), bus, {NODES: tables[NODES], CLOCKS: tables[CLOCKS]}, outputs,
                       rebalances, metrics, w.session_timeout_s, reread=app.consumer.seek)
    job_stage = Stage("job", jobs, sink(), bus, {JOBS: tables[JOBS], CLOCKS: tables[CLOCKS]}, outputs, rebalances,
                      metrics, w.session_timeout_s, reread=app.consumer.seek)
    stages = (node_stage, job_stage)
    metrics.watch_store(lambda: sum(s.sink.failures for s in stages),
                        lambda: max(s.sink.unavailable_s() for s in stages))

    async def revoked(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        # Unacknowledged inputs come again from the committed offsets after any rebalance, and state
        # comes from the tables: live processors are dropped and a batch under way is abandoned.
        partitions = args[0] if args else kwargs.get("revoked", set())
        rebalances.revoked(app.consumer_generation_id)
        for stage in stages:
            stage.forget()
        metrics.forget_partitions(partitions)
        progress.forget((tp.topic, tp.partition) for tp in partitions)
        for tp in partitions:
            unread.pop((tp.topic, tp.partition), None)
        log.info("rebalance: partitions revoked: %s", _names(partitions))

    async def on_assigned(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        log.info("rebalance: partitions assigned: %s", _names(args[0] if args else kwargs.get("assigned", set())))

    # mode types a handler's `signal` keyword by a name mypy cannot resolve: the handlers fit at run time
    app.on_partitions_revoked.connect(revoked)  # type: ignore[arg-type]
    app.on_partitions_assigned.connect(on_assigned)  # type: ignore[arg-type]

    # agents
    async def feed(stage: Stage, stream) -> None:
        restarts.started(stage.name)                # Faust starts an agent again after it crashed
        if restarts.total.get(stage.name):
            metrics.restarts.labels(stage.name).inc()
            log.error("%s agent restarted (%d times in the last minute)", stage.name, restarts.recent(stage.name))
        try:
            async for inputs in stream.noack_take(w.batch_max, within=w.batch_within_s):
                await stage.batch(inputs, stream.ack)
        except StateError as err:
            log.critical("%s stage: %s", stage.name, err)
            await app.crash(err)

    @app.agent(topics[names["telemetry"]], name="nodes")
    async def node_agent(stream):
        await feed(node_stage, stream)

    @app.agent(topics[names["by_job"]], name="jobs")
    async def job_agent(stream):
        await feed(job_stage, stream)

    # timers
    @app.timer(interval=0.5)
    async def durable_when_due() -> None:
        for stage in stages:
            await stage.tick()

    @app.timer(interval=1.0)
    async def idle_nodes() -> None:         # the node stage acts on the wall clock too (clocks.py)
        await node_stage.poke()

    @app.timer(interval=5.0)
    async def partition_progress() -> None:
        """Each assigned partition's committed offset against its end, from the broker (not the consumer's
        position: a partition read to its end whose work never finishes must show its lag)."""
        if not offsets:
            from .kafka import OffsetReader
            offsets.append(OffsetReader(settings.kafka.bootstrap, w.app_id))
        held = [(tp.topic, tp.partition) for tp in app.consumer.assignment() if tp.topic in sources]
        try:                         # read to the end? (a node silent while its partition is, is idle: clocks.py)
            for tp in app.consumer.assignment():
                if tp.topic in sources:
                    position, high = await app.consumer.position(tp), app.consumer.highwater(tp)
                    if position is not None and high is not None:
                        unread[(tp.topic, tp.partition)] = max(0, high - position)
        except Exception as err:     # e.g. during a rebalance
            log.debug("positions not read: %s", err)
        try:
            read = await asyncio.to_thread(offsets[0].read, held)
        except Exception as err:     # a metric must never stop the worker (the broker down, a rebalance)
            log.debug("committed offsets not read: %s", err)
            return
        now = time.monotonic()
        for (topic, partition), (committed, end) in read.items():
            progress.observe((topic, partition), committed, end, now)
            labels = (topic, str(partition))
            metrics.lag.labels(*labels).set(progress.lag((topic, partition)))
            metrics.committed.labels(*labels).set(committed or 0)
            waited = progress.waiting_s((topic, partition), now)
            metrics.stuck_seconds.labels(*labels).set(waited)
            metrics.stuck.labels(*labels).set(1 if waited >= w.stuck_after_s else 0)

    # web endpoints
    @app.page("/metrics")
    async def metrics_page(web, request):
        return web.bytes(metrics.exposition(), content_type="text/plain; version=0.0.4")

    @app.page("/health")
    async def health(web, request):
        failing = [s.name for s in stages if s.sink.unavailable_since]
        stuck = {f"{t}/{p}": round(s) for (t, p), s in sorted(progress.stuck(time.monotonic()).items())}
        crashing = restarts.restarting()
        problems = (["store unavailable"] if failing else []) + \
            [f"{name} stuck: committed offset unmoved for {s} s while records wait" for name, s in stuck.items()] + \
            [f"{agent} agent restarted {n} times in the last minute" for agent, n in crashing.items()]
        status = "store unavailable" if failing else "degraded" if problems else "ok"
        return web.json({"status": status, "problems": problems, "stuck": stuck, "restarting": crashing,
                         "partitions": sorted(f"{tp.topic}/{tp.partition}" for tp in app.consumer.assignment()),
                         "last_batch": metrics.last_batch}, status=503 if problems else 200)

    return app


def _names(partitions) -> str:
    return ", ".join(sorted(f"{tp.topic}/{tp.partition}" for tp in partitions)) or "none"


def run(settings, store, model=None, loglevel: str = "WARNING") -> int:
    """Run the worker until SIGTERM or SIGINT."""
    from faust.worker import Worker
    app = make_app(settings, store, model)
    worker = Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()
    return 0
