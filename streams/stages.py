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
from gpufleet.contracts.state import StateError, pack, unpack
from gpufleet.contracts.telemetry import control_kind, control_newest, control_problem, unreadable

from .clocks import INF, PartitionClock, SourceClock
from .durable import Share, StateKey, job_partition
from .pipeline import Pipeline

P = TypeVar("P")
NODES, JOBS, CLOCKS = "nodes", "jobs", "clocks"


Junk = Callable[[str, bytes, str], None]     # (key, value, why): a changelog value that is no saved state


def saved(table: Mapping[bytes, bytes], decode: Callable[[str, dict], P],
          junk: Junk | None = None) -> Callable[[str], P | None]:
    """A loader of saved processors from a state table: name -> processor or None.

    With ``junk``, a value that is no state any gpufleet saved (not packed JSON, or without a version: written
    to the changelog by something else) is handed to it and the key starts afresh; a state of another version is
    still refused (:class:`StateError`): that is an upgrade to make, not junk."""
    def load(name: str) -> P | None:
        raw = table.get(name.encode())
        if not raw:
            return None
        state = restore(raw, name, junk)
        return None if state is None else decode(name, state)
    return load


def restore(raw: bytes, name: str, junk: Junk | None) -> dict | None:
    """A saved value as the state it holds, or None when it is junk (handed to ``junk``)."""
    try:
        state = unpack(raw, name)
    except StateError as err:
        if junk is None:
            raise
        junk(name, raw, str(err).split(";")[0])
        return None
    if junk is not None and not (isinstance(state, dict) and "v" in state):
        junk(name, raw, f"{name}: not a state any gpufleet saved (no version)")
        return None
    return state


class NodeStage:
    def __init__(self, pipeline: Pipeline, clocks: Mapping[bytes, bytes], live: bool = True,
                 assigned: Callable[[], set[int]] = set, lag: Callable[[int], int | None] = lambda partition: None,
                 clock: Callable[[], float] = time.time, control_key: bytes | None = None):
        self.pipeline, self.clock_table, self.live, self.now = pipeline, clocks, live, clock
        self.assigned, self.lag = assigned, lag          # telemetry partitions held, and each one's lag
        self.control_key = control_key                   # kafka.control_key: signs the markers acted on
        self.clocks: dict[int, PartitionClock] = {}

    def partition_clock(self, partition: int) -> PartitionClock:
        c = self.clocks.get(partition)
        if c is None:
            raw = self.clock_table.get(f"node:{partition}".encode())
            what = f"partition {partition} clock"
            state = restore(raw, what, lambda name, value, why: self.pipeline.unreadable_state(
                CLOCKS, f"node:{partition}", value, why)) if raw else None
            c = PartitionClock.from_state(state, what) if state is not None else PartitionClock()
            self.clocks[partition] = c
        return c

    def process(self, inputs: list, out: Output) -> dict[StateKey, int]:
        pipeline, touched = self.pipeline, dict[StateKey, int]()
        pipeline.out = out
        now = self.now()
        for ev in inputs:
            try:                      # any record at all ends stored or dead-lettered: nothing before this guard
                self.take(ev, touched, now)
            except StateError:        # saved state of another version: the process's failure, said loudly
                raise
            except Exception as err:
                m = ev.message
                out.internal_error(err, f"{m.topic}/{m.partition}/{m.offset}", pipeline.clock(), ev.value or "")
                out.done.append(ev)
        self.advance(touched, now)
        return touched

    def take(self, ev, touched: dict, now: float) -> None:
        """One record of the telemetry topic: a control message acted on or dead-lettered, or telemetry."""
        pipeline, m = self.pipeline, ev.message
        out = pipeline.out
        clock = self.partition_clock(m.partition)
        touched[(CLOCKS, f"node:{m.partition}".encode())] = m.partition
        source = f"{m.topic}/{m.partition}/{m.offset}"
        if control_kind(ev.value) is not None:
            problem = control_problem(ev.value, self.control_key)
            if problem is not None:
                pipeline.refuse("invalid", problem, source, ev.value, ev)
                return
            self.end_of_stream(m.partition, clock, touched, control_newest(ev.value))
            out.counts["end_of_stream"] += 1
            out.done.append(ev)
            return
        msg = pipeline.submit(ev.value, source, ref=ev, position=(m.partition, m.offset))
        if msg is not None:
            touched[(NODES, msg.node.encode())] = m.partition
            clock.heard_from(msg.node, pipeline.nodes[msg.node].gate.watermark(pipeline.cfg.lateness_s), now)

    def advance(self, touched: dict, now: float) -> None:
        """After a batch: idle and silent nodes (live mode), and each partition's watermark to announce."""
        pipeline, out = self.pipeline, self.pipeline.out
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

    def end_of_stream(self, partition: int, clock: PartitionClock, touched: dict, newest: float | None) -> None:
        """The end of a recording: every node of the partition flushes its open windows, as replay does (a node
        silent for ``stream.silent_after_s`` before the recording's ``newest`` is silenced first)."""
        pipeline = self.pipeline
        for name in clock.nodes():
            node = pipeline.node(name)
            node.flush(pipeline.rules, pipeline.out, newest)
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
            node.drain(pipeline.rules, pipeline.out)
            node.silence(pipeline.rules, pipeline.out)
            touched[(NODES, name.encode())] = partition

    def save(self, key: StateKey) -> bytes | None:
        table, name = key
        if table == CLOCKS:
            return pack(self.clocks[int(name.split(b":")[1])].to_state())
        return pack(self.pipeline.nodes[name.decode()].to_state())

    def output(self) -> Output:
        return self.pipeline.new_output()

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
            state = restore(raw, what, lambda name, value, why: self.pipeline.unreadable_state(
                CLOCKS, f"job:{partition}", value, why)) if raw else None
            c = (SourceClock.from_state(state, self.partitions, what) if state is not None
                 else SourceClock(self.partitions))
            self.clocks[partition] = c
        return c

    def process(self, inputs: list, out: Output) -> dict[StateKey, int]:
        pipeline, touched = self.pipeline, dict[StateKey, int]()
        pipeline.out = out
        advanced: set[int] = set()
        for ev in inputs:
            try:                      # any record at all ends stored or dead-lettered: nothing before this guard
                self.take(ev, touched, advanced)
            except StateError:
                raise
            except Exception as err:
                m = ev.message
                out.internal_error(err, f"{m.topic}/{m.partition}/{m.offset}", pipeline.clock(), ev.value or "")
                out.done.append(ev)
        for partition in sorted(advanced):
            clock = self.source_clock(partition)
            watermark = clock.watermark()
            if watermark == INF and not clock.flushed:
                self.flush(partition, touched)
                clock.flushed = True
            else:
                self.release(partition, watermark, touched)
        return touched

    def take(self, ev, touched: dict, advanced: set[int]) -> None:
        """One record of the by-job topic: a group of job samples and watermark announcements, or junk."""
        pipeline, m = self.pipeline, ev.message
        out = pipeline.out
        source = f"{m.topic}/{m.partition}/{m.offset}"
        items, reason = _items(ev.value)
        if reason is not None:
            pipeline.refuse("invalid", reason, source, ev.value or "", ev)
            return
        if not items:
            out.done.append(ev)
            return
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
        names |= {k for k in _names(self.job_table) if job_partition(k, self.partitions) == partition}
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

    def output(self) -> Output:
        return self.pipeline.new_output()

    def forget(self) -> None:
        self.pipeline.jobs.clear()
        self.pipeline.waiting.clear()
        self.pipeline.forgotten.clear()
        self.clocks.clear()


def _names(table: Mapping) -> list[str]:
    """The keys of a state table as names; a key no worker wrote (none, or not UTF-8: the changelog is a topic
    anyone may write to) names nothing."""
    names = []
    for key in table:
        try:
            names.append(key.decode())
        except (AttributeError, UnicodeDecodeError):
            continue
    return names


def _items(value: bytes | None) -> tuple[list, str | None]:
    """A by-job message's items, or why it has none: it is input like any other (an older worker's, or junk)."""
    if value is None:
        return [], "(message): no value (a tombstone: job samples are never deleted)"
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
