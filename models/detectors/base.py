"""What every detector shares: event-time epochs, windows of samples, the incident tracker, alert events.

A detector looks at bounded windows of samples and, every epoch of event time, turns each target's
window into named features, scores them with its trees (models/artifact.py) and decides: positive or
not. The :class:`Incidents` tracker turns decisions into incidents: ``persist_on`` positives in a row
open one (a ``firing`` event), or one urgent positive (a detector's own rule: a leak about to run out of
memory), ``persist_off`` negatives in a row close it (``resolved``). The stream and training use the same
tracker, so what training tunes is what the stream does.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, Protocol, TypeVar

from gpufleet.streams.events import alert
from gpufleet.streams.output import Output
from gpufleet.streams.state import StateError, load_fields, save_fields

EPOCH_S = 30.0          # how often windows are evaluated (at least; slower collectors stretch it)
WINDOW_S = 60.0         # how much a window holds, at least three samples of the slowest collector

Recorder = Callable[[str, str, float, list, dict], None]   # kind, key, ts, features, info

THROTTLE_NAMES = ((0x40, "hardware thermal slowdown"), (0x20, "thermal throttling"), (0x80, "power brake"),
                  (0x8, "hardware slowdown"), (0x4, "power cap"))
POWER_CAP_BIT = 0x4     # brushing the power cap is normal under load; the other bits are not


class Decider(Protocol):
    """What the tracker needs of a detector's trained part (models/artifact.KindModel)."""

    threshold: float
    persist_on: int
    persist_off: int
    urgent_score: float | None      # the score an urgent window needs to fire at once (None: none is)

    def score(self, x: list[float]) -> float: ...

    def score_many(self, xs: Sequence[Sequence[float]]) -> list[float]: ...


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


# -- incidents ------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Incident:
    """One target's pending or open incident."""

    hits: int                        # positive windows in a row
    misses: int                      # negative windows in a row
    first_ts: float                  # the first positive window of this run
    detected_at: float | None        # when it fired (None while pending)
    started_at: float
    info: dict                       # what the latest positive window showed


Describe = Callable[[str, dict, Incident, float | None], dict]   # status, info, incident, resolved_at


class Incidents:
    """Open and pending incidents of one processor, by dedup key."""

    __slots__ = ("by_key",)

    def __init__(self) -> None:
        self.by_key: dict[str, Incident] = {}

    def observe(self, key: str, positive: bool, ts: float, decider: Decider, info: dict, out: Output,
                describe: Describe, urgent: bool = False) -> None:
        """One window's decision; an ``urgent`` positive opens the incident without waiting for ``persist_on``."""
        st = self.by_key.get(key)
        if positive:
            if st is None:
                st = self.by_key[key] = Incident(0, 0, ts, None, ts, info)
            st.hits += 1
            st.misses = 0
            st.info = info
            if st.detected_at is None and (st.hits >= decider.persist_on or urgent):
                st.detected_at = ts
                out.event(describe("firing", info, st, None))
        elif st is not None:
            st.hits = 0
            st.misses += 1
            if st.detected_at is None:
                del self.by_key[key]
            elif st.misses >= decider.persist_off:
                out.event(describe("resolved", st.info, st, ts))
                del self.by_key[key]

    def close_all(self, ts: float, describe: Describe, out: Output) -> None:
        """The target is gone (the job ended): resolve what is open, forget what is pending."""
        for st in list(self.by_key.values()):
            if st.detected_at is not None:
                out.event(describe("resolved", st.info, st, ts))
        self.by_key = {}

    def keys(self, prefix: str) -> list[str]:
        return [k for k in self.by_key if k.startswith(prefix)]

    def is_open(self, key: str) -> bool:
        st = self.by_key.get(key)
        return st is not None and st.detected_at is not None

    def to_state(self) -> dict:
        return {k: save_fields(st) for k, st in self.by_key.items()}

    @classmethod
    def from_state(cls, state: dict) -> Incidents:
        i = cls()
        i.by_key = {k: load_fields(Incident, st, "incident") for k, st in state.items()}
        return i


def event(kind: str, target: str, status: str, st: Incident, resolved_at: float | None, info: dict, summary: str,
          evidence: dict) -> dict:
    """A ``gpufleet.alert.v1`` event for an incident."""
    assert st.detected_at is not None
    return alert(kind, target, status=status, severity=info.get("severity", "warning"), node=info.get("node"),
                 gpu_uuid=info.get("gpu_uuid"), job=info.get("job"), tenant=info.get("tenant"),
                 pool=info.get("pool"), started_at=st.started_at, detected_at=st.detected_at,
                 resolved_at=resolved_at if status == "resolved" else None, score=info.get("score", 0.0),
                 summary=summary, evidence=evidence)


def minutes(st: Incident, until: float | None = None) -> float:
    end = until if until is not None else st.detected_at
    assert end is not None
    return (end - st.started_at) / 60.0


# -- windows of samples, saved as named columns ----------------------------------------------------------
PointT = TypeVar("PointT")


def save_points(points, kind: Any) -> dict:
    """A window of samples (named tuples) as named columns."""
    return {name: [p[i] for p in points] for i, name in enumerate(kind._fields)}


def load_points(state: dict, kind: Any, what: str) -> list:
    try:
        columns = [state[name] for name in kind._fields]
    except (KeyError, TypeError):
        raise StateError(f"{what}: a saved window needs the columns {list(kind._fields)}") from None
    return [kind(*row) for row in zip(*columns)]


def drop_through(points: list, cutoff: float) -> None:
    """Forget the samples of a window (a list in ts order: a few hundred bytes less than a deque, whose
    smallest block holds 64) at or before ``cutoff``."""
    if points and points[0].ts <= cutoff:
        n = 1
        for p in islice(points, 1, None):
            if p.ts > cutoff:
                break
            n += 1
        del points[:n]


__all__ = ["EPOCH_S", "WINDOW_S", "Recorder", "Incident", "Incidents", "event", "minutes", "median", "mean",
           "save_points", "load_points", "drop_through", "save_fields", "load_fields", "StateError", "throttle_text",
           "union", "window_s", "finite", "clip", "POWER_CAP_BIT"]
