"""Memory leaks: a process whose GPU memory keeps growing until the out-of-memory.

State: per GPU, one value a minute (the minute's highest) since its process started, the last
``HISTORY_MINUTES``. Every minute the series turns into features over 10, 30 and 60 minutes: a robust
slope (as a share of the GPU's memory per hour), how steadily it grows (the share of 5-minute blocks
that grew, and Kendall's tau against time, which reads only the values' order and so holds whatever the
scale of the process's own noise), how straight (R²), the largest single jump as a share of the growth
(an allocator cache grows in a few big steps, then holds), the deepest fall (a KV cache breathes with
load), the headroom and the time left to the out-of-memory at the 30-minute rate.

Decision: the trees' score, on processes past their warm-up (10 minutes) with a growing 30-minute
slope. A steady leak is caught within 30 to 60 minutes of its start whatever its rate; the alert says
the rate, the time to the OOM and a severity that rises as that time shrinks: ``critical`` within
30 minutes, ``warning`` beyond. The time to the OOM is the nearer of two estimates, at the 30-minute and
at the 10-minute rate (a leak that began a few minutes ago, or speeds up, shows in the second first).

Urgency: waiting for ``persist_on`` windows in a row above the threshold costs minutes a leak near the
OOM does not have. A window that says the memory runs out within ``CRITICAL_MIN`` and scores at least the
model's ``urgent_score`` (tuned in training with the threshold) opens the incident at once
(:func:`urgent`): the nearer the OOM, the less certainty asked before paging, since the page is worth
nothing after it.

Runaway: a leak that fills the GPU within half an hour leaves no time for the 30-minute features to fill (the
trees score such a window low until its last minutes: a fast leak was paged a minute or two before its OOM).
A process whose memory rose in each of the last ``RUNAWAY_MIN`` minutes by at least ``RUNAWAY_STEP`` of the GPU's
memory, all of it past the warm-up, and that runs out within ``CRITICAL_MIN`` at the rate of those minutes, is
urgent whatever the score (:func:`runaway`). A model loading or a cache warming up rises too, but in the warm-up,
or in steps that then hold; rising every minute to the OOM is what a leak does.

Shared with other jobs: a positive window does not open an incident (``held_back``) while at least
``SHARED_PEERS`` GPUs of other jobs on the node grew with it in the same half hour, at least half as fast
(``shared``). Unrelated programs do not leak in step; replicas of a service, scheduled as jobs of their own behind
one load balancer, take more requests together and their caches grow together. A leak in every rank of one
training job is one job's and still pages on each rank. An incident already paged goes on (others growing beside
it later do not resolve it), and an urgent window (below) is never held back: the page near the OOM is worth more
than the doubt.

Precedence: a process that dies and restarts on a GPU (a new pid) makes the GPU look idle or slow for
a while; the other detectors leave that GPU out for ``RESTART_QUIET_S`` (see :meth:`restarted`): after a
process replaced by another, after a process died, and after a process started within ``RESTART_QUIET_S`` of
the last one's death (a job relaunched after a crash reloads its checkpoint with its GPUs idle).
"""
from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from itertools import accumulate, repeat
from operator import mul

import numpy as np

from gpufleet.contracts.output import Output

from .base import (
    Decider,
    Incident,
    Incidents,
    Recorder,
    StateError,
    clip,
    event,
    load_fields,
    mean,
    median,
    minutes,
    save_fields,
)

KIND = "memory_leak"
STAGE = "node"
LEVEL = "gpu"
FEATURES = ("slope_10", "slope_30", "slope_60", "steady_30", "steady_60", "r2_30", "jump_share_30",
            "drawdown_30", "headroom", "minutes_to_oom", "age", "span", "load_corr_30", "load_trend_30",
            "trend_30", "trend_60")
HISTORY_MINUTES = 61
LOAD_MINUTES = 31            # the loads the features read: the last 30 minutes' (as ``last30`` of the peaks)
WARMUP_MIN = 10.0            # a process's first minutes are its warm-up: never judged
RESTART_QUIET_S = 300.0      # after a restart the GPU is left out of the other detectors this long
CRITICAL_MIN = 30.0          # time to the OOM under which the alert is critical, and a window may be urgent
SHARED_PEERS = 2             # GPUs of other jobs on the node that grew with it, for a rise to be shared
RUNAWAY_MIN = 5              # minutes in a row of growth for a runaway
RUNAWAY_STEP = 0.01          # the least growth of each of those minutes, a share of the GPU's memory (60% an hour)


_WHOLE = 2.0 ** 53           # a double holds every whole number below this exactly
_STEP = 2 ** 31              # a step of a 32-bit integer


class Peaks:
    """A GPU's per-minute memory peaks, oldest first, in two parts: a head of doubles (none, usually), then a
    tail of the oldest of the rest as a double and each next one as its step from the one before in a 32-bit
    integer (4 bytes a minute instead of 8; memory is counted in whole bytes). A peak that is not a whole number
    below 2**53 goes to the head, and one a step beyond 32 bits from the one before (a process loading its model
    can take tens of GiB in a minute) starts the tail again: the tail before it moves to the head, which so holds
    only minutes from the last such peak back and empties as they are forgotten. Every peak reads back as the
    float it came as."""

    __slots__ = ("head", "first", "steps")

    def __init__(self, values: Sequence[float] = ()) -> None:
        self.head: array | None = None           # doubles, while a peak steps could not hold is kept
        self.first: float | None = None          # the tail's oldest peak (None: no tail)
        self.steps = array("i")
        for v in values:
            self.append(v)

    def append(self, v: float) -> None:
        whole = (type(v) is int or v.is_integer()) and -_WHOLE < v < _WHOLE
        if self.first is not None:
            if whole:
                step = int(v - self.last())
                if -_STEP <= step < _STEP:
                    self.steps.append(step)
                    return
            self.head = self.doubles()           # the tail moves to the head
            self.first, self.steps = None, array("i")
        if whole:
            self.first = float(v)
        elif self.head is None:
            self.head = array("d", [v])
        else:
            self.head.append(v)

    def keep(self, n: int) -> None:
        """Forget all but the newest ``n``."""
        k = len(self) - n
        if k <= 0:
            return
        if self.head is not None:
            h = len(self.head)
            if k < h:
                del self.head[:k]
                return
            self.head, k = None, k - h
        if k and self.first is not None:
            if k > len(self.steps):
                self.first, self.steps = None, array("i")
            else:
                self.first += sum(self.steps[:k])
                del self.steps[:k]

    def doubles(self) -> array:
        """Every peak, oldest first, as doubles."""
        out = array("d") if self.head is None else array("d", self.head)
        if self.first is not None:
            out.extend(accumulate(self.steps, initial=self.first))
        return out

    def last(self) -> float:
        if self.first is not None:
            return self.first + sum(self.steps)
        assert self.head is not None
        return self.head[-1]

    def __len__(self) -> int:
        return (0 if self.head is None else len(self.head)) + (0 if self.first is None else 1 + len(self.steps))


@dataclass(slots=True)
class MemoryTrack:
    """One GPU's memory, per minute, since its current process started."""

    minute: int                     # the minute being filled
    peak: float                     # the highest value of that minute so far
    minutes: Peaks                  # the last HISTORY_MINUTES complete minutes' peaks, oldest first
    loads: array                    # the last LOAD_MINUTES of those minutes' mean utilization, doubles (a KV cache
                                    # follows the load)
    util_sum: float                 # utilization summed over the minute being filled
    util_n: int
    pid: int | None
    since: float                    # ts of the first sample of this process
    total: float                    # the GPU's memory
    restarted_at: float | None = None   # ts this process replaced another one (without a process: ts the last
                                        # one died)

    def to_state(self) -> dict:
        return {**save_fields(self), "minutes": self.minutes.doubles().tolist(), "loads": self.loads.tolist()}

    @classmethod
    def from_state(cls, state: dict) -> MemoryTrack:
        m = load_fields(cls, state, "memory track")
        try:
            m.minutes, m.loads = Peaks(state["minutes"]), array("d", state["loads"])
        except (TypeError, AttributeError):
            raise StateError("memory track: saved minutes and loads must be lists of numbers") from None
        return m


def _theil_sen(ys: Sequence[float]) -> float:
    slopes = [(ys[j] - ys[i]) / d for i, j, d in _pairs_apart(len(ys))]
    return median(slopes) if slopes else 0.0


@cache
def _pairs_apart(n: int) -> list[tuple[int, int, int]]:
    """Every pair of n values, earlier first, and how far apart."""
    return [(i, j, j - i) for i in range(n) for j in range(i + 1, n)]


def _thirds_slope(ys: Sequence[float]) -> float:
    """A resistant slope: the medians of the first and last thirds, over the distance between them."""
    n = len(ys)
    k = max(1, n // 3)
    return (median(ys[-k:]) - median(ys[:k])) / max(1, n - k)


def _r2(ys: Sequence[float]) -> float:
    n = len(ys)
    if n < 3:
        return 0.0
    dx, sxx = _centred(n)
    my = sum(ys) / n
    dy = [y - my for y in ys]
    sxy = sum(map(mul, dx, dy))
    syy = sum(map(pow, dy, repeat(2)))
    if syy <= 0 or sxx <= 0:
        return 0.0
    return (sxy * sxy) / (sxx * syy)


@cache
def _centred(n: int) -> tuple[list[float], float]:
    """The minutes 0 to n-1 less their mean, and the sum of their squares."""
    mx = (n - 1) / 2
    dx = [i - mx for i in range(n)]
    return dx, sum(d ** 2 for d in dx)


def _steady(ys: Sequence[float], total: float) -> float:
    """The share of 5-minute blocks whose median grew (by more than the allocator's breathing)."""
    blocks = [sorted(ys[i:i + 5])[2] for i in range(len(ys) % 5, len(ys) - 4, 5)]      # each block's median
    if len(blocks) < 2:
        return 0.0
    eps = 0.0004 * total
    steps = [b - a for a, b in zip(blocks, blocks[1:])]
    return sum(1 for d in steps if d > eps) / len(steps)


def _trends(ys: Sequence[float], tail: int) -> tuple[float, float]:
    """Kendall's tau of the values against time, ties counting for nothing (the share of later-earlier pairs
    that grew less the share that fell, -1 to 1), over the last ``tail`` values and over all of them, from the
    signs of every pair. It reads only the order of the values, not their scale: a process's own noise,
    however large, leaves it near 0 unless the memory keeps growing through it, and an allocator that jumps
    once and holds (its values tied after the jump) brings it only part of the way."""
    return _trends_many([ys], tail)[0]


def _pairs(n: int, tail: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """For ``n`` values: every pair's earlier and later index (i < j), which pairs lie in the last ``tail``
    values, and that tail's length."""
    key = (n, tail)
    found = _PAIRS.get(key)
    if found is None:
        i, j = np.triu_indices(n, 1)
        k = min(tail, n)
        small = np.int16 if n < 2**15 else np.intp          # kept for every length up to an hour: 2 bytes an index
        found = _PAIRS[key] = (i.astype(small), j.astype(small), i >= n - k, k)
    return found


_PAIRS: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray, int]] = {}


def _trends_many(series: Sequence[Sequence[float]], tail: int) -> list[tuple[float, float]]:
    """:func:`_trends` of several series at once (one matrix per length: a message's GPUs close their minute
    together); the sums count signs, so they are exact in any order."""
    out: list[tuple[float, float]] = [(0.0, 0.0)] * len(series)
    by_length: dict[int, list[int]] = {}
    for at, ys in enumerate(series):
        if len(ys) >= 3:
            by_length.setdefault(len(ys), []).append(at)
    for n, where in by_length.items():
        i, j, in_tail, k = _pairs(n, tail)
        y = np.array([series[at] for at in where], dtype=float)
        signs = np.sign(y[:, j] - y[:, i])
        tails, alls = signs[:, in_tail].sum(axis=1), signs.sum(axis=1)
        for at, t, a in zip(where, tails.tolist(), alls.tolist()):
            out[at] = (t / (k * (k - 1) / 2), a / (n * (n - 1) / 2))
    return out


def _corr(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    if n < 3:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    dx, dy = [x - mx for x in xs], [y - my for y in ys]
    sxx = sum(map(pow, dx, repeat(2)))
    syy = sum(map(pow, dy, repeat(2)))
    if sxx <= 1e-12 or syy <= 1e-12:
        return 0.0
    return sum(map(mul, dx, dy)) / math.sqrt(sxx * syy)


def _restart(m: MemoryTrack, pid: int | None, ts: float) -> bool:
    """Is the GPU's change from ``m``'s process to ``pid`` a restart? A process replaced by another, a process
    that died, and one started within ``RESTART_QUIET_S`` of the death of the last (a job relaunched after a crash
    reloads its checkpoint with its GPUs idle). A first process on a GPU that had none is not."""
    if m.pid is not None:
        return True
    return pid is not None and m.restarted_at is not None and ts - m.since < RESTART_QUIET_S


def _judgeable(history: Sequence[float], total: float) -> bool:
    """Ten minutes of history, on a GPU whose memory is known: enough to tell."""
    return len(history) >= 10 and bool(total)


def features(history: Sequence[float], total: float, age_min: float,
             loads: Sequence[float] | None = None, trends: tuple[float, float] | None = None) -> list[float] | None:
    """One GPU's memory, one value a minute, oldest first (and the minutes' mean utilization, the newest
    ``LOAD_MINUTES`` of them or more): is it leaking? (None: too short to tell). ``trends``: :func:`_trends` of the
    last 60 minutes, when already computed."""
    if not _judgeable(history, total):
        return None
    if loads is None or min(len(loads), LOAD_MINUTES) != min(len(history), LOAD_MINUTES):
        loads = [0.0] * len(history)
    last10, last30, last60 = history[-11:], history[-31:], history[-61:]
    per_hour = 60.0 / total
    s10 = _theil_sen(last10) * per_hour
    s30 = _thirds_slope(last30) * per_hour
    s60 = _thirds_slope(last60) * per_hour
    growth = last30[-1] - last30[0]
    jumps = [b - a for a, b in zip(last30, last30[1:])]
    jump_share = max(jumps) / growth if growth > 0.002 * total and jumps else 1.0
    peak, drawdown = last30[0], 0.0
    for v in last30:
        if v > peak:
            peak = v
        elif peak - v > drawdown:
            drawdown = peak - v
    headroom = max(0.0, 1.0 - history[-1] / total)
    to_oom = headroom / s30 * 60.0 if s30 > 1e-6 else 1e6
    load30 = loads[-LOAD_MINUTES:]
    # a KV cache grows and shrinks with the load; a leak grows whatever the load does
    load_trend = (mean(load30[-10:]) - mean(load30[:10])) / 100.0
    return [s10, s30, s60, _steady(last30, total), _steady(last60, total), _r2(last30), clip(jump_share, 0.0, 1.0),
            drawdown / total, headroom, math.log10(1 + min(to_oom, 1e6)), math.log10(1 + max(0.0, age_min)),
            len(history) / 60.0, _corr(last30, load30), load_trend,
            *(trends if trends is not None else _trends(last60, len(last30)))]


def runaway(history: Sequence[float], total: float, age_min: float) -> tuple[float, float, int] | None:
    """A runaway (see the module's docstring): ``(minutes to the OOM, rate as a share of the GPU's memory an hour,
    the minutes it was measured over)`` at the rate of the last ``RUNAWAY_MIN`` minutes, or None where the memory
    did not rise every one of them by ``RUNAWAY_STEP`` of the GPU's memory, past the warm-up, to run out within
    ``CRITICAL_MIN``."""
    n = RUNAWAY_MIN
    if not total or len(history) <= n or age_min - n < WARMUP_MIN:
        return None
    tail = history[-(n + 1):]
    least = RUNAWAY_STEP * total
    if any(b - a < least for a, b in zip(tail, tail[1:])):
        return None
    per_min = (tail[-1] - tail[0]) / n
    to_oom = max(0.0, total - tail[-1]) / per_min
    return (to_oom, per_min * 60.0 / total, n) if to_oom <= CRITICAL_MIN else None


def features_many(items: Sequence[tuple[Sequence[float], float, float, Sequence[float]] | None]) \
        -> list[list[float] | None]:
    """:func:`features` of several GPUs (``(history, total, age_min, loads)`` each, or None: not judged), their
    trends in one batch (31 values: the last 30 minutes, as :func:`features` reads them)."""
    judged = [item if item is not None and _judgeable(item[0], item[1]) else None for item in items]
    trends = _trends_many([() if item is None else item[0][-HISTORY_MINUTES:] for item in judged], 31)
    return [None if item is None else features(item[0], item[1], item[2], item[3], t)
            for item, t in zip(judged, trends)]


_SLOPE_10, _SLOPE_30, _HEADROOM, _TO_OOM, _SPAN = (FEATURES.index(f) for f in ("slope_10", "slope_30", "headroom",
                                                                                "minutes_to_oom", "span"))


def minutes_to_oom(x: list[float]) -> float:
    """The time to the OOM at the 30-minute rate (the feature the trees read)."""
    return 10 ** x[_TO_OOM] - 1


def oom_estimate(x: list[float]) -> tuple[float, float, int]:
    """The time to the OOM in minutes, the nearer of the estimates at the 30-minute and the 10-minute rate, that
    rate (a share of the GPU's memory per hour), and the minutes it was measured over (fewer than 10 or 30 where
    the history is shorter)."""
    at_30, slope_10 = minutes_to_oom(x), x[_SLOPE_10]
    at_10 = x[_HEADROOM] / slope_10 * 60.0 if slope_10 > 1e-6 else 1e6
    spanned = round(x[_SPAN] * 60.0) - 1                # one peak a minute: the history spans one minute less
    if at_10 < at_30:
        return at_10, slope_10, min(10, spanned)
    return at_30, x[_SLOPE_30], min(30, spanned)


def applies(x: list[float]) -> bool:
    """Judged only past the warm-up, while the 30-minute slope grows."""
    return 10 ** x[FEATURES.index("age")] - 1 >= WARMUP_MIN and x[FEATURES.index("slope_30")] > 0


def baseline(x: list[float]) -> bool:
    """The rule an operator writes first: less than 10% of the memory left."""
    return x[FEATURES.index("headroom")] < 0.10


class Detector:
    """The leak detector of one node's GPUs."""

    __slots__ = ("tracks", "incidents")

    def __init__(self) -> None:
        self.tracks: dict[str, MemoryTrack] = {}
        self.incidents = Incidents()

    def add(self, msg, decider: Decider, ctx) -> None:
        """One node message (in ts order); the GPUs whose process just restarted go into ``ctx.flags.quiet``.
        The GPUs whose minute closed with it are judged together (their windows scored in one batch)."""
        due: list[tuple] = []
        for g in msg.gpus:
            self._sample(msg, g, due)
        if due:
            items = [None if m is None else (m.minutes.doubles(), m.total, age, m.loads) for _, m, age, *_ in due]
            xs = features_many(items)
            runs = [None if item is None else runaway(*item[:3]) for item in items]
            self._evaluate(msg, [(g, x, pid, used, total, run)
                                 for (g, _, _, pid, used, total), x, run in zip(due, xs, runs)],
                           decider, ctx.out, ctx.recorder)
        ctx.flags.quiet |= self.restarted(msg.ts)

    def _sample(self, msg, g, due: list[tuple]) -> None:
        if g.mem_used_bytes is None or not g.mem_total_bytes:
            return
        ts, minute = msg.ts, int(msg.ts // 60)
        pid = g.processes[0].pid if g.processes else None
        m = self.tracks.get(g.uuid)
        if m is None or m.pid != pid:                 # a new process: its memory history starts again
            restarted = ts if m is not None and _restart(m, pid, ts) else None
            m = self.tracks[g.uuid] = MemoryTrack(minute, g.mem_used_bytes, Peaks(), array("d"), 0.0, 0, pid, ts,
                                                  g.mem_total_bytes, restarted)
        elif minute > m.minute:
            closed = m.peak
            m.minutes.append(closed)
            m.loads.append(m.util_sum / m.util_n if m.util_n else 0.0)
            m.minutes.keep(HISTORY_MINUTES)
            del m.loads[:-LOAD_MINUTES]
            m.minute, m.peak, m.util_sum, m.util_n = minute, g.mem_used_bytes, 0.0, 0
            # judged below with the other GPUs whose minute closed: (gpu, track or None, age in minutes, ...)
            due.append((g, m if m.pid is not None else None, (msg.ts - m.since) / 60.0, m.pid, closed,
                        m.total))
        m.peak = max(m.peak, g.mem_used_bytes)
        if g.util_pct is not None:
            m.util_sum += g.util_pct
            m.util_n += 1

    def restarted(self, ts: float) -> set[str]:
        """GPUs whose process restarted within ``RESTART_QUIET_S`` before ``ts``."""
        return {u for u, m in self.tracks.items()
                if m.restarted_at is not None and ts - m.restarted_at < RESTART_QUIET_S}

    def _evaluate(self, msg, due: list[tuple], decider: Decider, out: Output, recorder: Recorder | None) -> None:
        """The closed minutes of one message's GPUs, in the message's GPU order: ``(gpu, features or None,
        pid, the minute's peak, the GPU's memory, its :func:`runaway` or None)``."""
        judged = [(x, g.job) for g, x, *_ in due if x is not None]
        scores, flags = iter(decider.score_many([x for x, _ in judged])), iter(shared(judged))
        for g, x, pid, used, total, run in due:
            key = f"{KIND}:{g.uuid}"
            if x is None:
                if key in self.incidents.by_key:
                    self.incidents.observe(key, False, msg.ts, decider, {}, out, describe)
                continue
            score = next(scores)
            oom, rate, over = oom_estimate(x)
            if run is not None and run[0] < oom:          # the nearest estimate: a runaway's own minutes
                oom, rate, over = run
            info = {"node": msg.node, "gpu_uuid": g.uuid, "job": g.job, "tenant": g.tenant, "pool": msg.pool,
                    "index": g.index, "pid": pid, "score": round(score, 4), "rate_gb_h": rate * total / 1e9,
                    "used_gb": used / 1e9, "total_gb": total / 1e9, "to_oom_min": oom, "rate_over_min": over,
                    "severity": "critical" if oom <= CRITICAL_MIN else "warning", "shared": next(flags),
                    "runaway": run is not None}
            if recorder is not None:
                recorder(KIND, key, msg.ts, x, info)
            positive, now = decide(x, score, decider, info), urgent(x, score, decider, info)
            if positive and not now and held_back(key, info, self.incidents):
                positive = False
            self.incidents.observe(key, positive, msg.ts, decider, info, out, describe, urgent=now)

    def to_state(self) -> dict:
        return {"tracks": {u: m.to_state() for u, m in self.tracks.items()}, "incidents": self.incidents.to_state()}

    @classmethod
    def from_state(cls, state: dict) -> Detector:
        d = cls()
        try:
            d.tracks = {u: MemoryTrack.from_state(m) for u, m in state["tracks"].items()}
            d.incidents = Incidents.from_state(state["incidents"])
        except (KeyError, AttributeError):
            raise StateError("memory leak detector: saved state lacks tracks or incidents") from None
        return d


def decide(x: list[float], score: float, decider: Decider, info: dict | None = None) -> bool:
    return applies(x) and (score >= decider.threshold or urgent(x, score, decider, info))


def shared(windows: Sequence[tuple[list[float], object]]) -> list[bool]:
    """One closed minute of one node, ``(features, job)`` for each GPU judged in it: whether each GPU's rise is
    shared, ``SHARED_PEERS`` GPUs of other jobs on the node growing in the same half hour at least half as fast
    (recorded with the window, so training reads the stream's very flag)."""
    judged = [applies(x) for x, _ in windows]
    rising = [(job, x[_SLOPE_30]) for (x, job), ok in zip(windows, judged) if ok]
    return [ok and sum(1 for j, s in rising if j != job and s >= 0.5 * x[_SLOPE_30]) >= SHARED_PEERS
            for (x, job), ok in zip(windows, judged)]


def held_back(key: str, info: dict, incidents: Incidents) -> bool:
    """A positive window whose rise is shared with other jobs (:func:`shared`) opens no incident; one already paged
    goes on. Training replays its incidents through this same rule (urgent windows are never held back)."""
    return bool(info.get("shared")) and not incidents.is_open(key)


def urgent(x: list[float], score: float, decider: Decider, info: dict | None = None) -> bool:
    """A positive window that opens the incident at once: a runaway (the window's ``info`` says so, whatever the
    score), or the memory runs out within ``CRITICAL_MIN`` at the nearer estimate and the score is at least the
    model's ``urgent_score`` (or the threshold, where that is lower; never, where the model has none)."""
    if not applies(x):
        return False
    if info is not None and info.get("runaway"):
        return True
    least = decider.urgent_score
    return least is not None and score >= min(least, decider.threshold) and oom_estimate(x)[0] <= CRITICAL_MIN


def describe(status: str, info: dict, st: Incident, resolved_at: float | None) -> dict:
    who = f"GPU {info['index']} on {info['node']}" + (
        f" (job {info['job']}, pid {info['pid']})" if info.get("job") else f" (pid {info['pid']})")
    oom = info["to_oom_min"]
    when = f"about {oom / 60:.1f} h" if oom >= 90 else f"about {oom:.0f} min" if oom >= 0.5 else "under a minute"
    if status == "firing":       # the rate's own span, not the minutes the incident waited to fire
        over = info.get("rate_over_min")
        summary = (f"{who} leaks memory: {info['rate_gb_h']:.2f} GB/h" + (f" over the last {over} min" if over else "")
                   + f", {info['used_gb']:.1f} of {info['total_gb']:.0f} GB used, out of memory in {when}")
    else:
        summary = f"{who} memory stopped growing (or the process ended) after {minutes(st, resolved_at):.0f} min"
    evidence = {"cause": "memory growth", "also_seen": [], "rate_bytes_per_h": round(info["rate_gb_h"] * 1e9),
                "slope_gb_per_h": round(info["rate_gb_h"], 3), "used_gb": round(info["used_gb"], 2),
                "total_gb": round(info["total_gb"], 2), "minutes_to_oom": round(oom, 1), "pid": info["pid"],
                "score": info["score"]}
    return event(KIND, info["gpu_uuid"], status, st, resolved_at, info, summary, evidence)
