"""The scale policy: how many GPUs a pool should have, from the demand observed and the forecast.

Rules, for every decision at time ``at``:

- a target covers the forecast's p90 plus ``forecast_headroom_pct`` (``headroom_pct`` unless set) over the lead
  time and until the next decision can take effect (``lead_time_s`` + the longer of ``cooldown_s`` and the time to
  the next decision), and the peak demand observed over the last ``scale_in_after_s`` plus ``headroom_pct``; it is
  rounded up to ``step_gpus`` and kept at ``min_gpus`` or more;
- a target never exceeds what exists: the pool's capacity (``capacity_gpus``, else the most GPUs the pool has
  shown in telemetry) and ``max_gpus``; demand beyond the capacity becomes a :class:`CapacityRequest` (how many
  GPUs to add, from when, until when, with the forecast's p90 behind it), never a target; a request rests on the
  forecast only once the pool has ``request_min_history_s`` of demand history (a forecast of a few hours' history
  has a band as wide as a random walk's, no ground to buy GPUs on), before that on the demand observed alone;
- it never targets fewer GPUs than are rented now;
- scale-in (the rule): a target goes below the one in force only when the forecast and the last
  ``scale_in_after_s`` of observed demand agree: that whole window has been observed, the cooldown since the last
  change has passed, and both the peak rented in the window plus headroom and the forecast's p90 until the next
  decision can take effect plus headroom are below the target in force; it goes down to the higher of the two.
  A forecast alone never lowers a target (the same decision without a forecast is never higher), as AWS
  predictive scaling never scales in on a forecast;
- after a change, ``cooldown_s`` passes before the next, except a rise to what the demand observed now needs;
- the action compares the target with the GPUs present: ``scale_up`` above them, ``scale_down`` below, ``hold``
  equal; the reason is one sentence that starts with it ("Scale down from 24 to 0 GPUs: ...");
- ``dry_run``: the decision is made and recorded the same way, flagged, and nothing acts on it.

``simulate`` replays a demand series through a policy (capacity asked for arrives ``lead_time_s``
later; capacity released goes at once) and counts GPU-hours provisioned, idle GPU-hours and the
shortfall; ``static_peak`` and ``oracle`` are the bounds it is compared with. Plain Python and numpy;
nothing here knows Kafka or ClickHouse.
"""
from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:          # numpy is the train install's; the settings import the policy in every install
    import numpy as np

ACTIONS = ("scale_up", "scale_down", "hold")


class Policy(BaseModel):
    """One pool's scale policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    headroom_pct: float = Field(10.0, ge=0, le=1000, description="spare capacity over the demand, in percent")
    forecast_headroom_pct: float | None = Field(None, ge=0, le=1000,
                                                description="spare capacity over the forecast's p90, in percent "
                                                            "(none: headroom_pct)")
    min_gpus: int = Field(0, ge=0, le=10_000_000, description="never fewer GPUs than this")
    max_gpus: int | None = Field(None, ge=0, le=10_000_000,
                                 description="never more GPUs than this (unless that many are rented)")
    capacity_gpus: int | None = Field(None, ge=0, le=10_000_000,
                                      description="GPUs the pool has; a target never exceeds it and demand beyond it "
                                                  "is a capacity request (none: the most GPUs the pool has shown in "
                                                  "telemetry)")
    step_gpus: int = Field(1, ge=1, le=100_000, description="capacity comes in multiples of this (e.g. a node)")
    cooldown_s: float = Field(1800.0, ge=0, le=7 * 86400, description="least time between two changes")
    lead_time_s: float = Field(900.0, ge=0, le=7 * 86400, description="time for new capacity to come up")
    scale_in_after_s: float = Field(3600.0, gt=0, le=7 * 86400,
                                    description="a scale-in waits until this much observed demand agrees with the "
                                                "forecast")
    request_min_history_s: float = Field(86400.0, ge=0, le=366 * 86400,
                                         description="a capacity request rests on the forecast only once the pool "
                                                     "has this much demand history; before, on the demand observed "
                                                     "alone")
    dry_run: bool = Field(False, description="record the decisions, act on none")

    @model_validator(mode="after")
    def _bounds(self):
        if self.max_gpus is not None and self.max_gpus < self.min_gpus:
            raise ValueError(f"max_gpus {self.max_gpus} is below min_gpus {self.min_gpus}")
        return self

    @property
    def forecast_headroom(self) -> float:
        return self.headroom_pct if self.forecast_headroom_pct is None else self.forecast_headroom_pct

    def with_headroom(self, gpus: float, pct: float | None = None) -> int:
        pct = self.headroom_pct if pct is None else pct
        return max(0, math.ceil(gpus * (1 + pct / 100) - 1e-9))

    def stepped(self, gpus: float) -> int:
        """Rounded up to the step, at least ``min_gpus``."""
        return max(self.step_gpus * math.ceil(gpus / self.step_gpus - 1e-9), self.min_gpus)

    def bounded(self, gpus: int) -> int:
        """Rounded up to the step, kept within min and max (not the capacity: see :func:`decide`)."""
        g = self.stepped(gpus)
        return g if self.max_gpus is None else min(g, self.max_gpus)

    def capacity_of(self, seen: Observed) -> int:
        """What the pool has: ``capacity_gpus``, else the most GPUs it has shown; never fewer than are rented."""
        if self.capacity_gpus is not None:
            cap = self.capacity_gpus
        else:
            cap = max(seen.current_gpus, seen.capacity_gpus if seen.capacity_gpus is not None else 0)
        return max(int(cap), int(seen.rented_gpus))


@dataclass(frozen=True)
class Observed:
    """What the pool shows at the decision."""

    current_gpus: int          # GPUs in the pool now
    rented_gpus: int           # GPUs rented now
    peak_gpus: float           # the most GPUs rented over the last scale_in_after_s (now included)
    observed_s: float          # how much of that window has observations
    capacity_gpus: int | None = None   # the most GPUs the pool has shown in telemetry (None: the GPUs present)


@dataclass(frozen=True)
class Standing:
    """The target in force and when it last changed (None: it never did)."""

    target_gpus: int
    changed_at: float | None


@dataclass(frozen=True)
class CapacityRequest:
    """Demand beyond what the pool has: ``gpus`` more from ``start`` until ``end``, with the forecast's highest
    p90 in that time (the observed peak where the demand observed is already beyond the pool)."""

    gpus: int
    start: float
    end: float
    p90: float
    observed: bool = False      # the demand observed now is already beyond the pool

    def to_dict(self) -> dict:
        return {"gpus": int(self.gpus), "from": round(float(self.start), 3), "until": round(float(self.end), 3),
                "p90": round(float(self.p90), 3)}

    def describe(self) -> str:
        behind = "the peak rented" if self.observed else "forecast p90"
        gpus = f"{self.gpus} more GPU{'s' if self.gpus != 1 else ''}"
        return (f"{gpus} asked for from {_when(self.start)} for {_duration(self.end - self.start)} "
                f"({behind} up to {self.p90:.1f})")


@dataclass(frozen=True)
class Decision:
    at: float
    action: str
    current_gpus: int
    target_gpus: int
    rented_gpus: int
    reason: str
    dry_run: bool
    capacity_gpus: int = 0
    capacity_request: CapacityRequest | None = None
    changed: bool = False      # the target differs from the one in force


def next_standing(before: Standing | None, d: Decision) -> Standing:
    """The standing target after decision ``d``: changed (and when) if its target differs."""
    if not d.changed:
        return before if before is not None else Standing(d.target_gpus, None)
    return Standing(d.target_gpus, d.at)


def _duration(seconds: float) -> str:
    if seconds < 7200:
        return f"{seconds / 60:g} min"
    return f"{seconds / 3600:g} h" if seconds < 3 * 86400 else f"{seconds / 86400:.3g} d"


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


class _Need(NamedTuple):
    """A pool's capacity, what the demand observed needs (with its headroom), and the peak observed."""

    capacity: int
    observed_need: int
    peak: float


def _request(policy: Policy, at: float, need_of: _Need, forecast: Sequence[tuple[float, float]], step_s: float,
             window: float) -> CapacityRequest | None:
    """Demand beyond the pool's capacity over the whole forecast (and now, from what is observed), as a request."""
    capacity, observed_need, peak = need_of
    over = [(ts, p90, policy.stepped(policy.with_headroom(p90, policy.forecast_headroom)))
            for ts, p90 in forecast if ts + step_s > at]
    over = [(ts, p90, need) for ts, p90, need in over if need > capacity]
    observed = policy.stepped(observed_need) > capacity
    if not over and not observed:
        return None
    most = max([need for _, _, need in over] + ([policy.stepped(observed_need)] if observed else []))
    gpus = policy.step_gpus * math.ceil((most - capacity) / policy.step_gpus - 1e-9)
    start = at if observed else max(at, min(ts for ts, _, _ in over))
    end = max([ts + step_s for ts, _, _ in over] + ([at + max(window, policy.scale_in_after_s)] if observed else []))
    p90 = max([p for _, p, _ in over] + ([peak] if observed else []))
    return CapacityRequest(int(gpus), float(start), float(end), float(p90), observed)


@dataclass(frozen=True)
class Cadence:
    """When a decision is made: how long until the next one, and how much demand history its forecast rests on
    (None: enough for a capacity request)."""

    next_decision_s: float = 0.0
    history_s: float | None = None


def decide(policy: Policy, at: float, seen: Observed, standing: Standing | None,
           forecast: Sequence[tuple[float, float]] | None = None, *, step_s: float = 0.0,
           cadence: Cadence = Cadence()) -> Decision:
    """The decision at ``at``: ``forecast`` is ``(ts, p90)`` per step of ``step_s`` from ``at`` on (None: a
    purely reactive decision)."""
    next_decision_s, history_s = cadence.next_decision_s, cadence.history_s
    rented = max(0, int(seen.rented_gpus))
    current = int(seen.current_gpus)
    capacity = policy.capacity_of(seen)
    limit = capacity if policy.max_gpus is None else max(min(capacity, policy.max_gpus), rented)
    prev = min(standing.target_gpus if standing is not None else current, limit)
    window = policy.lead_time_s + max(policy.cooldown_s, next_decision_s)
    observed_need = policy.with_headroom(max(seen.peak_gpus, rented))
    why = [f"the peak rented over the last {_duration(policy.scale_in_after_s)} is {seen.peak_gpus:g} GPUs, "
           f"{observed_need} with {policy.headroom_pct:g}% headroom"]
    need = observed_need
    need_of = _Need(capacity, observed_need, seen.peak_gpus)
    request = None
    if forecast:
        ahead = [p90 for ts, p90 in forecast if ts < at + window and ts + step_s > at]
        if ahead:
            fneed = policy.with_headroom(max(ahead), policy.forecast_headroom)
            why.append(f"the forecast p90 peaks at {max(ahead):.1f} within {_duration(window)}, {fneed} with "
                       f"{policy.forecast_headroom:g}% headroom")
            need = max(need, fneed)
        if history_s is None or history_s >= policy.request_min_history_s:
            request = _request(policy, at, need_of, forecast, step_s, window)
        else:
            request = _request(policy, at, need_of, [], step_s, window)
            if _request(policy, at, need_of, forecast, step_s, window) != request:
                why.append(f"no capacity asked for on the forecast yet: it rests on {_duration(history_s)} of "
                           f"history, a request on a forecast needs {_duration(policy.request_min_history_s)}")
    elif policy.stepped(observed_need) > capacity:
        request = _request(policy, at, need_of, [], step_s, window)
    wanted = max(min(policy.stepped(need), limit), rented)
    floor = max(min(policy.stepped(observed_need), limit), rented)     # what the observations alone ask for
    if wanted == rented and policy.stepped(need) < rented:
        why.append(f"{rented} are rented now")
    elif policy.stepped(need) > limit:
        why.append(f"capped at the pool's {capacity} GPUs" if limit == capacity else
                   f"capped at max_gpus {policy.max_gpus}")
    cooling = (standing is not None and standing.changed_at is not None
               and at - standing.changed_at < policy.cooldown_s)
    target = wanted
    if wanted < prev:
        if cooling:
            target = prev
            assert standing is not None and standing.changed_at is not None
            why.append(f"scale-in held until the cooldown ends at {_when(standing.changed_at + policy.cooldown_s)}")
        elif seen.observed_s + 1e-6 < policy.scale_in_after_s:
            target = prev
            why.append(f"scale-in held: {_duration(seen.observed_s)} of the {_duration(policy.scale_in_after_s)} "
                       "of observed demand a scale-in needs")
    elif wanted > prev and cooling:
        target = max(prev, floor)
        if target < wanted:
            why.append(f"rise to {wanted} held by the cooldown" + (f", {target} for the demand observed now"
                                                                   if target > prev else ""))
    if request is not None:
        why.append(f"{request.describe()} beyond the pool's {capacity}")
    action = "scale_up" if target > current else "scale_down" if target < current else "hold"
    head = (f"Scale up from {current} to {target} GPUs" if action == "scale_up" else
            f"Scale down from {current} to {target} GPUs" if action == "scale_down" else f"Hold at {target} GPUs")
    return Decision(at, action, current, int(target), rented, f"{head}: {'; '.join(why)}.", policy.dry_run,
                    capacity, request, target != (standing.target_gpus if standing is not None else current))


# -- replaying a demand series ---------------------------------------------------------
@dataclass
class Outcome:
    """A policy replayed over a demand series."""

    name: str
    provisioned_gpu_h: float
    idle_gpu_h: float
    shortfall_gpu_h: float
    shortfall_count: int            # separate times demand exceeded capacity
    shortfall_steps: int
    peak_capacity: int
    changes: int
    capacity: np.ndarray = field(repr=False)

    def to_dict(self) -> dict:
        return {"provisioned_gpu_hours": round(self.provisioned_gpu_h, 2), "idle_gpu_hours": round(self.idle_gpu_h, 2),
                "shortfall_gpu_hours": round(self.shortfall_gpu_h, 2), "shortfall_count": self.shortfall_count,
                "shortfall_steps": self.shortfall_steps, "peak_capacity": self.peak_capacity,
                "changes": self.changes}


def outcome(name: str, demand: np.ndarray, capacity: np.ndarray, step_s: float, changes: int) -> Outcome:
    import numpy as np
    d = np.nan_to_num(demand)
    short = np.maximum(d - capacity, 0.0)
    over = short > 1e-9
    episodes = int(np.count_nonzero(over[1:] & ~over[:-1]) + (1 if len(over) and over[0] else 0))
    h = step_s / 3600
    return Outcome(name, float(capacity.sum() * h), float(np.maximum(capacity - d, 0.0).sum() * h),
                   float(short.sum() * h), episodes, int(over.sum()), int(capacity.max(initial=0)), changes, capacity)


def pool_capacity(policy: Policy, demand: np.ndarray) -> int:
    """The pool's capacity in a replay: ``capacity_gpus``, else the series' peak (what the pool showed)."""
    import numpy as np
    if policy.capacity_gpus is not None:
        return int(policy.capacity_gpus)
    return int(math.ceil(float(np.nanmax(demand)) - 1e-9)) if len(demand) and np.isfinite(demand).any() else 0


def static_peak(demand: np.ndarray, policy: Policy, step_s: float, capacity: int | None = None) -> Outcome:
    """A fixed capacity at the series' peak (rounded up to the step), within the pool's capacity."""
    import numpy as np
    peak = float(np.nanmax(demand)) if len(demand) else 0.0
    cap = policy.step_gpus * math.ceil(peak / policy.step_gpus - 1e-9)
    if capacity is not None:
        cap = min(cap, capacity)
    return outcome("static peak", demand, np.full(len(demand), float(cap)), step_s, 0)


def oracle(demand: np.ndarray, policy: Policy, step_s: float, capacity: int | None = None) -> Outcome:
    """Perfect foresight: at every step exactly the demand, rounded up to the step, within the pool's capacity
    (capacity asked for a lead time ahead of when it is needed, released the moment it is not); the least any
    policy could provision without falling short more than the pool itself does."""
    import numpy as np
    d = np.nan_to_num(np.asarray(demand, dtype=float))
    cap = policy.step_gpus * np.ceil(d / policy.step_gpus - 1e-9)
    cap = np.maximum(cap, policy.min_gpus)
    if capacity is not None:
        cap = np.minimum(cap, capacity)
    changes = int(np.count_nonzero(np.diff(cap)))
    return outcome("oracle", d, cap.astype(float), step_s, changes)


def simulate(name: str, demand: Sequence[float] | np.ndarray, start: int, policy: Policy, step_s: float,
             forecast_at: Callable[[int], Sequence[float] | None] | None = None,
             decide_every: int = 1) -> Outcome:
    """Replay ``demand[start:]`` (one value per step) through ``policy``.

    Each ``decide_every`` steps the policy decides from the demand observed before the step (the demand
    of the last step is what is rented now) and from ``forecast_at(i)``: the p90 of the steps from ``i``
    on, or None (``forecast_at`` None: purely reactive). Capacity asked for arrives ``lead_time_s``
    later; capacity released goes at once. The pool has ``policy.capacity_gpus`` (else the series' peak):
    no target exceeds it.
    """
    import numpy as np
    d = np.nan_to_num(np.asarray(demand, dtype=float))
    n = len(d)
    if not 1 <= start < n:
        raise ValueError("start must leave one step of history and one to simulate")
    pool = pool_capacity(policy, np.asarray(demand, dtype=float))
    window = max(1, int(math.ceil(policy.scale_in_after_s / step_s - 1e-9)))
    lead = int(math.ceil(policy.lead_time_s / step_s - 1e-9))
    first = d[max(0, start - window):start]
    cap = float(min(max(policy.bounded(policy.with_headroom(first.max())), math.ceil(d[start - 1])), pool))
    pending: list[tuple[int, float]] = []              # (step it arrives, GPUs)
    standing: Standing | None = None
    capacity = np.empty(n - start)
    changes = 0
    for i in range(start, n):
        arrived = [g for s, g in pending if s <= i]
        if arrived:
            cap += sum(arrived)
            pending = [(s, g) for s, g in pending if s > i]
        if (i - start) % decide_every == 0:
            seen = d[max(0, i - window):i]
            obs = Observed(int(round(cap)), int(min(math.ceil(d[i - 1] - 1e-9), pool)), float(seen.max()),
                           float(len(seen) * step_s), pool)
            p90 = forecast_at(i) if forecast_at is not None else None
            fc = None if p90 is None else [((i + k) * step_s, float(v)) for k, v in enumerate(p90)]
            dec = decide(policy, i * step_s, obs, standing, fc, step_s=step_s,
                         cadence=Cadence(next_decision_s=decide_every * step_s))
            standing = next_standing(standing, dec)
            changes += dec.changed
            planned = cap + sum(g for _, g in pending)
            if dec.target_gpus > planned:
                if lead == 0:
                    cap += dec.target_gpus - planned
                else:
                    pending.append((i + lead, dec.target_gpus - planned))
            elif dec.target_gpus < planned:
                cut = planned - dec.target_gpus
                while pending and cut > 0:              # cancel what has not arrived yet first
                    s, g = pending.pop()
                    if g > cut:
                        pending.append((s, g - cut))
                    cut -= min(g, cut)
                cap -= cut
        capacity[i - start] = cap
    return outcome(name, d[start:], capacity, step_s, changes)
