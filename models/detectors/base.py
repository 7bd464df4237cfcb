"""What every detector shares: event-time epochs, windows of samples, the incident tracker, alert events.

A detector looks at bounded windows of samples and, every epoch of event time, turns each target's
window into named features, scores them with its trees (models/artifact.py) and decides: positive or
not. The :class:`Incidents` tracker turns decisions into incidents: ``persist_on`` positives in a row
open one (a ``firing`` event), or one urgent positive (a detector's own rule: a leak about to run out of
memory). It resolves once ``persist_off`` negatives in a row have come *and* the condition has stayed clear
for the kind's hold-down (``hold_down_s``): a condition that clears and returns on the same target within the
hold-down is the same incident (same dedup key, no new page), the return counted in its ``flaps``. The
resolve's ``resolved_at`` is when the condition last cleared. The stream and training use the same tracker,
so what training tunes is what the stream does.
"""
from __future__ import annotations

import dataclasses
import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, Self

from gpufleet.contracts.events import (
    DEESCALATE_AFTER_S,
    SEVERITIES,
    UPDATE_EVERY_S,
    Facts,
    Told,
    Where,
    alert,
    change_of,
)
from gpufleet.contracts.output import Output
from gpufleet.contracts.state import StateError, load_fields, save_fields

EPOCH_S = 30.0          # how often windows are evaluated (at least; slower collectors stretch it)
WINDOW_S = 60.0         # how much a window holds, at least three samples of the slowest collector

Recorder = Callable[[str, str, float, list, "Seen"], None]   # kind, key, ts, features, what the window showed

THROTTLE_NAMES = ((0x40, "hardware thermal slowdown"), (0x20, "thermal throttling"), (0x80, "power brake"),
                  (0x8, "hardware slowdown"), (0x4, "power cap"))
POWER_CAP_BIT = 0x4     # brushing the power cap is normal under load; the other bits are not


class Decider(Protocol):
    """What the tracker needs of a detector's trained part (models/artifact.KindModel)."""

    threshold: float
    persist_on: int
    persist_off: int
    urgent_score: float | None      # the score an urgent window needs to fire at once (None: none is)
    hold_down_s: float | None       # how long a cleared condition must stay clear to resolve (None: 0)

    def score(self, x: list[float]) -> float: ...

    def score_many(self, xs: Sequence[Sequence[float]]) -> list[float]: ...


@dataclass
class NodeFlags:
    """What the node stage's detectors know that the next ones, and the job stage, must respect."""

    quiet: set[str] = field(default_factory=set)      # GPUs whose process just restarted
    starved: set[str] = field(default_factory=set)    # jobs starved of input on this node


@dataclass
class NodeContext:
    """What a node-stage detector gets with each message, besides its model."""

    out: Output
    tenant_of: dict
    recorder: Recorder | None
    flags: NodeFlags


@dataclass(frozen=True, slots=True)
class JobItem:
    """What a job-stage detector gets: one node's job sample (gpufleet/contracts/jobsample.py), at ``ts``, in
    (ts, node) order."""

    ts: float
    node: str
    sample: dict


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a job-stage detector gets with each sample, besides its model: the job, and where its output goes."""

    job: str
    tenant: str | None
    pool: str | None
    out: Output
    recorder: Recorder | None


class Detector(Protocol):
    """A kind's detector of one target (a node's messages, or a job's samples): the methods every stage calls,
    with the same signatures for every kind (checked when the kind registers, models/detectors/__init__.py)."""

    def add(self, item, decider: Decider, ctx) -> None:
        """One input: a telemetry message and a :class:`NodeContext` (node stage), or a :class:`JobItem` and a
        :class:`JobContext` (job stage)."""

    def silence(self, ts: float, out: Output, node: str | None = None) -> None:
        """A node stopped reporting at ``ts`` (the target's node; for a job, ``node``, one of its nodes): the
        incidents on it resolve, "no telemetry since"."""

    def end(self, ts: float, out: Output) -> None:
        """The target is gone (a job from every node): its incidents resolve."""

    def to_state(self) -> dict: ...

    @classmethod
    def from_state(cls, state: dict) -> Self: ...


def window_s(interval: float | None) -> float:
    """The window of a target sampled every ``interval`` seconds: a minute, or three samples."""
    return max(WINDOW_S, 3.0 * (interval or 0.0))


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if not n:
        return float("nan")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def finite(v: float, default: float = 0.0) -> float:
    return default if v is None or v != v or math.isinf(v) else v


def clip(v: float, lo: float, hi: float) -> float:
    return lo if v < lo else hi if v > hi else v


def throttle_text(bits: int) -> str:
    names = [name for bit, name in THROTTLE_NAMES if bits & bit]
    return " and ".join(names[:2]) if names else ""


def union(bits) -> int:
    out = 0
    for b in bits:
        out |= b or 0
    return out


# -- what a window showed --------------------------------------------------------------------------------
@dataclass(slots=True, kw_only=True)
class Seen:
    """What one window showed of its target: where the target is, the model's score, the severity, and whether the
    detector judged it at all. Each kind's record (its package's ``SEEN``) adds its evidence by name; the kind's
    rules decide from it and its wording describes from it. Every field has a default, so an incident saved
    before a field came loads with it."""

    node: str | None = None
    job: str | None = None
    tenant: str | None = None
    pool: str | None = None
    gpu_uuid: str | None = None
    score: float = 0.0
    severity: str = "warning"
    held: bool = False               # not judged: the detector left this window out (training learns nothing of it)

    def lookback_s(self) -> float:
        """How far back the window's evidence reaches: an incident starts that long before its first positive
        window's end (the kind's record says; none by default)."""
        return 0.0

    def to_state(self) -> dict:
        return save_fields(self)

    @classmethod
    def from_state(cls, state: dict) -> Self:
        """The record as saved; a field saved before it was dropped is refused, one added since takes its default."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = [k for k in state if k not in names]
        if unknown:
            raise StateError(f"{cls.__name__}: saved state has unknown fields {unknown}")
        return cls(**state)


# -- incidents ------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Incident:
    """One target's pending or open incident."""

    hits: int                        # positive windows in a row
    misses: int                      # negative windows in a row
    first_ts: float                  # the first positive window of this run
    detected_at: float | None        # when it fired (None while pending)
    started_at: float
    info: Seen                       # what the latest positive window showed
    flaps: int = 0                   # times the condition cleared and came back within the hold-down
    clear_since: float | None = None     # when the condition last cleared (None: it holds)
    reason: str = ""                 # why it resolved (RESOLUTIONS), set when it does
    told: str = ""                   # the severity its last firing event said ("": none told yet)
    told_at: float = 0.0             # when that was (stream time)
    revision: int = 0                # firing events after the first
    lower_since: float | None = None     # since when the windows have shown a severity below the one told

    def to_state(self) -> dict:
        return {**save_fields(self), "info": self.info.to_state()}

    @classmethod
    def from_state(cls, state: dict, seen: type[Seen]) -> Incident:
        """The incident as saved, what it saw read as the kind's record ``seen``."""
        # flaps, clear_since and reason came with the hold-down, told, told_at and revision with updates: a state
        # saved before lacks them (an open incident then counts as told at its detection, at the severity seen)
        info = seen.from_state(state.get("info", {}))
        told = {"told": info.severity if state.get("detected_at") is not None else "",
                "told_at": state.get("detected_at") or 0.0, "revision": 0, "lower_since": None}
        return load_fields(cls, {"flaps": 0, "clear_since": None, "reason": "", **told, **state, "info": info},
                           "incident")


# Why an incident resolved, as a resolve's evidence ``resolution`` names it, and how its summary says it.
RESOLUTIONS = {
    "cleared": "the condition cleared",
    "process_ended": "its process ended",
    "out_of_memory": "its process ran out of memory",
    "job_ended": "the job ended",
    "rental_ended": "the rental ended",
    "no_telemetry": "no telemetry since",
}


Describe = Callable[[str, Seen, Incident, float | None], dict]   # status, what was seen, incident, resolved_at


class Judge(NamedTuple):
    """How a detector's windows become incidents and events: its trained part (thresholds, persistence), where
    the events go, and its kind's wording."""

    decider: Decider
    out: Output
    describe: Describe


class Incidents:
    """Open and pending incidents of one processor, by dedup key."""

    __slots__ = ("by_key",)

    def __init__(self) -> None:
        self.by_key: dict[str, Incident] = {}

    def observe(self, key: str, positive: bool, ts: float, info: Seen | None, judge: Judge,
                urgent: bool = False) -> None:
        """One window's decision and what it showed (a negative's may be None: it is not kept); an ``urgent``
        positive opens the incident without waiting for ``persist_on``."""
        decider, out, describe = judge
        st = self.by_key.get(key)
        if positive:
            assert info is not None, key
            if st is None:
                st = self.by_key[key] = Incident(0, 0, ts, None, ts - info.lookback_s(), info)
            if st.detected_at is not None and st.misses >= decider.persist_off:
                st.flaps += 1            # it had cleared, and came back within the hold-down: the same incident
            st.hits += 1
            st.misses = 0
            st.clear_since = None
            st.info = info
            if st.detected_at is None and (st.hits >= decider.persist_on or urgent):
                st.detected_at = ts
                st.told, st.told_at = info.severity, ts
                out.event(describe("firing", info, st, None))
            elif st.detected_at is not None:
                self._restate(st, ts, describe, out)
        elif st is not None:
            st.hits = 0
            st.misses += 1
            if st.misses == 1:
                st.clear_since = ts
            if st.detected_at is None:
                del self.by_key[key]
            elif st.misses >= decider.persist_off and ts - (st.clear_since or ts) >= (decider.hold_down_s or 0.0):
                st.reason = "cleared"
                out.event(describe("resolved", st.info, st, st.clear_since))
                del self.by_key[key]

    @staticmethod
    def _restate(st: Incident, ts: float, describe: Describe, out: Output) -> None:
        """An open incident's firing event again, when it is due: its severity rose (told at once to every route the
        new one reaches), its severity fell and stayed lower for ``DEESCALATE_AFTER_S`` (a severity hovering at a
        threshold pages once, not at every crossing), or ``UPDATE_EVERY_S`` has passed since it was last told
        (its numbers now, at the severity told: no new page)."""
        seen, told = st.info.severity, st.told
        rank = SEVERITIES.index
        lower = seen in SEVERITIES and told in SEVERITIES and rank(seen) < rank(told)
        st.lower_since = (st.lower_since if st.lower_since is not None else ts) if lower else None
        if seen != told and not lower:
            now = seen                                       # escalated
        elif lower and ts - (st.lower_since or ts) >= DEESCALATE_AFTER_S:
            now = seen                                       # de-escalated, and it held
        elif ts - st.told_at >= UPDATE_EVERY_S:
            now = told                                       # its numbers now
        else:
            return
        change = change_of(told, now)
        st.revision += 1
        e = describe("firing", st.info, st, None)
        e["revision"], e["change"], e["severity"] = st.revision, change, now
        if change != "updated":
            e["previous_severity"] = told
            st.lower_since = None
        st.told, st.told_at = now, ts
        out.event(e)

    def close(self, key: str, ts: float, describe: Describe, out: Output, reason: str) -> None:
        """The target's cause is gone (``reason``, one of RESOLUTIONS): resolve its incident if open, forget it if
        pending."""
        st = self.by_key.pop(key, None)
        if st is not None and st.detected_at is not None:
            st.reason = reason
            out.event(describe("resolved", st.info, st, ts))

    def close_all(self, ts: float, describe: Describe, out: Output, reason: str = "job_ended",
                  keys: list[str] | None = None) -> None:
        """The targets are gone (the job ended; their node stopped reporting, ``reason``): resolve what is open,
        forget what is pending (all, or those of ``keys``)."""
        for key in list(self.by_key) if keys is None else keys:
            self.close(key, ts, describe, out, reason)

    def keys(self, prefix: str) -> list[str]:
        return [k for k in self.by_key if k.startswith(prefix)]

    def is_open(self, key: str) -> bool:
        st = self.by_key.get(key)
        return st is not None and st.detected_at is not None

    def to_state(self) -> dict:
        return {k: st.to_state() for k, st in self.by_key.items()}

    @classmethod
    def from_state(cls, state: dict, seen: type[Seen]) -> Incidents:
        """The incidents as saved, what each saw read as the kind's record ``seen``."""
        i = cls()
        i.by_key = {k: Incident.from_state(st, seen) for k, st in state.items()}
        return i


def event(kind: str, target: str, status: str, st: Incident, resolved_at: float | None, info: Seen,
          told: Told) -> dict:
    """A ``gpufleet.alert.v1`` event for an incident; a resolve's evidence says why (``resolution``) and how often
    the condition cleared and came back within the hold-down (``flaps``)."""
    assert st.detected_at is not None
    if status == "resolved":
        told = Told(told.summary, {**told.evidence, "resolution": st.reason or "cleared", "flaps": st.flaps})
    where = Where(node=info.node, gpu_uuid=info.gpu_uuid, job=info.job, tenant=info.tenant, pool=info.pool)
    resolved = status == "resolved"
    return alert(kind, target, Facts(status=status, severity=st.told if resolved and st.told else info.severity,
                                     where=where, started_at=st.started_at, detected_at=st.detected_at,
                                     resolved_at=resolved_at if resolved else None, score=info.score, told=told,
                                     revision=st.revision))


def ended(who: str, st: Incident, resolved_at: float | None, lasted: str) -> str | None:
    """The summary of a resolve that is not the condition clearing (None where it is): ``who``, why, and how long
    ``lasted`` ("it lagged for 12 min")."""
    reason = st.reason or "cleared"
    if reason == "cleared":
        return None
    if reason == "no_telemetry":
        return f"{who}: no telemetry since {clock(resolved_at)} UTC ({lasted})"
    return f"{who}: {RESOLUTIONS[reason]} ({lasted})"


def clock(ts: float | None) -> str:
    """A time of day, UTC (``14:05``)."""
    import datetime as dt
    return "?" if ts is None else dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M")


def minutes(st: Incident, until: float | None = None) -> float:
    end = until if until is not None else st.detected_at
    assert end is not None
    return (end - st.started_at) / 60.0


# -- windows of samples, kept as one array of doubles, saved as named columns ----------------------------------
NAN = float("nan")


class Window:
    """One target's samples over a window, in ts order, as one array of doubles: the values of ``FIELDS`` for
    each sample in turn (``ts`` first), a missing value as NaN (telemetry's floats are finite, so NaN is never a
    value). A named tuple per sample and its floats cost about 150 bytes a sample; this costs 8 a value. A
    subclass names its fields, and those kept as integers in saved state (``INTS``)."""

    __slots__ = ("data",)
    FIELDS: tuple[str, ...] = ("ts",)
    INTS: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.data = array("d")

    def append(self, *values: float | None) -> None:
        self.data.extend([NAN if v is None else v for v in values] if None in values else values)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.data) // len(self.FIELDS)

    def last(self, name: str) -> float:
        """A field of the newest sample (the window is not empty)."""
        return self.data[self.FIELDS.index(name) - len(self.FIELDS)]

    def last_ts(self) -> float:
        """The newest sample's ts (the window is not empty): ``last("ts")`` without looking up the field."""
        return self.data[-len(self.FIELDS)]

    def drop_through(self, cutoff: float) -> int:
        """Forget the samples at or before ``cutoff``; how many."""
        data = self.data
        if not data or data[0] > cutoff:
            return 0
        k, end = len(self.FIELDS), len(data)
        if end > k and data[k] > cutoff:        # the usual case: a sample in, the oldest out
            del data[:k]
            return 1
        n = 0
        while n < end and data[n] <= cutoff:
            n += k
        if n:
            del data[:n]
        return n // k

    def span(self, start: float, at: float) -> tuple[int, int]:
        """The first and past-the-last sample with ``start < ts <= at``."""
        data, k = self.data, len(self.FIELDS)
        i, end = 0, len(data)
        while i < end and data[i] <= start:
            i += k
        if end and data[end - k] <= at:        # the usual case: every sample since start
            return i // k, end // k
        j = i
        while j < end and data[j] <= at:
            j += k
        return i // k, j // k

    def between(self, start: float, at: float) -> list[list[float]] | None:
        """The samples with ``start < ts <= at``, one list per field in ``FIELDS`` order (None: no sample)."""
        i, j = self.span(start, at)
        return self.columns(i, j) if j > i else None

    def columns(self, i: int, j: int) -> list[list[float]]:
        """Samples ``i`` to ``j`` (past the last), one list per field."""
        k = len(self.FIELDS)
        flat = self.data[i * k:j * k].tolist()
        return [flat[c::k] for c in range(k)]

    def to_state(self) -> dict:
        """Named columns, a missing value as None (as a window of named tuples was saved)."""
        k = len(self.FIELDS)
        return {name: [None if v != v else int(v) if name in self.INTS else v for v in self.data[c::k]]
                for c, name in enumerate(self.FIELDS)}

    @classmethod
    def from_state(cls, state: dict, what: str) -> Self:
        try:
            columns = [state[name] for name in cls.FIELDS]
            w = cls()
            w.data = array("d", [NAN if v is None else float(v) for row in zip(*columns) for v in row])
        except (KeyError, TypeError, ValueError):
            raise StateError(f"{what}: a saved window needs the columns {list(cls.FIELDS)}") from None
        return w


def add_run(runs: list, *values) -> None:
    """One more sample of fields kept as runs (the values, then how many samples in a row had them): the newest
    run grows when it holds the same values, else a new run starts. Values compare as lists do, by identity
    first: a missing value kept as the one ``NAN`` counts as equal to itself."""
    if runs and runs[-len(values) - 1:-1] == [*values]:
        runs[-1] += 1
    else:
        runs += (*values, 1)


def runs_of(runs: list, width: int, field: int, i: int, j: int) -> list:
    """Samples ``i`` to ``j`` (past the last) of a field kept as runs: ``width`` values a run, the last of them
    how many samples in a row the run holds; ``field`` is the value's place in a run."""
    out: list = []
    first = 0
    for r in range(0, len(runs), width):
        last = first + runs[r + width - 1]
        if last > i and first < j:
            out += [runs[r + field]] * (min(last, j) - max(first, i))
        first = last
    return out


def forget_runs(runs: list, width: int, n: int) -> None:
    """Forget the oldest ``n`` samples of runs of ``width`` values (the last a count), in place."""
    count = width - 1
    while n:
        if runs[count] > n:
            runs[count] -= n
            return
        n -= runs[count]
        del runs[:width]


def not_nan(values: Iterable[float]) -> list[float]:
    """The values that are known (not NaN)."""
    return [v for v in values if v == v]


def known_mean(values: list[float]) -> float:
    """The mean of the known (not NaN) values, NaN if none: ``mean(not_nan(values))`` to the last bit, one sum when
    every value is known."""
    total = sum(values)
    if total == total:
        return total / len(values) if values else NAN
    known = not_nan(values)
    return mean(known) if known else NAN


__all__ = ["EPOCH_S", "WINDOW_S", "Recorder", "Seen", "Incident", "Incidents", "event", "minutes", "median", "mean",
           "Window", "add_run", "runs_of", "forget_runs", "not_nan", "known_mean", "NAN", "save_fields", "load_fields",
           "StateError", "throttle_text", "union", "window_s", "finite", "clip", "POWER_CAP_BIT",
           "RESOLUTIONS", "ended", "clock"]
