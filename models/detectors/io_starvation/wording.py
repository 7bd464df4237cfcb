"""The input path the evidence names, and what a page says."""
from __future__ import annotations

from ..base import (
    Incident,
    Seen,
    Told,
    clip,
    ended,
    event,
    minutes,
)
from .constants import (
    ALSO_SEEN_MIN,
    CAUSE_CPU_FROM,
    CAUSE_CPU_SPAN,
    DISK_QUIET_GBPS,
    GB_PER_GIB,
    IOWAIT_FULL,
    IOWAIT_LOW,
    KIND,
    NET_WITH_DISK_WEIGHT,
    READS_WEIGHT,
)
from .features import FEATURES
from .seen import StarvedSeen


def cause(x: list[float]) -> tuple[str, list[str]]:
    """The input path the evidence points to, and the other signals seen. Each path's own signal, whatever the
    GPUs do (they are idle on every path alike): local disk by its iowait, its reads at half weight (reads the disk
    keeps up with are no wait); network by its receive, at half weight beside heavy disk reads with iowait (a
    network file system that caches to disk); the host's input pipeline by its CPUs from ``CAUSE_CPU_FROM`` busy.
    On a tie the disk, then the host's CPUs, are named: iowait
    is a wait on the disk itself, which a pipeline starved of CPU does not show (its reads the disk keeps up with
    count half), and a network file system's traffic beside heavy disk reads is the disk's."""
    f = dict(zip(FEATURES, x))
    paths = {"disk": max(min(1.0, f["iowait"] / IOWAIT_FULL), READS_WEIGHT * min(1.0, f["disk_read_gbps"])),
             "host cpu": clip((f["host_cpu"] - CAUSE_CPU_FROM) / CAUSE_CPU_SPAN, 0.0, 1.0),
             "network": min(1.0, f["net_rx_gbps"]) * (1.0 if f["disk_read_gbps"] < DISK_QUIET_GBPS
                                                       or f["iowait"] < IOWAIT_LOW else NET_WITH_DISK_WEIGHT)}
    best = max(paths, key=lambda k: paths[k])            # the first of the strongest: disk, cpu, network
    seen = [p for p, v in paths.items() if p != best and v > ALSO_SEEN_MIN]
    return best, seen


def describe(status: str, info: Seen, st: Incident, resolved_at: float | None) -> dict:
    assert isinstance(info, StarvedSeen)
    path = info.cause
    disk, net = info.disk * GB_PER_GIB, info.net * GB_PER_GIB
    fed = {"disk": f"{info.iowait:.0f}% iowait and {disk:.2f} GiB/s of disk reads",
           "network": f"{net:.2f} GiB/s of network receive (disk reads {disk:.2f} GiB/s)",
           "host cpu": f"the host's CPUs {info.cpu:.0f}% busy feeding them"}[path]
    what = (f"job {info.job} on {info.node} waits for its input data ({path}): {info.gpus} GPU"
            f"{'s' if info.gpus != 1 else ''} at {info.util:.0f}% utilization, {fed}")
    if status == "firing":       # starved since the first positive window began (the incident's start)
        summary = f"{what[0].upper()}{what[1:]}, for {minutes(st):.0f} min"
    else:
        starved = f"starved for {minutes(st, resolved_at):.0f} min"
        summary = ended(f"Job {info.job} on {info.node}", st, resolved_at, starved) or \
            f"Job {info.job} on {info.node} no longer waits for input data ({starved})"
    evidence = {"cause": path, "also_seen": info.also_seen, "util_pct": round(info.util, 1),
                "iowait_pct": round(info.iowait, 1), "disk_read_gb_per_s": round(info.disk, 3),
                "net_rx_gb_per_s": round(info.net, 3), "host_cpu_pct": round(info.cpu, 1),
                "gpus": info.gpus, "score": info.score}
    return event(KIND, info.target, status, st, resolved_at, info, Told(summary, evidence))
