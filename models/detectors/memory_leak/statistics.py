"""Robust statistics over a memory series: slopes, steadiness, trends, straightness, correlation."""
from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache
from itertools import repeat
from operator import mul

import numpy as np

from ..base import (
    median,
)
from .constants import BLOCK_MIN, BREATH_SHARE, FLAT_VARIANCE, INT16_LIMIT, MIN_POINTS, THIRDS


def theil_sen(ys: Sequence[float]) -> float:
    slopes = [(ys[j] - ys[i]) / d for i, j, d in pairs_apart(len(ys))]
    return median(slopes) if slopes else 0.0

@cache
def pairs_apart(n: int) -> list[tuple[int, int, int]]:
    """Every pair of n values, earlier first, and how far apart."""
    return [(i, j, j - i) for i in range(n) for j in range(i + 1, n)]

def thirds_slope(ys: Sequence[float]) -> float:
    """A resistant slope: the medians of the first and last thirds, over the distance between them."""
    n = len(ys)
    k = max(1, n // THIRDS)
    return (median(ys[-k:]) - median(ys[:k])) / max(1, n - k)

def r2(ys: Sequence[float]) -> float:
    n = len(ys)
    if n < MIN_POINTS:
        return 0.0
    dx, sxx = centred(n)
    my = sum(ys) / n
    dy = [y - my for y in ys]
    sxy = sum(map(mul, dx, dy))
    syy = sum(map(pow, dy, repeat(2)))
    if syy <= 0 or sxx <= 0:
        return 0.0
    return (sxy * sxy) / (sxx * syy)

@cache
def centred(n: int) -> tuple[list[float], float]:
    """The minutes 0 to n-1 less their mean, and the sum of their squares."""
    mx = (n - 1) / 2
    dx = [i - mx for i in range(n)]
    return dx, sum(d ** 2 for d in dx)

def steady(ys: Sequence[float], total: float) -> float:
    """The share of 5-minute blocks whose median grew (by more than the allocator's breathing)."""
    blocks = [sorted(ys[i:i + BLOCK_MIN])[BLOCK_MIN // 2]                               # each block's median
              for i in range(len(ys) % BLOCK_MIN, len(ys) - BLOCK_MIN + 1, BLOCK_MIN)]
    if len(blocks) < 2:
        return 0.0
    eps = BREATH_SHARE * total
    steps = [b - a for a, b in zip(blocks, blocks[1:])]
    return sum(1 for d in steps if d > eps) / len(steps)

def order_trends(ys: Sequence[float], tail: int) -> tuple[float, float]:
    """Kendall's tau of the values against time, ties counting for nothing (the share of later-earlier pairs
    that grew less the share that fell, -1 to 1), over the last ``tail`` values and over all of them, from the
    signs of every pair. It reads only the order of the values, not their scale: a process's own noise,
    however large, leaves it near 0 unless the memory keeps growing through it, and an allocator that jumps
    once and holds (its values tied after the jump) brings it only part of the way."""
    return order_trends_many([ys], tail)[0]

def pairs(n: int, tail: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """For ``n`` values: every pair's earlier and later index (i < j), which pairs lie in the last ``tail``
    values, and that tail's length."""
    key = (n, tail)
    found = PAIRS_CACHE.get(key)
    if found is None:
        i, j = np.triu_indices(n, 1)
        k = min(tail, n)
        small = np.int16 if n < INT16_LIMIT else np.intp    # kept for every length up to an hour: 2 bytes an index
        found = PAIRS_CACHE[key] = (i.astype(small), j.astype(small), i >= n - k, k)
    return found

PAIRS_CACHE: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray, int]] = {}

def order_trends_many(series: Sequence[Sequence[float]], tail: int) -> list[tuple[float, float]]:
    """:func:`order_trends` of several series at once (one matrix per length: a message's GPUs close their minute
    together); the sums count signs, so they are exact in any order."""
    out: list[tuple[float, float]] = [(0.0, 0.0)] * len(series)
    by_length: dict[int, list[int]] = {}
    for at, ys in enumerate(series):
        if len(ys) >= MIN_POINTS:
            by_length.setdefault(len(ys), []).append(at)
    for n, where in by_length.items():
        i, j, in_tail, k = pairs(n, tail)
        y = np.array([series[at] for at in where], dtype=float)
        signs = np.sign(y[:, j] - y[:, i])
        tails, alls = signs[:, in_tail].sum(axis=1), signs.sum(axis=1)
        for at, t, a in zip(where, tails.tolist(), alls.tolist()):
            out[at] = (t / (k * (k - 1) / 2), a / (n * (n - 1) / 2))
    return out

def corr(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    if n < MIN_POINTS:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    dx, dy = [x - mx for x in xs], [y - my for y in ys]
    sxx = sum(map(pow, dx, repeat(2)))
    syy = sum(map(pow, dy, repeat(2)))
    if sxx <= FLAT_VARIANCE or syy <= FLAT_VARIANCE:
        return 0.0
    return sum(map(mul, dx, dy)) / math.sqrt(sxx * syy)
