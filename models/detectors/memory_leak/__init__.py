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

The package: ``constants`` (every constant, its unit and why), ``storage`` (a GPU's per-minute peaks and its
process's track), ``statistics`` (robust slopes, steadiness, trends), ``features`` (what the trees read, the time
to the OOM, a runaway), ``seen`` (what a minute showed: the evidence, typed), ``rules`` (when a process is judged;
what opens, holds back or hastens an incident), ``wording`` (what a page says) and ``detector`` (the stream's loop
over one node).
"""
from .constants import (
    CRITICAL_MIN,
    HISTORY_MINUTES,
    KIND,
    LEVEL,
    LOAD_MINUTES,
    RESTART_QUIET_S,
    RUNAWAY_MIN,
    RUNAWAY_STEP,
    RUNBOOK,
    SHARED_PEERS,
    STAGE,
    WARMUP_MIN,
)
from .detector import Detector
from .features import FEATURES, features, features_many, minutes_to_oom, oom_estimate, runaway
from .rules import applies, baseline, decide, held_back, shared, urgent
from .seen import SEEN, LeakSeen
from .storage import MemoryTrack, Peaks
from .wording import describe

__all__ = ["RUNBOOK", "CRITICAL_MIN", "FEATURES", "HISTORY_MINUTES", "KIND", "LEVEL", "LOAD_MINUTES", "RESTART_QUIET_S",
           "RUNAWAY_MIN", "RUNAWAY_STEP", "SHARED_PEERS", "STAGE", "WARMUP_MIN", "SEEN", "LeakSeen", "Detector",
           "MemoryTrack", "Peaks", "applies", "baseline", "decide", "describe", "features", "features_many",
           "held_back", "minutes_to_oom", "oom_estimate", "runaway", "shared", "urgent"]
