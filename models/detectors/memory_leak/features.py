"""What the trees read of a process's memory, its time to the out-of-memory, and a runaway."""
from __future__ import annotations

import math
from collections.abc import Sequence

from ..base import (
    clip,
    mean,
)
from .constants import (
    CRITICAL_MIN,
    HISTORY_MINUTES,
    JUMP_GROWTH_SHARE,
    LOAD_ENDS_MIN,
    LOAD_MINUTES,
    LONG_MIN,
    MID_MIN,
    MIN_HISTORY,
    MINUTES_PER_HOUR,
    NEVER_MIN,
    PERCENT,
    RUNAWAY_MIN,
    RUNAWAY_STEP,
    SHORT_MIN,
    TINY_SLOPE,
    WARMUP_MIN,
)
from .statistics import corr, order_trends, order_trends_many, r2, steady, theil_sen, thirds_slope

FEATURES = ("slope_10", "slope_30", "slope_60", "steady_30", "steady_60", "r2_30", "jump_share_30",
            "drawdown_30", "headroom", "minutes_to_oom", "age", "span", "load_corr_30", "load_trend_30",
            "trend_30", "trend_60")

def judgeable(history: Sequence[float], total: float) -> bool:
    """Ten minutes of history, on a GPU whose memory is known: enough to tell."""
    return len(history) >= MIN_HISTORY and bool(total)

def features(history: Sequence[float], total: float, age_min: float,
             loads: Sequence[float] | None = None, trends: tuple[float, float] | None = None) -> list[float] | None:
    """One GPU's memory, one value a minute, oldest first (and the minutes' mean utilization, the newest
    ``LOAD_MINUTES`` of them or more): is it leaking? (None: too short to tell). ``trends``: :func:`order_trends` of the
    last 60 minutes, when already computed."""
    if not judgeable(history, total):
        return None
    if loads is None or min(len(loads), LOAD_MINUTES) != min(len(history), LOAD_MINUTES):
        loads = [0.0] * len(history)
    last10, last30, last60 = (history[-(n + 1):] for n in (SHORT_MIN, MID_MIN, LONG_MIN))
    per_hour = MINUTES_PER_HOUR / total
    s10 = theil_sen(last10) * per_hour
    s30 = thirds_slope(last30) * per_hour
    s60 = thirds_slope(last60) * per_hour
    growth = last30[-1] - last30[0]
    jumps = [b - a for a, b in zip(last30, last30[1:])]
    jump_share = max(jumps) / growth if growth > JUMP_GROWTH_SHARE * total and jumps else 1.0
    peak, drawdown = last30[0], 0.0
    for v in last30:
        if v > peak:
            peak = v
        elif peak - v > drawdown:
            drawdown = peak - v
    headroom = max(0.0, 1.0 - history[-1] / total)
    to_oom = headroom / s30 * MINUTES_PER_HOUR if s30 > TINY_SLOPE else NEVER_MIN
    load30 = loads[-LOAD_MINUTES:]
    # a KV cache grows and shrinks with the load; a leak grows whatever the load does
    load_trend = (mean(load30[-LOAD_ENDS_MIN:]) - mean(load30[:LOAD_ENDS_MIN])) / PERCENT
    return [s10, s30, s60, steady(last30, total), steady(last60, total), r2(last30), clip(jump_share, 0.0, 1.0),
            drawdown / total, headroom, math.log10(1 + min(to_oom, NEVER_MIN)), math.log10(1 + max(0.0, age_min)),
            len(history) / MINUTES_PER_HOUR, corr(last30, load30), load_trend,
            *(trends if trends is not None else order_trends(last60, len(last30)))]

def runaway(history: Sequence[float], total: float, age_min: float) -> tuple[float, float, int] | None:
    """A runaway (see the package docstring): ``(minutes to the OOM, rate as a share of the GPU's memory an hour,
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
    return (to_oom, per_min * MINUTES_PER_HOUR / total, n) if to_oom <= CRITICAL_MIN else None

def features_many(items: Sequence[tuple[Sequence[float], float, float, Sequence[float]] | None]) \
        -> list[list[float] | None]:
    """:func:`features` of several GPUs (``(history, total, age_min, loads)`` each, or None: not judged), their
    trends in one batch (31 values: the last 30 minutes, as :func:`features` reads them)."""
    judged = [item if item is not None and judgeable(item[0], item[1]) else None for item in items]
    trends = order_trends_many([() if item is None else item[0][-HISTORY_MINUTES:] for item in judged], LOAD_MINUTES)
    return [None if item is None else features(item[0], item[1], item[2], item[3], t)
            for item, t in zip(judged, trends)]

SLOPE_10_AT, SLOPE_30_AT, HEADROOM_AT, TO_OOM_AT, SPAN_AT = (
    FEATURES.index(f) for f in ("slope_10", "slope_30", "headroom", "minutes_to_oom", "span"))

def minutes_to_oom(x: list[float]) -> float:
    """The time to the OOM at the 30-minute rate (the feature the trees read)."""
    return 10 ** x[TO_OOM_AT] - 1

def oom_estimate(x: list[float]) -> tuple[float, float, int]:
    """The time to the OOM in minutes, the nearer of the estimates at the 30-minute and the 10-minute rate, that
    rate (a share of the GPU's memory per hour), and the minutes it was measured over (fewer than 10 or 30 where
    the history is shorter)."""
    at_30, slope_10 = minutes_to_oom(x), x[SLOPE_10_AT]
    at_10 = x[HEADROOM_AT] / slope_10 * MINUTES_PER_HOUR if slope_10 > TINY_SLOPE else NEVER_MIN
    spanned = round(x[SPAN_AT] * MINUTES_PER_HOUR) - 1     # one peak a minute: the history spans one minute less
    if at_10 < at_30:
        return at_10, slope_10, min(SHORT_MIN, spanned)
    return at_30, x[SLOPE_30_AT], min(MID_MIN, spanned)
