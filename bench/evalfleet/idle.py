"""The idle rule (docs/detectors/idle.md), applied to the samples as written, and the guard band around it.

A rented GPU is idle when its `util_pct` is strictly below 5 in every sample for at least 600 s, measured
from the first such sample to the latest one plus one interval; a change of tenant, a sample at or above
5, or a gap longer than three intervals ends the run. Runs whose length is within a few intervals of 600 s
would make a detector's score depend on rounding, so the generator breaks such runs up (``band``).
"""
from __future__ import annotations

import numpy as np

THRESHOLD = 5.0
WINDOW = 600.0


def band(interval: float) -> tuple[float, float]:
    """Quiet-run lengths that are kept out of the data: within three intervals (and a margin) of 600 s."""
    margin = max(30.0, interval)
    return WINDOW - 3 * interval - margin, WINDOW + 3 * interval + margin


def quiet_runs(ts: np.ndarray, util: np.ndarray, tenant: np.ndarray, interval: float) -> list[tuple[int, int]]:
    """Runs of one GPU's samples (first, last index) that the idle rule counts as one stretch."""
    quiet = (util < THRESHOLD) & (tenant >= 0)
    if not quiet.any():
        return []
    cont = np.zeros(len(ts), dtype=bool)
    cont[1:] = quiet[1:] & quiet[:-1] & (tenant[1:] == tenant[:-1]) & (np.diff(ts) <= 3 * interval)
    starts = np.flatnonzero(quiet & ~cont)
    nxt = np.append(cont[1:], False)
    ends = np.flatnonzero(quiet & ~nxt)
    return list(zip(starts.tolist(), ends.tolist()))


def duration(ts: np.ndarray, run: tuple[int, int], interval: float) -> float:
    return float(ts[run[1]] - ts[run[0]] + interval)


def split_points(ts: np.ndarray, run: tuple[int, int], interval: float) -> list[int]:
    """Samples to make busy so that every piece of ``run`` is well under the low edge of the band."""
    lo, _ = band(interval)
    limit = lo / 2
    out = []
    first = run[0]
    for j in range(run[0], run[1] + 1):
        if j > first and ts[j] - ts[first] + interval > limit:
            out.append(j)
            first = j + 1
    return out
