"""``gpufleet worker``: the stream processors on Kafka, as a faust-streaming app.

Composed top to bottom (``make_app``): topics, state tables, the two stages (node, job) with their sinks, the
agents that feed them, timers, web endpoints; what they share is one :class:`Parts`; the worker's view of its
own progress is progress.py's :class:`Watch`. The batch protocol that makes results durable before inputs
are acknowledged is in durable.py; the corrections to Faust are in faust_compat.py.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import faust

from gpufleet.contracts.events import BILLING_SCHEMA
from gpufleet.contracts.state import StateError

from .durable import Outlets, Rebalances, Stage, Topics
from .faust_compat import KeyedTable, deliver_every_record, rewind_from_zero
from .jobs import JobProcessor
from .metrics import WorkerMetrics
from .node import NodeProcessor
from .pipeline import Driver, Pipeline
from .progress import Watch
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


@dataclass
class Parts:
    """What the worker's agents, timers and pages share."""

    app: faust.App
    settings: Any
    names: dict[str, str]                     # topic role -> topic name (topic_names)
    rebalances: Rebalances
    metrics: WorkerMetrics
    watch: Watch
    stages: tuple[Stage, Stage] | None = None   # node, job

    @property
    def sources(self) -> set[str]:
        return {self.names["telemetry"], self.names["by_job"]}


def make_app(settings, store, model=None) -> faust.App:
    """The worker app for ``settings``, writing to ``store`` (nothing starts until it runs): topics, state tables,
    the two stages with their sinks, the agents that feed them, timers, web pages."""
    w, n = settings.worker, settings.kafka.partitions
    app = faust.App(
        w.app_id, broker=f"kafka://{settings.kafka.bootstrap}", store="memory://", topic_partitions=n,
        topic_allow_declare=False, stream_wait_empty=False, broker_session_timeout=w.session_timeout_s,
        broker_heartbeat_interval=min(3.0, w.session_timeout_s / 3), broker_commit_interval=w.commit_interval_s,
        consumer_auto_offset_reset="earliest", producer_acks=-1, producer_compression_type="lz4",
        web_port=w.web_port, web_bind=w.web_host, datadir=w.data_dir, web_in_thread=False)
    metrics = WorkerMetrics()
    parts = Parts(app, settings, topic_names(settings), Rebalances(reports_starts=True), metrics,
                  Watch(settings.kafka.bootstrap, w.app_id, w.stuck_after_s, w.max_restarts_per_minute, metrics))
    topics = {name: app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
              for name in parts.names.values()}
    # each stream partition is delivered whole and taken in order from where reading restarts (durable.py)
    rewind_from_zero(app.consumer, parts.sources, parts.rebalances.started)
    deliver_every_record(app.consumer, parts.sources)
    parts.stages = _stages(parts, _tables(app, n), FaustBus(app, topics), store, model)
    _rebalances(parts)
    _agents(parts, topics)
    _timers(parts)
    _pages(parts)
    return app


def _tables(app: faust.App, partitions: int) -> dict[str, KeyedTable]:
    """The state tables (changelogs <app_id>-nodes-changelog, -jobs-changelog, -clocks-changelog)."""
    tables = {name: KeyedTable(app, name=name, default=None, partitions=partitions, key_type=bytes,
                               value_type=bytes, help=what)
              for name, what in ((NODES, "each node's processor state"), (JOBS, "each job's processor state"),
                                 (CLOCKS, "each partition's clock, for the job stage's watermark"))}
    for table in tables.values():
        app.tables.add(table)
    return tables


def _stages(parts: Parts, tables: dict[str, KeyedTable], bus: FaustBus, store, model) -> tuple[Stage, Stage]:
    """The node and job stages: one pipeline, state restored from the tables on first use."""
    settings, names, app = parts.settings, parts.names, parts.app
    w, n = settings.worker, settings.kafka.partitions

    def junk(table: str):         # a changelog value no gpufleet saved: dead-lettered, the key starts afresh
        return lambda name, raw, why: pipeline.unreadable_state(table, name, raw, why)
    pipeline = Pipeline(settings.stream, model=model, billing=settings.billing, driver=Driver(
        live=True, route_jobs=False, load_node=saved(tables[NODES], NodeProcessor.from_state, junk(NODES)),
        load_job=saved(tables[JOBS], JobProcessor.from_state, junk(JOBS))))
    outputs = Topics(alerts=names["alerts"], dead_letters=names["dlq"], by_job=names["by_job"], partitions=n,
                     other={BILLING_SCHEMA: names["billing"]})

    def sink() -> Sink:
        return Sink(store, settings.store.batch_rows, settings.store.batch_seconds)

    def assigned() -> set[int]:
        return {tp.partition for tp in app.consumer.assignment() if tp.topic == names["telemetry"]}

    key = settings.kafka.control_key
    nodes = NodeStage(pipeline, tables[CLOCKS], assigned=assigned,
                      lag=lambda partition: parts.watch.unread.get((names["telemetry"], partition)),
                      control_key=key.get_secret_value().encode() if key is not None else None)
    jobs = JobStage(pipeline, tables[JOBS], tables[CLOCKS], n)
    node_stage = Stage("node", nodes, Outlets(sink(), bus, {NODES: tables[NODES], CLOCKS: tables[CLOCKS]}, outputs),
                       parts.rebalances, parts.metrics, w.session_timeout_s, reread=app.consumer.seek)
    job_stage = Stage("job", jobs, Outlets(sink(), bus, {JOBS: tables[JOBS], CLOCKS: tables[CLOCKS]}, outputs),
                      parts.rebalances, parts.metrics, w.session_timeout_s, reread=app.consumer.seek)
    stages = (node_stage, job_stage)
    parts.metrics.watch_store(lambda: sum(s.sink.failures for s in stages),
                              lambda: max(s.sink.unavailable_s() for s in stages))
    return stages


def _rebalances(parts: Parts) -> None:
    app = parts.app

    async def revoked(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        # Unacknowledged inputs come again from the committed offsets after any rebalance, and state
        # comes from the tables: live processors are dropped and a batch under way is abandoned.
        partitions = args[0] if args else kwargs.get("revoked", set())
        parts.rebalances.revoked(app.consumer_generation_id)
        for stage in parts.stages or ():
            stage.forget()
        parts.watch.forget(partitions)
        log.info("rebalance: partitions revoked: %s", _names(partitions))

    async def on_assigned(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        log.info("rebalance: partitions assigned: %s", _names(args[0] if args else kwargs.get("assigned", set())))

    # mode types a handler's `signal` keyword by a name mypy cannot resolve: the handlers fit at run time
    app.on_partitions_revoked.connect(revoked)  # type: ignore[arg-type]
    app.on_partitions_assigned.connect(on_assigned)  # type: ignore[arg-type]


def _agents(parts: Parts, topics: dict[str, faust.TopicT]) -> None:
    app, w = parts.app, parts.settings.worker
    assert parts.stages is not None
    node_stage, job_stage = parts.stages

    async def feed(stage: Stage, stream) -> None:
        parts.watch.agent_started(stage.name)      # Faust starts an agent again after it crashed
        try:
            async for inputs in stream.noack_take(w.batch_max, within=w.batch_within_s):
                await stage.batch(inputs, stream.ack)
        except StateError as err:
            log.critical("%s stage: %s", stage.name, err)
            await app.crash(err)

    @app.agent(topics[parts.names["telemetry"]], name="nodes")
    async def node_agent(stream):
        await feed(node_stage, stream)

    @app.agent(topics[parts.names["by_job"]], name="jobs")
    async def job_agent(stream):
        await feed(job_stage, stream)


def _timers(parts: Parts) -> None:
    app = parts.app
    assert parts.stages is not None
    stages = parts.stages

    @app.timer(interval=0.5)
    async def durable_when_due() -> None:
        for stage in stages:
            await stage.tick()

    @app.timer(interval=1.0)
    async def idle_nodes() -> None:         # the node stage acts on the wall clock too (clocks.py)
        await stages[0].poke()

    @app.timer(interval=5.0)
    async def partition_progress() -> None:
        """Each assigned partition's committed offset against its end, from the broker (not the consumer's
        position: a partition read to its end whose work never finishes must show its lag)."""
        await parts.watch.read(app.consumer, parts.sources)


def _pages(parts: Parts) -> None:
    app, metrics = parts.app, parts.metrics
    stages = parts.stages or ()

    @app.page("/metrics")
    async def metrics_page(web, request):
        return web.bytes(metrics.exposition(), content_type="text/plain; version=0.0.4")

    @app.page("/health")
    async def health(web, request):
        answer, status = parts.watch.health(any(s.sink.unavailable_since for s in stages))
        held = sorted(f"{tp.topic}/{tp.partition}" for tp in app.consumer.assignment())
        return web.json({**answer, "partitions": held, "last_batch": metrics.last_batch}, status=status)


def _names(partitions) -> str:
    return ", ".join(sorted(f"{tp.topic}/{tp.partition}" for tp in partitions)) or "none"


def run(settings, store, model=None, loglevel: str = "WARNING") -> int:
    """Run the worker until SIGTERM or SIGINT."""
    from faust.worker import Worker
    app = make_app(settings, store, model)
    worker = Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()
    return 0
