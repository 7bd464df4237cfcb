"""Stragglers: a GPU, or a whole node, that a synchronous job waits for.

State: per GPU of the job (from every node, on the job stage), its last window of samples:
utilization, SM clock and its maximum, power and its limit, temperature, throttle reasons; and, per
node and GPU, until when the other detectors say to leave it out.

Every epoch the job's GPUs are compared, each against the median of the *others* (so one slow GPU does
not pull its own reference down): how far behind in SM clock (as a share of each GPU's own maximum, so
GPUs of different models compare), in utilization and power (as a share of each GPU's limit), how much
more it is throttled than its peers (throttling every GPU shares, a hot row or a power event, is not a
straggler), its excess temperature. A whole node counts as its typical GPU, against the other nodes.

When the question applies (``applies``), and what is evidence:

- only jobs that are working: the job's median utilization at least ``WORKING_UTIL`` (a checkpoint, an
  evaluation pause, a service at low load are not judged); idle or lightly loaded replicas never are
  judged, and a clock difference counts only between GPUs that are busy (an idle GPU parks its clock,
  which says nothing);
- only jobs whose GPUs work in lockstep, told from how their utilization moves (``lockstep``): every
  step of a synchronous job waits for all its GPUs, so when the job's pace changes (a checkpoint, an
  evaluation, a stall, a slow peer) every GPU's utilization changes together. Each epoch the job keeps
  its GPUs' mean utilization; over the last ``LOCKSTEP_EPOCHS`` epochs a GPU *moved alone* when its
  utilization changed by ``BIG_MOVE`` points or more from one epoch to the next and fewer than a third
  of the job's other GPUs moved the same way by half as much, then or one epoch before or after (nodes
  sampled every minute see a shared pause at different moments). When at least half of the job's GPUs (and
  at least two) moved alone, the job runs independent work (a batch sweep, replicas of a service): it is
  not judged. One GPU, or one node of several, moving alone is what a straggler looks like, and GPUs
  that hold steady give no evidence either way: those jobs are judged;
- not while a node of the job is starved of input (IO starvation takes precedence: every GPU then waits,
  and the page would name the wrong GPUs), nor on a GPU whose process just restarted (a leak's OOM);
- a window is positive only when the GPU (or node) is at least ``MIN_SLOWDOWN`` behind its peers in clock
  or utilization, whatever the trees score: throttled like the rest of its job, it keeps nobody waiting;
- behind in utilization with its clock level with its peers' (a GPU its host or link feeds slowly), only in
  a job whose GPUs were seen pausing together since it began (``paused_together``: from an epoch where the
  job worked, at least two GPUs and two thirds of them fell by half a big move, one by a big move, in the same
  epoch or the next; a checkpoint, an evaluation, a stall every GPU waits through). GPUs of independent work
  held at different steady levels look exactly like that deficit and never pause together.

Precedence: memory leak restart > IO starvation > straggler; the evidence names the cause (the throttle
reason, or a slow GPU without throttling: its host, link or input) and what else was seen.

The package: ``constants`` (every constant, its unit and why), ``window`` (each GPU's samples and the job's
lockstep history), ``features`` (each GPU or node against its peers), ``seen`` (what an epoch showed: the evidence,
typed), ``rules`` (when the question applies, what counts as evidence, the decision of one epoch), ``wording``
(what a page says) and ``detector`` (the stream's loop over one job).
"""
from .constants import (
           BIG_MOVE,
           BUSY_UTIL,
           EPOCH,
           KIND,
           LEVEL,
           LOCKSTEP_EPOCHS,
           MIN_SLOWDOWN,
           RUNBOOK,
           STAGE,
           WORKING_UTIL,
)
from .detector import Detector
from .features import FEATURES, Peers, Stats, features, peer_medians, stats_of
from .rules import applies, baseline, decide, lockstep, paused_together, urgent
from .seen import SEEN, StragglerSeen
from .window import Epochs, JobWindow
from .wording import describe

__all__ = ["BIG_MOVE", "BUSY_UTIL", "EPOCH", "FEATURES", "KIND", "LEVEL", "LOCKSTEP_EPOCHS", "MIN_SLOWDOWN", "RUNBOOK",
           "SEEN", "STAGE", "StragglerSeen", "WORKING_UTIL", "applies", "baseline", "decide", "describe", "Detector",
           "Epochs", "features", "JobWindow", "lockstep", "paused_together", "peer_medians", "Peers", "Stats",
           "stats_of", "urgent"]
