"""Validation, dead letters and per-node processing: the part both modes share.

``Pipeline.submit`` takes one raw message (JSON text, bytes or a dict) with a
``source`` such as ``file.jsonl:42`` or ``topic/3/1187``; bad input is
dead-lettered with its reason and counted, never raised. What the processors
produce collects in ``pipeline.out`` for the driver to drain.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.contracts.jobsample import invalid_job_sample
from gpufleet.contracts.output import Output
from gpufleet.contracts.state import StateError
from gpufleet.contracts.telemetry import CONTROL_KINDS, Telemetry, TelemetryError, check_clock, control_kind
from gpufleet.models.artifact import Model
from gpufleet.models.detectors import Detection, Recorder, hold_downs

from .billing.prices import BillingConfig, Tariff
from .config import StreamConfig
from .decode import decode
from .eventtime import DUPLICATE, LATE, REPLAYED, FleetWatermark
from .jobs import JobProcessor
from .node import NodeProcessor, NodeRules

SILENCE_CHECK_S = 60.0      # s of stream time between looks for silent nodes (embedded mode)


@dataclass(frozen=True)
class Driver:
    """How the driver runs the pipeline. The embedded mode (the default): stream time from the telemetry, the job
    stage in this process, the input one file or ``partitions`` partitions of a log. The distributed mode's stages:
    ``live`` (the wall clock, ``clock``, for clock skew and silent nodes), job samples routed through Kafka (not
    ``route_jobs``), and saved processors loaded from the state tables (``load_node``, ``load_job``)."""

    live: bool = False
    clock: Callable[[], float] = time.time
    route_jobs: bool = True
    partitions: int | None = None
    load_node: Callable[[str], NodeProcessor | None] | None = None
    load_job: Callable[[str], JobProcessor | None] | None = None


EMBEDDED = Driver()


class Pipeline:
    def __init__(self, cfg: StreamConfig | None = None, *, billing: BillingConfig | None = None,
                 model: Model | None = None, detect: bool = True, recorder: Recorder | None = None,
                 driver: Driver = EMBEDDED):
        live, clock, route_jobs, partitions = driver.live, driver.clock, driver.route_jobs, driver.partitions
        load_node, load_job = driver.load_node, driver.load_job
        self.cfg = cfg or StreamConfig()
        self.tariff = Tariff(billing)                # prices, and whether to meter (billing.enabled)
        model = (model or Model.default()).with_hold_downs(hold_downs(self.cfg.hold_down_s))
        self.detection = Detection(model, recorder) if detect else None
        self.rules = NodeRules(self.cfg, self.tariff, self.detection)   # every node's, resolved once
        self.live = live
        self.route_jobs = route_jobs
        self.load_node = load_node or (lambda name: None)     # saved state, in the distributed mode
        self.keeps_state = load_job is not None                # the distributed mode: state saved in tables
        self.load_job = load_job or (lambda name: None)
        self.clock = clock
        self.nodes: dict[str, NodeProcessor] = {}
        self.jobs: dict[str, JobProcessor] = {}
        self.waiting: set[str] = set()           # jobs with items waiting for the watermark
        self.forgotten: set[str] = set()         # jobs that ended since their state was last saved
        # the embedded mode's job watermark: the lowest node watermark, of every one of the input's ``partitions``
        # (a log read in the embedded mode: tests) once each has been heard from (None: a file, one partition)
        self.fleet = FleetWatermark(partitions)
        self.newest: float | None = None         # the embedded mode's stream time (see stream_time)
        self.partition_newest: dict[int | None, float] = {}   # each input partition's newest trusted time
        self._silence_checked = float("-inf")
        self.out = self.new_output()

    def new_output(self) -> Output:
        """Where processing puts what it produces (alerts link to the manual at ``stream.manual_url``)."""
        return Output(self.cfg.manual_url)

    def submit(self, payload: str | bytes | dict | None, source: str, ref=None,
               position: tuple[int, int] | None = None) -> Telemetry | None:
        """Validate and process one message; returns it, or None if it was dead-lettered (or was a control
        message, which the driver acts on: the end of a stream ends replay's input anyway).

        ``position`` is where it was read (partition, offset), when the input is a log. A record without a value
        (a Kafka tombstone) and a control message of a kind this gpufleet does not know are dead-lettered.
        """
        out = self.out
        out.counts["messages"] += 1
        if payload is None:
            self.refuse("invalid", "(message): no value (a tombstone: telemetry is never deleted)", source, "", ref)
            return None
        kind = control_kind(payload)
        if kind is not None:
            if kind in CONTROL_KINDS:
                out.counts["control"] += 1
                out.done.append(ref)
            else:
                self.refuse("invalid", f"kind: {kind[:40]!r} is not a control message this gpufleet knows "
                                       f"({', '.join(CONTROL_KINDS)})", source, payload, ref)
            return None
        try:
            msg = decode(payload, share_names=False)     # it waits packed: its names are shared when it is released
            if self.live:
                check_clock(msg, self.clock(), self.cfg.max_clock_skew_s)
        except TelemetryError as err:
            out.dead_letter(err.reason_code, err.reason, source, self.clock(), payload)
            if err.reason_code == "clock_skew":
                out.counts[f"clock_skew:{msg.node}"] += 1      # per node: the operator's clue
            out.done.append(ref)
            return None
        except Exception as err:          # the decoder's fault, not the message's: still one message
            out.internal_error(err, source, self.clock(), payload)
            out.done.append(ref)
            return None
        try:
            return self.push(msg, source, payload, ref, position)
        except StateError:                # a saved state this process cannot read: the process's failure
            raise
        except Exception as err:          # what the processors' own guards did not catch (node.py, jobs.py)
            out.internal_error(err, source, self.clock(), payload)
            out.done.append(ref)
            return None

    def refuse(self, reason_code: str, reason: str, source: str, payload, ref=None) -> None:
        """Dead-letter one input, which is then done."""
        self.out.dead_letter(reason_code, reason, source, self.clock(), payload)
        self.out.done.append(ref)

    def unreadable_state(self, table: str, name: str, raw: bytes, reason: str) -> None:
        """A changelog value that is no state any gpufleet saved (written there by something else): dead-lettered,
        and the key starts afresh (its next save replaces the value)."""
        self.out.dead_letter("invalid", f"saved state: {reason}", f"{table} changelog/key {name[:200]}", self.clock(),
                             raw)

    def node(self, name: str) -> NodeProcessor:
        node = self.nodes.get(name)
        if node is None:
            node = self.nodes[name] = self.load_node(name) or NodeProcessor(name)
        return node

    def job(self, name: str) -> JobProcessor:
        job = self.jobs.get(name)
        if job is None:
            saved = None if name in self.forgotten else self.load_job(name)
            job = self.jobs[name] = saved or JobProcessor(name)
        return job

    def push(self, msg: Telemetry, source: str = "", payload=None, ref=None,
             position: tuple[int, int] | None = None) -> Telemetry | None:
        """Process one already validated message (decoded by :func:`.decode.decode`, or the contract's model)."""
        node = self.node(msg.node)
        status = node.push(msg, self.rules, self.out, ref, position)
        if self.route_jobs:
            watermark = node.gate.watermark(self.cfg.lateness_s)
            partition = position[0] if position is not None else None
            if watermark is not None:
                self.fleet.advance(msg.node, watermark, partition)
            self.advance_stream_time(node.gate.max_ts, partition)
            self.route()
        if status == DUPLICATE:
            self.out.counts["duplicates"] += 1
        elif status == REPLAYED:
            self.out.counts["replayed"] += 1
        elif status == LATE:
            behind = (node.gate.watermark(self.cfg.lateness_s) or msg.ts) - msg.ts
            self.out.dead_letter(
                "late", f"ts: {behind:.1f} s behind the watermark of node {msg.node} "
                        f"(allowed lateness {self.cfg.lateness_s:g} s)",
                source, self.clock(), payload if payload is not None else msg.to_json())
            return None
        return msg

    def advance_stream_time(self, trusted: float | None, partition: int | None) -> None:
        """The embedded mode's stream time: the lowest, over the input's partitions (a file is one), of the newest
        trusted time of each (a node's watermark never follows a message ahead of its sequence, eventtime.py).
        However far apart the partitions are read, no node is judged silent before its own partition has gone on
        without it; every ``SILENCE_CHECK_S`` of stream time, nodes silent for ``stream.silent_after_s`` are."""
        if trusted is None or trusted <= self.partition_newest.get(partition, float("-inf")):
            return
        self.partition_newest[partition] = trusted
        if not self.fleet.heard_from_all():
            return
        now = min(self.partition_newest.values())
        if self.newest is None or now > self.newest:
            self.newest = now
            if now - self._silence_checked >= SILENCE_CHECK_S:
                self._silence_checked = now
                self.silence_stale(now)

    def route(self, watermark: float | None = None) -> None:
        """The in-process bus to the job stage (the distributed mode sends job samples through Kafka): admit
        the job samples, then release what the fleet's watermark (every node's, by default) has passed."""
        samples, self.out.job_samples = self.out.job_samples, []
        for sample in samples:
            self.admit_job_sample(sample, checked=True)     # made by this process's node stage
        self.release_jobs(self.fleet.value() if watermark is None else watermark)

    def admit_job_sample(self, sample, ref=None, source: str = "", checked: bool = False) -> bool:
        """One item of the job stage's input: a job sample or leave mark (checked unless ``checked``: the by-job
        topic is input too); False if it was dead-lettered instead."""
        reason = None if checked else invalid_job_sample(sample)
        if reason is not None:
            self.out.dead_letter("invalid", reason, source, self.clock(), _text(sample))
            self.out.done.append(ref)
            return False
        job = self.job(sample["job"])
        job.push(sample, self.out, ref, source, self.clock())
        if job.pending:
            self.waiting.add(job.job)
        return True

    def release_jobs(self, watermark: float, which: Callable[[str], bool] | None = None) -> None:
        """Release every job's items older than ``watermark`` (of the jobs ``which`` picks); forget the jobs
        that ended."""
        out = self.out
        for name in sorted(self.waiting):
            if which is not None and not which(name):
                continue
            job = self.jobs[name]
            job.release(watermark, out, self.detection)
            if not job.pending:
                self.waiting.discard(name)
                if job.finished:
                    self.finished(name)

    def finished(self, name: str) -> None:
        """A job no node holds any more: dropped (the distributed mode deletes its saved state)."""
        del self.jobs[name]
        if self.keeps_state:
            self.forgotten.add(name)

    def silence_stale(self, now: float) -> None:
        """The embedded mode, by stream time: a node whose telemetry stopped more than ``stream.silent_after_s``
        before ``now`` (beyond the allowed lateness, so that no arrival order within it decides) is silenced (its
        alerts resolve, "no telemetry since"; it leaves its jobs) and no longer holds the jobs back, until it
        reports again. A node is found silent by its own telemetry too (a gap longer than that, node.py), so the
        events are the same whenever this finds it. (The distributed mode does this by wall clock.)"""
        limit = self.cfg.silent_after_s + self.cfg.lateness_s
        for name, node in self.nodes.items():
            if node.silent or node.last_ts is None:
                continue
            heard = node.gate.newest()
            if now - max(node.last_ts, heard if heard is not None else node.last_ts) <= limit:
                continue
            node.drain(self.rules, self.out)
            node.silence(self.rules, self.out)
            self.fleet.remove(name)

    def flush(self) -> None:
        """End of input: every open window is closed and emitted; a node silent for ``stream.silent_after_s``
        before the newest telemetry of the input is silenced first (its alerts resolve, "no telemetry since")."""
        for node in self.nodes.values():
            node.drain(self.rules, self.out)
        newest = max((n.last_ts for n in self.nodes.values() if n.last_ts is not None), default=None)
        for node in self.nodes.values():
            node.flush(self.rules, self.out, newest)
        if self.route_jobs:
            self.route(float("inf"))
            for job in self.jobs.values():
                job.flush(self.out, self.detection)



def _text(item) -> str:
    """An item of any shape as text for a dead letter."""
    try:
        return json.dumps(item, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return repr(item)[:65536]
