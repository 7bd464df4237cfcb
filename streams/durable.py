"""The durable-batch protocol of a stream stage: nothing lost, nothing counted twice.

A stage consumes a log (Kafka) at least once and keeps its processors' state
in a changelog table. Each batch of input goes through these steps, in order,
so that a worker killed at any moment loses nothing and counts nothing twice:

1. process the inputs (the same plain-Python processors as the embedded mode);
   results gather until the sink is due (``store.batch_rows`` rows or
   ``store.batch_seconds`` since the oldest), or at once when it has no bound;
2. write the rows to the store (idempotent, retried while it is down: the
   stage waits, so memory stays bounded) while, at the same time, alerts, dead
   letters and job samples go to their topics and the broker acknowledges them;
3. save each touched processor's state to its table and wait for the broker;
4. acknowledge, in offset order, the inputs whose results are all durable.

Steps 2 to 4 run in the background while the next inputs are processed (step 1):
the state saved is each touched key's as it was when the results were taken,
and one batch's steps 2-4 start only once the batch before it has finished
them, so state is saved and inputs acknowledged in the order they came.

After a crash, state comes back from the changelog and the inputs after the
committed offset come again: those already in the saved state are recognised
(by offset) and ignored, the others are processed, and the rows they give
are stored once. A rebalance while a batch is under way abandons it before it
saves state or acknowledges anything: the partitions' next owner restores the
saved state and gets the unacknowledged inputs again.

That recognition holds only if each partition is processed in offset order
from where reading restarts: an input taken after a later one of its node
would be taken for one already in the saved state, and its rows never
stored. So after a rebalance the stage takes a partition's inputs only from
the offset the consumer reports reading restarts from (``Rebalances.started``),
one after the other: what comes before that report waits for it, a repeat of
an input already taken is skipped, and an input past one not yet delivered is
skipped too, the consumer being sent back to the one missing.

This module knows nothing of Faust: an input is anything with
``message.tp``, ``message.offset``, ``message.generation_id`` and ``value``
(Faust's events have them), and the stage talks to the broker through a
:class:`Bus` and to the changelog through a :class:`StateTable`.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpufleet.contracts.output import Output

from .sink import Sink

log = logging.getLogger("gpufleet.worker")

JOB_SAMPLES_PER_MESSAGE = 500      # job samples travel in groups, one Kafka message per group


def job_partition(job: str, partitions: int) -> int:
    """The by-job partition of ``job``: stable across workers and restarts."""
    return zlib.crc32(job.encode()) % partitions


class Bus(Protocol):
    """The broker as a stage sees it."""

    async def send(self, topic: str, key: bytes | None, partition: int | None, value: bytes) -> Awaitable[Any]:
        """Queue one message; the awaitable returned completes when the broker has it."""

    async def flush(self) -> None:
        """Wait until everything queued (state changelog included) is with the broker."""


class StateTable(Protocol):
    """A changelog-backed key-value table: ``partition_of`` says which partition a key's state belongs to."""

    partition_of: dict[bytes, int]

    def __setitem__(self, key: bytes, value: bytes) -> None: ...

    def __delitem__(self, key: bytes) -> None: ...

    def __contains__(self, key: object) -> bool: ...


StateKey = tuple[str, bytes]      # (table name, key)


class Processor(Protocol):
    """The processing half of a stage: plain Python over inputs, with state saved per key."""

    def process(self, inputs: list, out: Output) -> dict[StateKey, int]:
        """Process inputs into ``out``; returns the state keys touched, each with its partition. Watermarks
        to announce to the job stage go in ``out.watermarks``."""

    def save(self, key: StateKey) -> bytes | None:
        """The saved state of ``key``, or None when the key is finished (a tombstone)."""

    def forget(self) -> None:
        """Drop live state: after a rebalance it is restored from the table."""

    def output(self) -> Output:
        """An empty output for a batch's results."""


class Share:
    """One part of an input that carries several items: the input is done when every part is."""

    __slots__ = ("event", "left")

    def __init__(self, event, parts: int):
        self.event, self.left = event, parts


@dataclass
class Rebalances:
    """What the stages need to know of rebalances: a counter, the consumer generation last revoked and, when
    the consumer reports them (``reports_starts``), the offset each partition is read from again after it."""

    seen: int = 0
    stale_upto: int = -1
    reports_starts: bool = False
    starts: dict = field(default_factory=dict)      # partition -> offset reading restarts from, this generation

    def revoked(self, consumer_generation: int) -> None:
        self.seen += 1
        self.stale_upto = consumer_generation
        self.starts = {}

    def started(self, consumer_generation: int, starts: dict) -> None:
        """The consumer, in ``consumer_generation``, was sent back to ``starts`` (partition -> offset)."""
        if consumer_generation > self.stale_upto:       # not a seek of a generation revoked since
            self.starts = dict(starts)

    def start(self, tp) -> int | None:
        """Where ``tp`` is read from again; None while not known yet. Without reports, unknown means the
        first input of the partition is where it starts."""
        return self.starts.get(tp)


@dataclass
class Topics:
    """Where a stage's outputs go."""

    alerts: str
    dead_letters: str
    by_job: str
    partitions: int
    other: dict[str, str] = field(default_factory=dict)     # event schema -> topic (billing, scale, ...)


@dataclass
class Pending:
    """What processed batches have produced and not yet made durable."""

    events: list = field(default_factory=list)
    dead: list = field(default_factory=list)
    job_samples: list = field(default_factory=list)
    watermarks: dict = field(default_factory=dict)     # telemetry partition -> watermark (None: no limit)
    touched: dict = field(default_factory=dict)
    done: list = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.events or self.dead or self.job_samples or self.watermarks or self.touched or self.done)


@dataclass
class Step:
    """Pending results taken to be made durable: rows, messages to send, each touched key's saved state (None:
    finished), the inputs they complete, and the counts to report once durable."""

    generation: int                       # the rebalances seen when taken: another one since abandons it
    rows: Any
    sends: list
    states: list[tuple[str, bytes, int, bytes | None]]
    done: list
    counts: Counter


class Counts(Protocol):
    def count(self, stage: str, counts: dict) -> None: ...

    def event(self, stage: str, kind: str, n: int = 1) -> None: ...

    def batch_done(self, stage: str, seconds: float) -> None: ...


@dataclass
class Outlets:
    """Where a stage's results go: rows to the store's sink, messages to the broker's topics, state to its
    tables (by name)."""

    sink: Sink
    bus: Bus
    tables: dict[str, StateTable]
    topics: Topics


class Stage:
    """One stage's batch loop (see the module docstring), around a processor kept live in memory."""

    def __init__(self, name: str, processor: Processor, outlets: Outlets, rebalances: Rebalances, metrics: Counts,
                 session_s: float = 10.0, reread: Callable[[Any, int], Awaitable[Any]] | None = None):
        sink, bus, tables, topics = outlets.sink, outlets.bus, outlets.tables, outlets.topics
        self.name, self.processor, self.sink, self.bus, self.tables = name, processor, sink, bus, tables
        self.reread = reread                  # sends the consumer back to an offset of a partition
        self.session_s = session_s            # a worker silent this long may have lost its partitions
        self.topics, self.rebalances, self.metrics = topics, rebalances, metrics
        self.out = processor.output()
        self.pending = Pending()
        self.lock = asyncio.Lock()
        self.inflight: asyncio.Task | None = None    # the results on their way to durability
        self.ack: Callable[[Any], Awaitable[Any]] | None = None
        self.pending_since: float | None = None      # when the oldest result not yet durable came
        self.last_call: float | None = None          # when batch or tick was last called
        self.resume_at = 0.0                         # after a pause, nothing is done before then
        # Acknowledgements go out in offset order only (see faust_compat.py: Faust may commit past an
        # input that is not acknowledged when it is the only one at the committed offset).
        self.received: dict = {}      # tp -> {offset: input} not acknowledged yet
        self.finished: dict = {}      # tp -> offsets whose results are durable
        self.next_offset: dict = {}   # tp -> the offset to take next, since the last rebalance
        self.held: list = []          # inputs that came before the consumer reported where reading restarts
        self.holes: set = set()       # partitions whose inputs the last batch skipped as past one not delivered
        self.missing: dict = {}       # tp -> the offset the consumer was last sent back to, as one not delivered

    def forget(self) -> None:
        """A rebalance: everything not durable is dropped; it comes again from the committed offsets."""
        self.received.clear()
        self.finished.clear()
        self.next_offset.clear()
        self.held = []
        self.missing.clear()
        self.pending, self.pending_since = Pending(), None
        self.out = self.processor.output()
        self.sink.discard()
        self.processor.forget()

    async def batch(self, inputs: list, ack: Callable[[Any], Awaitable[Any]]) -> None:
        """Process a batch of inputs, and make everything pending durable when the sink is due.

        ``ack`` acknowledges one input (Faust's ``stream.ack``); it is kept for :meth:`tick`."""
        self.ack = ack
        await self._after_pause()
        async with self.lock:
            inputs = self._in_order(self._fresh(inputs))
            await self._reread_missing()
            for ev in inputs:
                tp = ev.message.tp
                if tp not in self.received:
                    log.info("%s stage: reading %s/%s from offset %s", self.name, tp.topic, tp.partition,
                             ev.message.offset)
                self.received.setdefault(tp, {})[ev.message.offset] = ev
            out = self.out
            touched = self.processor.process(inputs, out)
            rows, events, dead = out.drain()
            self.sink.add(rows, events, dead)
            p = self.pending
            p.events += events
            p.dead += dead
            p.job_samples += out.job_samples
            p.watermarks.update(out.watermarks)
            p.touched.update(touched)
            p.done += out.done
            out.job_samples, out.done, out.watermarks = [], [], {}
            if (p or self.sink.buffered) and self.pending_since is None:
                self.pending_since = time.monotonic()
            if self.due():
                await self._make_durable(ack)

    async def poke(self) -> None:
        """Run the processor over no input (it may act on the wall clock: idle nodes), once it has had input."""
        if self.ack is not None:
            await self.batch([], self.ack)

    async def _after_pause(self) -> None:
        """The timers call in every second; a longer silence means this process was frozen (SIGSTOP, a
        stalled VM). Its group may have given its partitions away meanwhile: give the consumer a moment
        to hear of it before acting on the wall clock (idle nodes close their windows) and publishing
        what a partition's new owner publishes too, from the inputs it replays."""
        now = time.monotonic()
        last, self.last_call = self.last_call, now
        if last is not None and now - last > self.session_s:
            self.metrics.event(self.name, "pauses")
            self.resume_at = now + min(3.0, self.session_s / 2)
        if now < self.resume_at:                     # every caller waits, not only the first to notice
            await asyncio.sleep(self.resume_at - now)

    async def tick(self) -> None:
        """Called periodically: make pending results durable once the sink is due, even without new input."""
        if self.inflight is not None and self.inflight.done():
            await self.settle()                      # what failed in the background shows now, not at the next batch
        if self.ack is None or self.pending_since is None:
            return
        await self._after_pause()
        async with self.lock:
            if self.due():
                await self._make_durable(self.ack)

    def due(self) -> bool:
        """The sink's bound reached (rows or age), or results without rows waiting as long as rows may."""
        if self.pending_since is None:
            return False
        return self.sink.due() or time.monotonic() - self.pending_since >= self.sink.max_delay_s

    def _fresh(self, inputs: list) -> list:
        stale = self.rebalances.stale_upto
        fresh = [ev for ev in inputs if (ev.message.generation_id or 0) > stale]
        if len(fresh) != len(inputs):
            # Fetched in a consumer generation that has since been revoked (still in the batch buffer, or
            # taken between the revocation and the next assignment): the consumer is sent back to the
            # committed offsets, so they come again, in order, after the ones before them. Taken now, they
            # could move a watermark past inputs not yet replayed, or save state ahead of what the
            # partition's new owner replays.
            self.metrics.event(self.name, "stale_skipped", len(inputs) - len(fresh))
            log.info("%s stage: %d messages fetched before the rebalance skipped", self.name,
                     len(inputs) - len(fresh))
        return fresh

    def _in_order(self, inputs: list) -> list:
        """The inputs to take, each partition's one after the other from where reading restarted."""
        taken, early, repeats, ahead = [], 0, 0, 0
        self.holes = holes = set()
        rebalances, arrived, self.held = self.rebalances, self.held + inputs, []
        for ev in arrived:
            tp, offset = ev.message.tp, ev.message.offset
            expected = self.next_offset.get(tp)
            if expected is None:
                expected = rebalances.start(tp)
                if expected is None:
                    if rebalances.reports_starts:
                        self.held.append(ev)      # delivered before the seek: waits to be placed
                        early += 1
                        continue
                    expected = offset
            if offset < expected:
                repeats += 1                      # delivered again (a seek back): already taken
                continue
            if offset > expected:
                ahead += 1                        # an earlier input is missing: read again from it
                holes.add(tp)
                continue
            self.next_offset[tp] = offset + 1
            taken.append(ev)
        if repeats:
            self.metrics.event(self.name, "repeats_skipped", repeats)
        if ahead:
            # Records fetched before a seek and delivered after it, or a consumer that skipped one: taking
            # the later ones would lose it, so they are skipped and the consumer is sent back to it.
            self.metrics.event(self.name, "out_of_order_skipped", ahead)
            log.info("%s stage: %d messages after one not yet delivered skipped", self.name, ahead)
        if early:
            log.debug("%s stage: %d messages wait for the seek to the committed offsets", self.name, early)
        return taken

    async def _reread_missing(self) -> None:
        """Send the consumer back to the first input missing of each partition that has one, once per hole."""
        for tp in self.holes:
            expected = self.next_offset.get(tp, self.rebalances.start(tp))
            if expected is None or self.missing.get(tp) == expected or self.reread is None:
                continue
            log.warning("%s stage: %s/%s skipped offset %s: reading it again", self.name, tp.topic, tp.partition,
                        expected)
            try:
                await self.reread(tp, expected)
                self.missing[tp] = expected
            except Exception as err:     # e.g. the partition revoked meanwhile: the next owner reads it
                log.warning("%s stage: %s/%s not sent back to %s: %s", self.name, tp.topic, tp.partition,
                            expected, err)

    def _sends(self, p: Pending) -> list[tuple[str, bytes | None, int | None, bytes]]:
        t = self.topics
        sends: list[tuple[str, bytes | None, int | None, bytes]] = []
        for e in p.events:
            topic = t.other.get(e["schema"], t.alerts)
            key = e["dedup_key"].encode() if "dedup_key" in e else None
            sends.append((topic, key, None, json.dumps(e).encode()))
        sends += [(t.dead_letters, None, None, json.dumps(d).encode()) for d in p.dead]
        groups: dict[int, list] = {}                      # by-job partition -> its samples, in order
        for sample in p.job_samples:
            groups.setdefault(job_partition(sample["job"], t.partitions), []).append(sample)
        for partition, samples in sorted(groups.items()):
            for i in range(0, len(samples), JOB_SAMPLES_PER_MESSAGE):
                sends.append((t.by_job, None, partition, json.dumps(samples[i:i + JOB_SAMPLES_PER_MESSAGE]).encode()))
        if p.watermarks:                                  # after the samples they vouch for, to every partition
            record = json.dumps([{"watermarks": {str(k): v for k, v in sorted(p.watermarks.items())}}]).encode()
            sends += [(t.by_job, None, partition, record) for partition in range(t.partitions)]
        return sends

    async def _send_all(self, sends) -> None:
        delivered = []
        for topic, key, partition, value in sends:       # one at a time: a job's samples keep their order
            delivered.append(await self.bus.send(topic, key, partition, value))
        for fut in delivered:
            await fut                                     # acknowledged by the broker

    async def _make_durable(self, ack: Callable[[Any], Awaitable[Any]]) -> None:
        """Take what is pending as it is now, then, once the results before it are durable, make it durable in
        the background: the next inputs are processed meanwhile (their results wait for this)."""
        step = self._take_pending()
        await self.settle()
        self.inflight = asyncio.create_task(self._durable(step, ack))

    async def settle(self) -> None:
        """Wait until the results on their way to durability are durable (or abandoned); raises what failed."""
        task, self.inflight = self.inflight, None
        if task is not None:
            await task

    def _take_pending(self) -> Step:
        """Everything pending, with the state of each touched key as it is now (processing goes on after)."""
        p, self.pending, self.pending_since = self.pending, Pending(), None
        counts, self.out.counts = self.out.counts, Counter()
        states = [(name, key, partition, self.processor.save((name, key)))
                  for (name, key), partition in p.touched.items()]
        return Step(self.rebalances.seen, self.sink.take(), self._sends(p), states, p.done, counts)

    async def _durable(self, step: Step, ack: Callable[[Any], Awaitable[Any]]) -> None:
        started = time.monotonic()
        # the store write and the broker's acknowledgements overlap; state waits for both
        await asyncio.gather(asyncio.to_thread(self.sink.write, step.rows), self._send_all(step.sends))
        if time.monotonic() - started > self.session_s:
            # Longer than a session (the store was down, or this process was paused): the group may have
            # given these partitions to another worker meanwhile. Give the consumer a moment to hear of it
            # (the revocation then shows below) before saving state that the new owner may have moved past.
            await asyncio.sleep(min(3.0, self.session_s / 2))
        if self.rebalances.seen != step.generation:
            # A rebalance happened meanwhile: these partitions may belong to another worker now, which
            # restored the saved state and gets the unacknowledged inputs again. Rows and events written
            # so far are idempotent; saving state or acknowledging now could undo its work.
            self.metrics.event(self.name, "batches_abandoned")
            return
        for name, key, partition, value in step.states:
            table = self.tables[name]
            table.partition_of[key] = partition
            if value is None:
                if key in table:
                    del table[key]                        # finished: a tombstone in the changelog
            else:
                table[key] = value
        await self.bus.flush()
        if self.rebalances.seen != step.generation:
            self.metrics.event(self.name, "batches_abandoned")
            return
        await self._acknowledge(step.done, ack)
        self.metrics.count(self.name, step.counts)
        self.metrics.batch_done(self.name, time.monotonic() - started)

    async def _acknowledge(self, done: Iterable, ack: Callable[[Any], Awaitable[Any]]) -> None:
        for ev in done:
            if isinstance(ev, Share):
                ev.left -= 1
                if ev.left:
                    continue
                ev = ev.event
            if ev is not None:
                self.finished.setdefault(ev.message.tp, set()).add(ev.message.offset)
        ready = []             # chosen before any acknowledgement: new inputs may arrive while each is awaited
        for tp, waiting in self.received.items():
            finished = self.finished.get(tp, set())
            for offset in sorted(waiting):
                if offset not in finished:
                    break
                finished.discard(offset)
                ready.append(waiting.pop(offset))
        for ev in ready:
            await ack(ev)


class MemoryTable(dict):
    """A :class:`StateTable` in memory (tests, and a worker's view of its table)."""

    def __init__(self) -> None:
        super().__init__()
        self.partition_of: dict[bytes, int] = {}

