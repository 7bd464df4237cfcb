"""One job's GPUs on one node against the host's input paths: what the trees read."""
from __future__ import annotations

from collections.abc import Sequence

from ..base import (
    clip,
    mean,
    not_nan,
)
from .constants import CPU_BOUND_FROM, CPU_BOUND_SPAN, DISK_SCALE, IOWAIT_FULL, LOW_UTIL, NET_SCALE, PERCENT

# the GPUs' work and the host's input paths only: what a GPU's PCIe traffic or memory share looks like depends
# on the model and the workload, not on whether its input comes in time (trees that read them learn a fleet).
# A starved job's GPUs fall from the work they were doing while the host fetches: ``util_drop`` is how far
# below their usual utilization (a moving average over about USUAL_TAU_S) they are, which a GPU idle for
# long, a notebook's burst, or a service following its tide for hours does not show.
FEATURES = ("util_mean", "util_low_frac", "util_spread", "iowait", "disk_read_gbps", "net_rx_gbps", "host_cpu",
            "procs_frac", "idle_while_waiting", "idle_while_reading", "idle_while_receiving", "idle_while_cpu_bound",
            "host_known", "util_drop", "drop_while_fetching")

def features(util: Sequence[float], has_process: Sequence[float], host: Sequence[Sequence[float]] | None,
             usual: float | None = None) -> list[float]:
    """One job's GPUs on one node over one window (every sample's utilization, NaN where not reported, and
    whether the GPU held a process), the host's samples over the same window (:meth:`HostWindow.between`'s
    columns, None: none), and the mean of the GPUs' usual utilization before it (percent; None: not known yet)."""
    u = not_nan(util)
    um = mean(u) if u else 0.0
    spread = (max(u) - min(u)) / PERCENT if u else 0.0
    _, iw, dr, nr, cpu = (not_nan(c) for c in host) if host is not None else ([], [], [], [], [])
    wait = mean(iw) / PERCENT if iw else 0.0
    reads = mean(dr) / DISK_SCALE if dr else 0.0
    net = mean(nr) / NET_SCALE if nr else 0.0
    busy_cpu = mean(cpu) / PERCENT if cpu else 0.0
    has_work = mean(has_process) if len(has_process) else 0.0
    # the host fetches input *and* this job's GPUs, which hold a process, sit idle: both at once
    not_busy = (1.0 - um / PERCENT) * has_work
    paths = (min(1.0, wait / IOWAIT_FULL), min(1.0, reads), min(1.0, net),
             clip((busy_cpu - CPU_BOUND_FROM) / CPU_BOUND_SPAN, 0.0, 1.0))
    drop = max(0.0, usual - um) / PERCENT * has_work if usual is not None and u else 0.0
    low = (sum(1 for x in u if x < LOW_UTIL) / len(u)) if u else 0.0
    host_known = 1.0 if (iw or dr or nr or cpu) else 0.0
    return [um / PERCENT, low, spread, wait, reads, net, busy_cpu, has_work, *(not_busy * p for p in paths), host_known,
            drop, drop * max(paths)]

DROP_AT, UTIL_AT, PROCS_AT, HOST_KNOWN_AT = (FEATURES.index(n) for n in ("util_drop", "util_mean", "procs_frac",
                                                                          "host_known"))
