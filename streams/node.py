"""Everything the stream keeps for one node, fed with that node's messages."""
from __future__ import annotations

from dataclasses import dataclass

from gpufleet.contracts.jobsample import job_samples, silent_leaves
from gpufleet.contracts.output import Output, source_of
from gpufleet.contracts.state import StateError, check_version
from gpufleet.contracts.telemetry import Telemetry
from gpufleet.models.detectors import Detection, NodeDetectors

from .billing.metering import Metering
from .billing.prices import Tariff
from .billing.underuse import UnderuseTracker
from .config import StreamConfig
from .eventtime import ACCEPTED, DUPLICATE, HELD, LATE, REPLAYED, Gate
from .idle import IdleTracker
from .rollups import MinuteRollups
from .samples import sample_rows

SILENT_LEAVE_S = 0.001     # a silent node leaves its jobs just after its last sample (its last job sample is at it)
STATE_VERSION = 5       # 4: metering, and rented time in the GPU rollups; 5: detectors by kind


@dataclass(frozen=True, slots=True)
class NodeRules:
    """What every node's processing follows, the same for all the nodes of a pipeline and resolved once when it is
    made: the stream's settings, the detectors' model, the tariff (prices, modes, and whether to meter)."""

    cfg: StreamConfig
    tariff: Tariff
    detection: Detection | None = None


class NodeProcessor:
    __slots__ = ("name", "gate", "rollups", "idle", "meter", "underuse", "jobs", "detect", "position", "last_ts",
                 "silent")

    def __init__(self, name: str):
        self.name = name
        self.gate = Gate()
        self.rollups = MinuteRollups()
        self.idle = IdleTracker()
        self.meter = Metering()
        self.underuse = UnderuseTracker()
        self.jobs: set[str] = set()          # jobs on this node in its latest sample
        self.detect = NodeDetectors()
        self.position: tuple[int, int] | None = None    # (partition, offset) of the newest input admitted
        self.last_ts: float | None = None    # the newest message processed
        self.silent = False                  # found silent (no telemetry for stream.silent_after_s) since then

    def push(self, msg: Telemetry, rules: NodeRules, out: Output, ref=None,
             position: tuple[int, int] | None = None) -> str:
        """Admit one message (any order within the lateness); process what the watermark releases.

        ``ref`` (the input it came in) is put in ``out.done`` once the message is processed, or at
        once when it is a duplicate, late or replayed. ``position`` (partition, offset) tells a
        message delivered again after a restart, already reflected in the saved state, from one
        truly late: the first is REPLAYED, the second is LATE.
        """
        cfg, gate = rules.cfg, self.gate
        status, ready = gate.push(msg, cfg.lateness_s, cfg.dedup_horizon_s, ref, cfg.clock_step_s)
        if gate.copies:                      # copies stamped ahead of their sequence, dropped for their originals
            for refs in gate.take_copies():
                out.done.extend(refs)
                out.counts["duplicates"] += 1
        held = status == HELD
        if held:
            status = DUPLICATE
        if position is not None:
            seen = self.position
            if status in (DUPLICATE, LATE) and seen is not None and seen[0] == position[0] \
                    and position[1] <= seen[1]:
                status = REPLAYED
            elif seen is None or seen[0] != position[0] or position[1] > seen[1]:
                self.position = position
        if status != ACCEPTED and not held:
            out.done.append(ref)
        for m, refs in ready:
            self._guarded(m, refs, rules, out)
        return status

    def _guarded(self, msg: Telemetry, refs: list, rules: NodeRules, out: Output) -> None:
        """Process one released message; if that raises, the message is dead-lettered (``internal_error``) and
        the node goes on with the next (one input never stops a partition)."""
        try:
            self._process(msg, rules, out)
        except StateError:
            raise
        except Exception as err:
            source = source_of(refs[0] if refs else None, f"node {self.name} at ts {msg.ts}")
            out.internal_error(err, source, msg.ts, msg.to_json())
        out.done.extend(refs)

    def _process(self, msg: Telemetry, rules: NodeRules, out: Output) -> None:
        cfg, tariff = rules.cfg, rules.tariff
        if self.last_ts is not None and not self.silent and msg.ts - self.last_ts > cfg.silent_after_s:
            self.silence(rules, out)         # silent for longer than stream.silent_after_s: found now, if not before
        out.counts["gpu_samples"] += len(msg.gpus)
        if self.last_ts is None or msg.ts > self.last_ts:
            self.last_ts = msg.ts
        self.silent = False
        if cfg.raw_samples:
            sample_rows(msg, out)
        self.rollups.add(msg, out, cfg.default_interval_s)
        self.idle.add(msg, cfg, out, tariff)
        if tariff.config.enabled:
            self.meter.add(msg, self.idle.runs, cfg, tariff, out)
            self._underuse(rules, out)
        flags = None
        if rules.detection is not None:
            flags = self.detect.add(msg, rules.detection, out, {g.job: g.tenant for g in msg.gpus})
        self.jobs = job_samples(msg, out, self.jobs, flags)

    def flush(self, rules: NodeRules, out: Output, newest: float | None = None) -> None:
        """End of input: process what is waiting and close every open window. ``newest``: the newest time of the
        whole input; a node silent for ``stream.silent_after_s`` before it is :meth:`silence`d first."""
        bc = rules.tariff.config
        self.drain(rules, out)
        if newest is not None and self.last_ts is not None and newest - self.last_ts > rules.cfg.silent_after_s:
            self.silence(rules, out)
        self.rollups.close(self.name, out)
        self.idle.flush(self.name, out)
        self.meter.flush(self.name, rules.tariff, out)
        self._underuse(rules, out)
        self.underuse.flush(self.name, bc.underuse_pct, bc.currency, out)

    def _underuse(self, rules: NodeRules, out: Output) -> None:
        """Hand the billing records just emitted to the underuse alert (decided a period and an idle window on);
        with none, look again once a minute of the node's time (a rental that ended emits none)."""
        records, self.meter.emitted = self.meter.emitted, []
        if self.silent:
            return                         # a silent node's last records: its incidents resolved already
        now = self.last_ts or 0.0
        if records or (self.underuse.open and now - self.underuse.newest >= 60):
            bc = rules.tariff.config
            self.underuse.add(self.name, records, bc.underuse_pct, bc.period_s + rules.cfg.idle_window_s,
                              bc.currency, out, now)

    def drain(self, rules: NodeRules, out: Output) -> None:
        """Process every message waiting for the watermark (the end of input, or a node found silent); those still
        ahead of their collector's sequence, which nothing confirmed, are dead-lettered as ``clock_skew``."""
        for m, refs, by in self.gate.unconfirmed(rules.cfg.lateness_s):
            out.dead_letter("clock_skew", f"ts: {by:.0f} s ahead of what seq {m.seq} of collector {m.collector_id} "
                                          "predicts, and no later message confirmed a clock step",
                            source_of(refs[0] if refs else None, f"node {self.name} at ts {m.ts}"), m.ts, m.to_json())
            out.counts[f"clock_skew:{self.name}"] += 1
            out.done.extend(refs)
        for m, refs in self.gate.drain():
            self._guarded(m, refs, rules, out)

    def silence(self, rules: NodeRules, out: Output) -> None:
        """The node stopped reporting: its idle alerts and its detectors' incidents resolve, "no telemetry since"
        its last message, and its jobs are told it left them (their incidents on it resolve alike). Its next
        message makes it heard again."""
        if self.silent or self.last_ts is None:
            return
        self.silent = True
        out.counts["silent_nodes"] += 1
        self.idle.silence(self.name, out)
        bc = rules.tariff.config
        self.underuse.silence(self.name, self.last_ts, bc.underuse_pct, bc.currency, out)
        self.detect.silence(self.last_ts, out)
        silent_leaves(self.name, self.last_ts + SILENT_LEAVE_S, self.jobs, out)
        self.jobs = set()

    def to_state(self) -> dict:
        """Everything but the messages still waiting for the watermark (see eventtime.py)."""
        return {"v": STATE_VERSION, "gate": self.gate.to_state(), "rollups": self.rollups.to_state(),
                "idle": self.idle.to_state(), "meter": self.meter.to_state(), "underuse": self.underuse.to_state(),
                "jobs": sorted(self.jobs),
                "detect": self.detect.to_state(), "last_ts": self.last_ts, "silent": self.silent,
                "position": None if self.position is None else {"partition": self.position[0],
                                                                "offset": self.position[1]}}

    @classmethod
    def from_state(cls, name: str, state: dict) -> NodeProcessor:
        check_version(f"node {name}", state, STATE_VERSION)
        p = cls.__new__(cls)
        p.name = name
        try:
            p.gate = Gate.from_state(state["gate"])
            p.rollups = MinuteRollups.from_state(state["rollups"])
            p.idle = IdleTracker.from_state(state["idle"])
            p.meter = Metering.from_state(state["meter"])
            p.underuse = UnderuseTracker.from_state(state["underuse"]) if "underuse" in state else UnderuseTracker()
            p.jobs = set(state["jobs"])
            p.detect = NodeDetectors.from_state(state["detect"])
            position = state["position"]
        except KeyError as err:
            raise StateError(f"node {name}: saved state lacks {err}") from None
        p.position = None if position is None else (position["partition"], position["offset"])
        p.last_ts, p.silent = state.get("last_ts"), bool(state.get("silent", False))   # absent: saved before
        return p
