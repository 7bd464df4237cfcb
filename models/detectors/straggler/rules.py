"""When the question applies, what counts as evidence, and the decision of one epoch."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import pairwise
from operator import sub

from ..base import (
    Decider,
    median,
)
from .constants import (
    BASELINE_THROTTLED_SHARE,
    BIG_MOVE,
    HALF_MOVE,
    INDEPENDENT_MIN,
    INDEPENDENT_SHARE,
    MIN_SLOWDOWN,
    MOVED_WITH_SHARE,
    PAUSED_MIN,
    PAUSED_SHARE,
    PERCENT,
    WORKING_UTIL,
)
from .features import CLOCK_DEFICIT_AT, FEATURES, SLOWDOWN_AT
from .seen import StragglerSeen


def lockstep(history: Sequence[dict[str, float]]) -> bool:
    """Whether the job's GPUs move together (see the package docstring): ``history`` holds, per epoch, each
    GPU's mean utilization. False only when at least half of the job's GPUs, and at least two, moved
    alone: a big move that fewer than a third of the others shared, in the same epoch or the one before or
    after (nodes sampled every minute at other moments see one pause in neighbouring epochs)."""
    return lockstep_of([(tuple(epoch), list(epoch.values())) for epoch in history])

def lockstep_of(epochs: Iterable[tuple[tuple[str, ...], Sequence[float]]]) -> bool:
    """:func:`lockstep` over epochs kept as the GPUs' names and their utilizations in that order (epochs that saw
    the same GPUs share one tuple of names): each step from one epoch to the next is one subtraction per GPU, and
    only a step that holds a big move is looked at GPU by GPU."""
    steps = steps_of(epochs)
    alone: set[str] = set()
    seen: set[str] = set()
    for i, (names, moves) in enumerate(steps):
        seen.update(names)
        if not moves or max(map(abs, moves)) < BIG_MOVE:
            continue
        near = steps[max(0, i - 1):i + 2]
        gpus = {w for step_names, _ in near for w in step_names}
        # who moved up (down) by at least half a big move, in this step or the one before or after
        up = {w for step_names, step in near for w, v in zip(step_names, step) if v >= BIG_MOVE * HALF_MOVE}
        down = {w for step_names, step in near for w, v in zip(step_names, step) if v <= -BIG_MOVE * HALF_MOVE}
        for u, d in zip(names, moves):
            if u in alone or abs(d) < BIG_MOVE:
                continue
            same_way = up if d > 0 else down
            along = len(same_way) - (u in same_way)
            if along < (len(gpus) - (u in gpus)) * MOVED_WITH_SHARE:
                alone.add(u)
    return len(alone) < max(INDEPENDENT_MIN, math.ceil(len(seen) * INDEPENDENT_SHARE))

def steps_of(epochs: Iterable[tuple[tuple[str, ...], Sequence[float]]]) -> list[tuple[tuple[str, ...], list[float]]]:
    """Each step from one epoch to the next: the GPUs seen in both and how their utilization changed."""
    steps: list[tuple[tuple[str, ...], list[float]]] = []
    for (names_before, before), (names, after) in pairwise(epochs):
        if names is names_before or names == names_before:
            steps.append((names, list(map(sub, after, before))))
        else:
            was = dict(zip(names_before, before))
            kept = [(u, a - was[u]) for u, a in zip(names, after) if u in was]
            steps.append((tuple(u for u, _ in kept), [d for _, d in kept]))
    return steps

def paused_together(history: Sequence[dict[str, float]]) -> bool:
    """Whether the job's GPUs were seen pausing together (see the package docstring): ``history`` as for
    :func:`lockstep`."""
    return paused_together_of([(tuple(epoch), list(epoch.values())) for epoch in history])

def paused_together_of(epochs: Sequence[tuple[tuple[str, ...], Sequence[float]]]) -> bool:
    """:func:`paused_together` over epochs kept as :class:`Epochs` keeps them: in the last step, from an epoch
    where the job worked (median utilization at least ``WORKING_UTIL``), at least two GPUs and two thirds of
    them fell by half a big move or more and one of them by a big move, in that step or the one before
    (nodes sampled every minute see one pause in neighbouring epochs). Asked every epoch, so every step
    of the history is asked once while it is the last or the one before."""
    if len(epochs) < 3:
        return False
    (names0, before0), (names1, before1), _ = epochs[-3:]
    steps = steps_of(epochs[-3:])
    if max(median(list(before0)), median(list(before1))) < WORKING_UTIL:
        return False
    fell = {u for names, moves in steps for u, d in zip(names, moves) if d <= -BIG_MOVE * HALF_MOVE}
    big = any(d <= -BIG_MOVE for _, moves in steps for d in moves)
    gpus = set(names0) | set(names1)
    return big and len(fell) >= PAUSED_MIN and len(fell) >= len(gpus) * PAUSED_SHARE

def applies(x: list[float]) -> bool:
    """Judged only while the job works (see the package docstring)."""
    return x[FEATURES.index("job_util")] * PERCENT >= WORKING_UTIL

def baseline(x: list[float]) -> bool:
    """The rule an operator writes first: throttled (not at the power cap) for half the window."""
    return x[FEATURES.index("throttle_frac")] >= BASELINE_THROTTLED_SHARE

def urgent(x: list[float], score: float, decider: Decider, info: StragglerSeen | None = None) -> bool:
    """A positive window sure enough to open the incident at once: its score at least the model's
    ``urgent_score`` (and the threshold; never, where the model has none). A clear straggler is paged on its
    first slow epoch; a doubtful one waits ``persist_on`` epochs."""
    least = decider.urgent_score
    return least is not None and applies(x) and score >= max(least, decider.threshold)


def decide(scored: list[tuple[str, list[float], StragglerSeen, float]], decider: Decider) -> list[bool]:
    """One epoch of one job: positive windows, where the question applies; a slow node's own alert covers
    its GPUs. Training replays recorded epochs through this same function."""
    def judged_slow(x: list[float], info: StragglerSeen, score: float) -> bool:
        return not info.held and applies(x) and score >= decider.threshold and x[SLOWDOWN_AT] >= MIN_SLOWDOWN \
            and (x[CLOCK_DEFICIT_AT] >= MIN_SLOWDOWN or info.paused)

    slow_nodes = {info.node for _, x, info, score in scored if info.level == "node" and judged_slow(x, info, score)}
    out = []
    for _, x, info, score in scored:
        positive = judged_slow(x, info, score)
        if info.level == "gpu" and info.node in slow_nodes:
            positive = False
        out.append(positive)
    return out
