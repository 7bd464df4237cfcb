"""When a process is judged, and what opens, holds back or hastens an incident."""
from __future__ import annotations

from collections.abc import Sequence

from ..base import (
    Decider,
    Incidents,
)
from .constants import (
    AT_LIMIT_SHARE,
    BASELINE_HEADROOM,
    BYTES_PER_GB,
    CRITICAL_MIN,
    OOM_GROWTH_S,
    RESTART_QUIET_S,
    SECONDS_PER_HOUR,
    SHARED_PEERS,
    SHARED_RATE_SHARE,
    WARMUP_MIN,
)
from .features import FEATURES, SLOPE_30_AT, oom_estimate
from .seen import LeakSeen
from .storage import MemoryTrack


def restart(m: MemoryTrack, pid: int | None, ts: float) -> bool:
    """Is the GPU's change from ``m``'s process to ``pid`` a restart? A process replaced by another, a process
    that died, and one started within ``RESTART_QUIET_S`` of the death of the last (a job relaunched after a crash
    reloads its checkpoint with its GPUs idle). A first process on a GPU that had none is not."""
    if m.pid is not None:
        return True
    return pid is not None and m.restarted_at is not None and ts - m.since < RESTART_QUIET_S

def at_limit(used: float, total: float) -> bool:
    """A process with less than ``AT_LIMIT_SHARE`` of its GPU's memory left: a leak there has run out (or is about
    to); one that stops growing there has not cleared."""
    return total - used <= AT_LIMIT_SHARE * total


def ending(m: MemoryTrack, tenant: str | None, job: str | None, info: LeakSeen) -> str:
    """How a leaking process that is gone ended (``m`` its track, ``tenant`` and ``job`` the GPU's now): it ran out
    of memory where its last sample was at the limit, or closer to it than ``OOM_GROWTH_S`` of its growth; else the
    rental or the job ended with it, or the process alone."""
    rate = info.rate_gb_h * BYTES_PER_GB / SECONDS_PER_HOUR
    if at_limit(m.last, m.total) or m.total - m.last <= rate * OOM_GROWTH_S:
        return "out_of_memory"
    if tenant is None:
        return "rental_ended"
    return "job_ended" if job != m.job else "process_ended"


def applies(x: list[float]) -> bool:
    """Judged only past the warm-up, while the 30-minute slope grows."""
    return 10 ** x[FEATURES.index("age")] - 1 >= WARMUP_MIN and x[FEATURES.index("slope_30")] > 0

def baseline(x: list[float]) -> bool:
    """The rule an operator writes first: less than 10% of the memory left."""
    return x[FEATURES.index("headroom")] < BASELINE_HEADROOM

def decide(x: list[float], score: float, decider: Decider, info: LeakSeen | None = None) -> bool:
    return applies(x) and (score >= decider.threshold or urgent(x, score, decider, info))

def shared(windows: Sequence[tuple[list[float], object]]) -> list[bool]:
    """One closed minute of one node, ``(features, job)`` for each GPU judged in it: whether each GPU's rise is
    shared, ``SHARED_PEERS`` GPUs of other jobs on the node growing in the same half hour at least half as fast
    (recorded with the window, so training reads the stream's very flag)."""
    judged = [applies(x) for x, _ in windows]
    rising = [(job, x[SLOPE_30_AT]) for (x, job), ok in zip(windows, judged) if ok]
    return [ok and sum(1 for j, s in rising if j != job and s >= SHARED_RATE_SHARE * x[SLOPE_30_AT]) >= SHARED_PEERS
            for (x, job), ok in zip(windows, judged)]

def held_back(key: str, info: LeakSeen, incidents: Incidents) -> bool:
    """A positive window whose rise is shared with other jobs (:func:`shared`) opens no incident; one already paged
    goes on. Training replays its incidents through this same rule (urgent windows are never held back)."""
    return info.shared and not incidents.is_open(key)

def urgent(x: list[float], score: float, decider: Decider, info: LeakSeen | None = None) -> bool:
    """A positive window that opens the incident at once: a runaway (the window's ``info`` says so, whatever the
    score), or the memory runs out within ``CRITICAL_MIN`` at the nearer estimate and the score is at least the
    model's ``urgent_score`` (or the threshold, where that is lower; never, where the model has none)."""
    if not applies(x):
        return False
    if info is not None and info.runaway:
        return True
    least = decider.urgent_score
    return least is not None and score >= min(least, decider.threshold) and oom_estimate(x)[0] <= CRITICAL_MIN
