"""The scale policy: how many GPUs a pool should have, from the demand observed and the forecast.

Rules, for every decision at time ``at``:

- a target covers the forecast's p90 plus ``headroom_pct`` over the lead time and until the next
  decision can take effect (``lead_time_s`` + the longer of ``cooldown_s`` and the time to the next
  decision), and the demand observed over the last ``scale_in_after_s`` plus headroom; it is rounded
  up to ``step_gpus`` and kept within ``min_gpus`` and ``max_gpus``;
- it never targets fewer GPUs than are rented now (not even to honour ``max_gpus``);
- it scales in only on observed demand: a target goes down only once a whole ``scale_in_after_s`` of
  demand has been observed, and never below that demand plus headroom; a forecast raises a target,
  it never lowers one (the same decision without a forecast is never higher);
- after a change, ``cooldown_s`` passes before the next, except a rise to what the demand observed
  now needs;
- ``dry_run``: the decision is made and recorded the same way, flagged, and nothing acts on it.

``simulate`` replays a demand series through a policy (capacity asked for arrives ``lead_time_s``
later; capacity released goes at once) and counts GPU-hours provisioned, idle GPU-hours and the
shortfall. Plain Python and numpy; nothing here knows Kafka or ClickHouse.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:          # numpy is the train install's; the settings import the policy in every install
    import numpy as np

ACTIONS = ("scale_up", "scale_down", "hold")


class Policy(BaseModel):
    """One pool's scale policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    headroom_pct: float = Field(10.0, ge=0, le=1000, description="spare capacity over the demand, in percent")
    min_gpus: int = Field(0, ge=0, le=10_000_000, description="never fewer GPUs than this")
    max_gpus: int | None = Field(None, ge=0, le=10_000_000,
                                 description="never more GPUs than this (unless that many are rented)")
    step_gpus: int = Field(1, ge=1, le=100_000, description="capacity comes in multiples of this (e.g. a node)")
    cooldown_s: float = Field(1800.0, ge=0, le=7 * 86400, description="least time between two changes")
    lead_time_s: float = Field(900.0, ge=0, le=7 * 86400, description="time for new capacity to come up")
    scale_in_after_s: float = Field(3600.0, gt=0, le=7 * 86400,
                                    description="demand observed over this long decides how far to scale in")
    dry_run: bool = Field(False, description="record the decisions, act on none")

    @model_validator(mode="after")
    def _bounds(self):
        if self.max_gpus is not None and self.max_gpus < self.min_gpus:
            raise ValueError(f"max_gpus {self.max_gpus} is below min_gpus {self.min_gpus}")
        return self

    def with_headroom(self, gpus: float) -> int:
        return max(0, math.ceil(gpus * (1 + self.headroom_pct / 100) - 1e-9))

    def bounded(self, gpus: int) -> int:
        """Rounded up to the step, kept within min and max."""
        g = self.step_gpus * math.ceil(gpus / self.step_gpus - 1e-9)
        g = max(g, self.min_gpus)
        return g if self.max_gpus is None else min(g, self.max_gpus)


@dataclass(frozen=True)
class Observed:
    """What the pool shows at the decision."""

    current_gpus: int          # GPUs in the pool now
    rented_gpus: int           # GPUs rented now
    peak_gpus: float           # the most GPUs rented over the last scale_in_after_s (now included)
    observed_s: float          # how much of that window has observations


@dataclass(frozen=True)
class Standing:
    """The target in force and when it last changed (None: it never did)."""

    target_gpus: int
    changed_at: float | None


@dataclass(frozen=True)
class Decision:
    at: float
    action: str
    current_gpus: int
    target_gpus: int
    rented_gpus: int
    reason: str
    dry_run: bool


def next_standing(before: Standing | None, d: Decision) -> Standing:
    """The standing target after decision ``d``: changed (and when) if its target differs."""
    if d.action == "hold":
        return before if before is not None else Standing(d.target_gpus, None)
    return Standing(d.target_gpus, d.at)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds < 7200 else f"{seconds / 3600:g} h"


def decide(policy: Policy, at: float, seen: Observed, standing: Standing | None,
           forecast: Sequence[tuple[float, float]] | None = None, *, step_s: float = 0.0,
           next_decision_s: float = 0.0) -> Decision:
    """The decision at ``at``: ``forecast`` is ``(ts, p90)`` per step of ``step_s`` from ``at`` on (None: a
    purely reactive decision); ``next_decision_s``: when the next decision comes."""
    prev = standing.target_gpus if standing is not None else seen.current_gpus
    rented = max(0, int(seen.rented_gpus))
    observed_need = policy.with_headroom(max(seen.peak_gpus, rented))
    reasons = [f"observed peak {seen.peak_gpus:g} GPUs over the last {_minutes(policy.scale_in_after_s)}"
               f" + {policy.headroom_pct:g}% = {observed_need}"]
    need = observed_need
    if forecast:
        window = policy.lead_time_s + max(policy.cooldown_s, next_decision_s)
        ahead = [p90 for ts, p90 in forecast if ts < at + window and ts + step_s > at]
        if ahead:
            fneed = policy.with_headroom(max(ahead))
            reasons.append(f"forecast p90 {max(ahead):.1f} within {_minutes(window)} + {policy.headroom_pct:g}% "
                           f"= {fneed}")
            need = max(need, fneed)
    wanted = max(policy.bounded(need), rented)
    floor = max(policy.bounded(observed_need), rented)         # what the observations alone ask for
    if wanted == rented and policy.bounded(need) < rented:
        reasons.append(f"{rented} rented now")
    cooling = (standing is not None and standing.changed_at is not None
               and at - standing.changed_at < policy.cooldown_s)
    target = wanted
    if wanted < prev:
        if cooling:
            target = prev
            reasons.append(f"scale-in held: cooldown until {_minutes(policy.cooldown_s)} after the last change")
        elif seen.observed_s + 1e-6 < policy.scale_in_after_s:
            target = prev
            reasons.append(f"scale-in held: only {_minutes(seen.observed_s)} of demand observed")
    elif wanted > prev and cooling:
        target = max(prev, floor)
        if target < wanted:
            reasons.append(f"rise to {wanted} held: cooldown" + (f"; {target} for what is observed now"
                                                                  if target > prev else ""))
    action = "scale_up" if target > prev else "scale_down" if target < prev else "hold"
    return Decision(at, action, int(seen.current_gpus), int(target), rented, "; ".join(reasons), policy.dry_run)


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


def static_peak(demand: np.ndarray, policy: Policy, step_s: float) -> Outcome:
    """A fixed capacity at the series' peak (rounded up to the step)."""
    import numpy as np
    peak = float(np.nanmax(demand)) if len(demand) else 0.0
    cap = policy.step_gpus * math.ceil(peak / policy.step_gpus - 1e-9)
    return outcome("static peak", demand, np.full(len(demand), float(cap)), step_s, 0)


def simulate(name: str, demand: Sequence[float] | np.ndarray, start: int, policy: Policy, step_s: float,
             forecast_at: Callable[[int], Sequence[float] | None] | None = None,
             decide_every: int = 1) -> Outcome:
    """Replay ``demand[start:]`` (one value per step) through ``policy``.

    Each ``decide_every`` steps the policy decides from the demand observed before the step (the demand
    of the last step is what is rented now) and from ``forecast_at(i)``: the p90 of the steps from ``i``
    on, or None (``forecast_at`` None: purely reactive). Capacity asked for arrives ``lead_time_s``
    later; capacity released goes at once.
    """
    import numpy as np
    d = np.nan_to_num(np.asarray(demand, dtype=float))
    n = len(d)
    if not 1 <= start < n:
        raise ValueError("start must leave one step of history and one to simulate")
    window = max(1, int(math.ceil(policy.scale_in_after_s / step_s - 1e-9)))
    lead = int(math.ceil(policy.lead_time_s / step_s - 1e-9))
    first = d[max(0, start - window):start]
    cap = float(max(policy.bounded(policy.with_headroom(first.max())), math.ceil(d[start - 1])))
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
            obs = Observed(int(round(cap)), int(math.ceil(d[i - 1] - 1e-9)), float(seen.max()),
                           float(len(seen) * step_s))
            p90 = forecast_at(i) if forecast_at is not None else None
            fc = None if p90 is None else [((i + k) * step_s, float(v)) for k, v in enumerate(p90)]
            dec = decide(policy, i * step_s, obs, standing, fc, step_s=step_s,
                         next_decision_s=decide_every * step_s)
            standing = next_standing(standing, dec)
            changes += dec.action != "hold"
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
