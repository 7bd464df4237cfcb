"""Each GPU (or node) against the medians of the job's others: what the trees read."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from gpufleet.contracts.telemetry import BENIGN_CLOCK_EVENTS

from ..base import (
    POWER_CAP_BIT,
    clip,
    known_mean,
    median,
)
from .constants import BUSY_UTIL, DEFICIT_MAX, DEFICIT_MIN, PERCENT, TEMP_EXCESS_MAX, TEMP_EXCESS_MIN

FEATURES = ("clock_deficit", "util_behind", "util_ahead", "power_deficit", "throttle_frac", "throttle_excess",
            "cap_frac", "temp_excess", "job_util", "busy_frac", "samples_frac", "slowdown", "multi_node")

SLOWDOWN_AT = FEATURES.index("slowdown")

CLOCK_DEFICIT_AT = FEATURES.index("clock_deficit")

class Stats(NamedTuple):
    """One GPU (or node) over one window."""

    util: float
    clock: float                 # mean clock share over its busy samples (nan if none)
    power: float                 # mean power share over its busy samples
    temp: float
    throttled: float             # share of samples throttled for another reason than the power cap
    capped: float                # share of samples at the power cap
    busy: float                  # share of busy samples
    samples: int

def bits_of(throttle: Iterable[float]) -> list[int]:
    """Throttle reasons kept as doubles, as integers (0 when not reported)."""
    return [int(b) if b == b else 0 for b in throttle]

def stats_of(columns: Sequence[list[float]]) -> Stats | None:
    """One GPU's window, as :meth:`JobWindow.between` gives it: a column per field, NaN where not reported."""
    _, util, clock, power, throttle, temp = columns
    total = sum(util)
    if total != total:               # some samples without utilization: the others only
        seen = [i for i, u in enumerate(util) if u == u]
        if not seen:
            return None
        util, clock, power, throttle, temp = ([c[i] for i in seen] for c in (util, clock, power, throttle, temp))
        total = sum(util)
    n = len(util)
    busy = [i for i, u in enumerate(util) if u >= BUSY_UTIL]
    if len(busy) < n:
        clock, power, temp = ([c[i] for i in busy] for c in (clock, power, temp))
    if sum(throttle) == 0:           # none throttled (the usual case; reasons are never negative)
        throttled = capped = 0.0
    else:
        bits = bits_of(throttle)
        throttled = sum(1 for b in bits if b & ~(POWER_CAP_BIT | BENIGN_CLOCK_EVENTS)) / n
        capped = sum(1 for b in bits if b & POWER_CAP_BIT) / n
    return Stats(total / n, known_mean(clock), known_mean(power), known_mean(temp), throttled, capped, len(busy) / n, n)

def typical(gpus: list[Stats]) -> Stats:
    """A node as its typical GPU: the median of each measure (one slow GPU does not make a node slow)."""
    def known(values):
        return median([v for v in values if v == v])
    return Stats(median([g.util for g in gpus]), known(g.clock for g in gpus), known(g.power for g in gpus),
                 known(g.temp for g in gpus), median([g.throttled for g in gpus]),
                 median([g.capped for g in gpus]), median([g.busy for g in gpus]),
                 int(median([g.samples for g in gpus])))

def deficit(mine: float, peers: float) -> float:
    """How far below its peers, as a share of the peers' value (0 when level or above, or unknown)."""
    if not peers or peers != peers or mine != mine:
        return 0.0
    return clip(1.0 - mine / peers, DEFICIT_MIN, DEFICIT_MAX)

def features(stats: dict[str, Stats], expected_samples: int, multi_node: bool,
             peers: dict[str, Peers] | None = None) -> dict[str, list[float]]:
    """Per GPU (or node) of one job over one window: how far it is behind the others (``peers``: the medians of
    the others, :func:`peer_medians`, when already computed)."""
    out: dict[str, list[float]] = {}
    if len(stats) < 2:
        return out
    job_util = median([s.util for s in stats.values()])
    peers = peers if peers is not None else peer_medians(stats)
    for name, s in stats.items():
        p_util, p_clock, p_power, p_temp, p_throttled = peers[name]
        clock_deficit = deficit(s.clock, p_clock)
        behind = clip((p_util - s.util) / PERCENT, DEFICIT_MIN, DEFICIT_MAX)
        x = [clock_deficit, max(0.0, behind), max(0.0, -behind), deficit(s.power, p_power), s.throttled,
             s.throttled - p_throttled, s.capped,
             clip(s.temp - p_temp, TEMP_EXCESS_MIN, TEMP_EXCESS_MAX) if s.temp == s.temp and p_temp == p_temp else 0.0,
             job_util / PERCENT, s.busy, min(1.0, s.samples / max(1, expected_samples)),
             max(clock_deficit, behind), 1.0 if multi_node else 0.0]
        out[name] = [0.0 if v != v else v for v in x]
    return out

class Peers(NamedTuple):
    """The medians of the other GPUs (or nodes) of the job: utilization, clock, power, temperature, throttling
    (clock, power and temperature over those that have a value)."""

    util: float
    clock: float
    power: float
    temp: float
    throttled: float

def peer_medians(stats: dict[str, Stats]) -> dict[str, Peers]:
    """For each member, the medians of the others, from one sort per measure: ``median`` of the others' values
    to the last bit, without a list and a sort per member."""
    columns = [_without_each([getattr(s, field) for s in stats.values()], known_only=field in _KNOWN_ONLY)
               for field in Peers._fields]
    return {name: Peers(*(column[i] for column in columns)) for i, name in enumerate(stats)}

_KNOWN_ONLY = ("clock", "power", "temp")        # measures a GPU may lack (NaN): medians over those that have one

def _without_each(values: list[float], known_only: bool) -> list[float]:
    """``median`` of the values without each one in turn (without the NaN ones too, when ``known_only``)."""
    order = sorted((i for i, v in enumerate(values) if v == v or not known_only), key=values.__getitem__)
    ranked = [values[i] for i in order]          # a stable sort: with one member taken out, the others' sort
    rank = {i: r for r, i in enumerate(order)}
    out = []
    for i in range(len(values)):
        r = rank.get(i)
        n = len(ranked) - (r is not None)
        if n == 0:
            out.append(float("nan"))
            continue
        mid = n // 2
        hi = ranked[mid + 1] if r is not None and mid >= r else ranked[mid]
        if n % 2:
            out.append(hi)
        else:
            lo = ranked[mid] if r is not None and mid - 1 >= r else ranked[mid - 1]
            out.append((lo + hi) / 2)
    return out
