"""When a job is judged, which jobs of a node are starved in one epoch, and which are held back."""
from __future__ import annotations

from ..base import (
    Decider,
    Incidents,
)
from .constants import (
    BASELINE_IOWAIT,
    BASELINE_UTIL,
    DROP_MIN,
    DROP_MIN_LIGHT,
    DROP_SHARE,
    KIND,
    PROCS_MIN,
    SHARED_DROP_SHARE,
)
from .features import DROP_AT, FEATURES, HOST_KNOWN_AT, PROCS_AT, UTIL_AT
from .seen import StarvedSeen


def applies(x: list[float]) -> bool:
    """Judged while the job's GPUs hold a process and have fallen from their usual work, at least DROP_MIN
    (10 points) below it, or by DROP_SHARE of it (a third) and at least DROP_MIN_LIGHT (5 points) where that
    work is light (a service at 15% utilization starved to 7% falls 8 points), on a node that reports its
    host's metrics (without them an idle GPU says nothing about its input). The host's signals are the
    node's: beside a starved job, a job that goes on as usual is not starved."""
    procs = x[PROCS_AT]
    if procs < PROCS_MIN or x[HOST_KNOWN_AT] <= 0:
        return False
    drop = x[DROP_AT]
    if drop >= DROP_MIN:
        return True
    usual = x[UTIL_AT] + drop / procs          # util_drop is the fall times the share of samples with a process
    return drop >= DROP_MIN_LIGHT and drop >= DROP_SHARE * usual

def baseline(x: list[float]) -> bool:
    """The rule an operator writes first: iowait above 10% while utilization is under half."""
    return x[FEATURES.index("iowait")] >= BASELINE_IOWAIT and x[FEATURES.index("util_mean")] < BASELINE_UTIL

def decide(scored: list[tuple[str, list[float], StarvedSeen, float]], decider: Decider) -> list[bool]:
    """One epoch of one node, every job judged on it: ``(key, features, info, score)`` each. A job is starved
    where the question applies and its score passes the threshold, unless another job of the node, starved in
    the same epoch, fell more than twice as far below its usual work (``SHARED_DROP_SHARE``): the host's input
    paths are the node's, and the job that fell furthest is the one that waits for them. Training replays
    recorded epochs through this same function."""
    judged = [applies(x) and score >= decider.threshold for _, x, _, score in scored]
    furthest = max((x[DROP_AT] for (_, x, _, _), j in zip(scored, judged) if j), default=0.0)
    return [j and x[DROP_AT] >= SHARED_DROP_SHARE * furthest for (_, x, _, _), j in zip(scored, judged)]

def held_back(key: str, info: StarvedSeen, incidents: Incidents) -> bool:
    """A job not paged yet, while another job's starvation incident is open on its node: the node's input path
    is paged already (a job beside a starved one slows with the host; it does not wait for input of its own).
    Training replays its incidents through this same rule."""
    if incidents.is_open(key):
        return False
    prefix = f"{KIND}:{info.node}/"
    return any(k != key and k.startswith(prefix) and incidents.is_open(k) for k in incidents.by_key)
