"""IO starvation: a job's GPUs on one node wait for their input data.

State: per GPU of the node, its last window of samples (utilization, whether it holds a process, its
job) and its usual utilization; the host's window (iowait, disk reads, network receive, CPU).

Every epoch, per job on the node: are its GPUs, which hold a process, idle or in a saw-tooth while the
host is busy fetching? Three input paths, each with its own signals:

- local disk: iowait and disk reads high;
- network storage or an object store: host network receive high while disk reads stay low and iowait
  moderate or zero;
- the input pipeline on the host itself: the host's CPUs saturated while the GPUs wait.

The features pair "the GPUs are not busy" with each path's signal, so the trees see which path fed the
stall; the alert's evidence names the path (``cause``) and the other signals present (``also_seen``).
A job is judged once its GPUs have fallen from their usual work (``util_drop``, see FEATURES): the host's
signals are the node's, and a job beside a starved one that goes on as usual is not starved. A job's
features and its usual work read only its own samples: a GPU handed from another job within the window
brings none of that job's work with it.

Precedence: GPUs whose process just restarted (memory_leak.RESTART_QUIET_S) are left out: a restart is
not a starvation. A job is judged only while its GPUs hold a process. The node's input paths are shared by
its jobs: when several are judged starved in one epoch, the host's signals are blamed on those whose GPUs
fell furthest from their usual work; a job that fell less than half as far (``SHARED_DROP_SHARE``), such as
a notebook or a service following the saturated host beside a starved job, is not paged (``decide``); and
while a job's starvation incident is open on the node, another job of the node is held back (``held_back``):
one incident for the node's input path, not one more for each job that slows beside it. A job held back is
still starved for the other detectors (``starved_jobs``): the job stage does not judge it for stragglers while
it waits with the node's input path.

The package: ``constants`` (every constant, its unit and why), ``window`` (each GPU's samples with its usual work,
and the host's), ``features`` (a job's GPUs against the host's input paths), ``seen`` (what an epoch showed: the
evidence, typed), ``rules`` (when a job is judged, the node's epoch decided, jobs held back), ``wording`` (the path
named, what a page says) and ``detector`` (the stream's loop over one node).
"""
from .constants import (
           DROP_MIN,
           DROP_MIN_LIGHT,
           DROP_SHARE,
           EPOCH,
           KIND,
           LEVEL,
           RUNBOOK,
           SHARED_DROP_SHARE,
           STAGE,
           USUAL_TAU_S,
)
from .detector import Detector
from .features import FEATURES, features
from .rules import applies, baseline, decide, held_back
from .seen import SEEN, StarvedSeen
from .window import GpuWindow, HostWindow
from .wording import cause, describe

__all__ = ["DROP_MIN", "DROP_MIN_LIGHT", "DROP_SHARE", "EPOCH", "FEATURES", "KIND", "LEVEL", "RUNBOOK", "SEEN",
           "SHARED_DROP_SHARE", "STAGE", "StarvedSeen", "USUAL_TAU_S", "applies", "baseline", "cause", "decide",
           "describe", "Detector", "features", "GpuWindow", "held_back", "HostWindow"]
