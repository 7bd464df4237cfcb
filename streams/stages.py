"""The processing halves of the worker's two stages, over the shared pipeline (see durable.py for the protocol).

- :class:`NodeStage`: telemetry messages (key = node) through the node processors; its state is each
  node's processor (table ``nodes``, key = node name) and each telemetry partition's clock (table
  ``clocks``, key ``node:<partition>``), whose watermark it announces to the job stage.
- :class:`JobStage`: groups of job samples and watermark announcements (partitioned by job) through the
  job processors; its state is each job's processor (table ``jobs``, key = job name, deleted once the job
  ends) and each by-job partition's clock (table ``clocks``, key ``job:<partition>``).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from gpufleet.contracts.output import Output
from gpufleet.contracts.state import pack, unpack
from gpufleet.contracts.telemetry import control_kind, control_newest, unreadable

from .clocks import INF, PartitionClock, SourceClock
from .durable import Share, StateKey, job_partition
from .pipeline import Pipeline

P = TypeVar("P")
NODES, JOBS, CLOCKS = "nodes", "jobs", "clocks"


def saved(table: Mapping[bytes, bytes], decode: Callable[[str, dict], P]) -> Callable[[str], P | None]:
    """A loader of saved processors from a state table: name -> processor or None."""
    def load(name: str) -> P | None:
        raw = table.get(name.encode())
        return decode(name, unpack(raw, name)) if raw else None
    return load


class NodeStage:
    def __init__(self, pipeline: Pipeline, clocks: Mapping[bytes, bytes], live: bool = True,
                 assigned: Callable[[], set[int]] = set, lag: Callable[[int], int | None] = lambda partition: None,
                 clock: Callable[[], float] = time.time):
        self.pipeline, self.clock_table, self.live, self.now = pipeline, clocks, live, clock
        self.assigned, self.lag = assigned, lag          # telemetry partitions held, and each one's lag
        self.clocks: dict[int, PartitionClock] = {}

    def partition_clock(self, partition: int) -> PartitionClock:
        c = self.clocks.get(partition)
        if c is None:
            raw = self.clock_table.get(f"node:{partition}".encode())
            what = f"partition {partition} clock"
            c = PartitionClock.from_state(unpack(raw, what), what) if raw else PartitionClock()
            self.clocks[partition] = c
        return c

    def process(self, inputs: list, out: Output) -> dict[StateKey, int]:
        pipeline, touched = self.pipeline, {}
        pipeline.out = out
        now = self.now()
        for ev in inputs:
            m = ev.message
            clock = self.partition_clock(m.partition)
            touched[(CLOCKS, f"node:{m.partition}".encode())] = m.partition
            if control_kind(ev.value) == "end_of_stream":
                self.end_of_stream(m.partition, clock, touched, control_newest(ev.value))
                out.counts["end_of_stream"] += 1
                out.done.append(ev)
                continue
            msg = pipeline.submit(ev.value, f"{m.topic}/{m.partition}/{m.offset}", ref=ev,
                                  position=(m.partition, m.offset))
            if msg is not None:
                touched[(NODES, msg.node.encode())] = m.partition
                clock.heard_from(msg.node, pipeline.nodes[msg.node].gate.watermark(pipeline.cfg.lateness_s), now)
        for partition in self.assigned():          # a partition without any message still has a clock
            self.partition_clock(partition)
        if self.live:
            for partition, clock in self.clocks.items():
                if clock.check_idle(now, pipeline.cfg.node_idle_s, self.lag(partition) == 0):
                    touched[(CLOCKS, f"node:{partition}".encode())] = partition
                    out.counts["idle_checks_changed"] += 1
                self.silence(partition, clock, now, touched)
        for partition, clock in self.clocks.items():
            mark = clock.watermark()
            if mark is not None and mark != clock.announced:
                out.watermarks[partition] = None if mark == INF else mark
                clock.announced = mark
        return touched

    def end_of_stream(self, partition: int, clock: PartitionClock, touched: dict, newest: float | None) -> None:
        """The end of a recording: every node of the partition flushes its open windows, as replay does (a node
        silent for ``stream.silent_after_s`` before the recording's ``newest`` is silenced first)."""
        pipeline = self.pipeline
        for name in clock.nodes():
            node = pipeline.node(name)
            node.flush(pipeline.cfg, pipeline.out, pipeline.detection, pipeline.tariff, newest)
            touched[(NODES, name.encode())] = partition
        clock.ended = True

    def silence(self, partition: int, clock: PartitionClock, now: float, touched: dict) -> None:
        """Live mode: a node of the partition heard nothing from for ``stream.silent_after_s`` of wall clock is
        silenced (its alerts resolve, "no telemetry since" its last message): a dead node never holds one open."""
        pipeline = self.pipeline
        for name, heard in clock.heard.items():
            if now - heard <= pipeline.cfg.silent_after_s:
                continue
            node = pipeline.node(name)
            if node.silent or node.last_ts is None:
                continue
            node.drain(pipeline.cfg, pipeline.out, pipeline.detection, pipeline.tariff)
            node.silence(pipeline.out, pipeline.tariff)
            touched[(NODES, name.encode())] = partition

    def save(self, key: StateKey) -> bytes | None:
        table, name = key
        if table == CLOCKS:
            return pack(self.clocks[int(name.split(b":")[1])].to_state())
        return pack(self.pipeline.nodes[name.decode()].to_state())

    def forget(self) -> None:
        self.pipeline.nodes.clear()
        self.clocks.clear()


class JobStage:
    def __init__(self, pipeline: Pipeline, jobs: Mapping[bytes, bytes], clocks: Mapping[bytes, bytes],
                 partitions: int):
        self.pipeline, self.job_table, self.clock_table, self.partitions = pipeline, jobs, clocks, partitions
        self.clocks: dict[int, SourceClock] = {}

    def source_clock(self, partition: int) -> SourceClock:
        c = self.clocks.get(partition)
        if c is None:
            raw = self.clock_table.get(f"job:{partition}".encode())
            what = f"by-job partition {partition} clock"
            c = (SourceClock.from_state(unpack(raw, what), self.partitions, what) if raw
                 else SourceClock(self.partitions))
            self.clocks[partition] = c
        return c

    def process(self, inputs: list, out: Output) -> dict[StateKey, int]:
        pipeline, touched = self.pipeline, {}
        pipeline.out = out
        advanced: set[int] = set()
        for ev in inputs:
            m = ev.message
            source = f"{m.topic}/{m.partition}/{m.offset}"
            items, reason = _items(ev.value)
            if reason is not None:
                out.dead_letter("invalid", reason, source, pipeline.clock(), ev.value)
                out.done.append(ev)
                continue
            if not items:
                out.done.append(ev)
                continue
            share = Share(ev, len(items))
            for item in items:
                if type(item) is dict and "watermarks" in item:
                    reason = _invalid_marks(item["watermarks"], self.partitions)
                    if reason is not None:
                        out.dead_letter("invalid", reason, source, pipeline.clock(), json.dumps(item))
                    else:
                        self.source_clock(m.partition).announce(item["watermarks"])
                        touched[(CLOCKS, f"job:{m.partition}".encode())] = m.partition
                        advanced.add(m.partition)
                    out.done.append(share)
                elif pipeline.admit_job_sample(item, ref=share, source=source):
                    touched[(JOBS, item["job"].encode())] = m.partition
        for partition in sorted(advanced):
            clock = self.source_clock(partition)
            watermark = clock.watermark()
            if watermark == INF and not clock.flushed:
                self.flush(partition, touched)
                clock.flushed = True
            else:
                self.release(partition, watermark, touched)
        return touched

    def release(self, partition: int, watermark: float, touched: dict) -> None:
        pipeline = self.pipeline
        for name in sorted(pipeline.waiting):
            if job_partition(name, self.partitions) == partition:
                touched[(JOBS, name.encode())] = partition
        pipeline.release_jobs(watermark, lambda name: job_partition(name, self.partitions) == partition)

    def flush(self, partition: int, touched: dict) -> None:
        """Every source partition ended: every job of this partition is flushed, as replay does at the end."""
        pipeline = self.pipeline
        names = {n for n in pipeline.jobs if job_partition(n, self.partitions) == partition}
        names |= {k.decode() for k in self.job_table if job_partition(k.decode(), self.partitions) == partition}
        self.release(partition, INF, touched)
        for name in sorted(names):
            job = pipeline.job(name)
            job.flush(pipeline.out, pipeline.detection)
            touched[(JOBS, name.encode())] = partition

    def save(self, key: StateKey) -> bytes | None:
        table, name = key
        if table == CLOCKS:
            return pack(self.clocks[int(name.split(b":")[1])].to_state())
        job = self.pipeline.jobs.get(name.decode())
        self.pipeline.forgotten.discard(name.decode())
        if job is None or job.finished:
            self.pipeline.jobs.pop(name.decode(), None)
            return None
        return pack(job.to_state())

    def forget(self) -> None:
        self.pipeline.jobs.clear()
        self.pipeline.waiting.clear()
        self.pipeline.forgotten.clear()
        self.clocks.clear()


def _items(value: bytes) -> tuple[list, str | None]:
    """A by-job message's items, or why it has none: it is input like any other (an older worker's, or junk)."""
    try:
        items = json.loads(value)
    except (ValueError, RecursionError) as err:
        return [], f"(message): not a list of job samples: {unreadable(err)}"
    if type(items) is not list:
        return [], f"(message): a list of job samples is due, not {type(items).__name__}"
    return items, None


def _invalid_marks(marks, partitions: int) -> str | None:
    """Why a watermark announcement is not one (``{"<telemetry partition>": ts or null}``), or None."""
    if type(marks) is not dict:
        return "watermarks: an object of partition to time is due"
    for partition, mark in marks.items():
        if not partition.isdigit() or int(partition) >= partitions:
            return f"watermarks: {partition[:20]!r} is not a telemetry partition (0 to {partitions - 1})"
        if mark is not None and (type(mark) not in (int, float) or mark - mark != 0):
            return f"watermarks.{partition}: a finite time or null is due"
    return None
