"""The input path the evidence names, and what a page says."""
from __future__ import annotations

from ..base import (
    WINDOW_S,
    Incident,
    event,
    minutes,
)
from .constants import ALSO_SEEN_MIN, DISK_QUIET_GBPS, KIND, NET_WITH_DISK_WEIGHT, SECONDS_PER_MINUTE
from .features import FEATURES


def cause(x: list[float]) -> tuple[str, list[str]]:
    """The input path the evidence points to, and the other signals seen."""
    f = dict(zip(FEATURES, x))
    paths = {"disk": max(f["idle_while_waiting"], f["idle_while_reading"]),
             "network": f["idle_while_receiving"] * (1.0 if f["disk_read_gbps"] < DISK_QUIET_GBPS
                                                      else NET_WITH_DISK_WEIGHT),
             "host cpu": f["idle_while_cpu_bound"]}
    best = max(paths, key=lambda k: paths[k])
    seen = [p for p, v in paths.items() if p != best and v > ALSO_SEEN_MIN]
    return best, seen

def describe(status: str, info: dict, st: Incident, resolved_at: float | None) -> dict:
    path = info["cause"]
    fed = {"disk": f"{info['iowait']:.0f}% iowait and {info['disk']:.2f} GB/s of disk reads",
           "network": f"{info['net']:.2f} GB/s of network receive (disk reads {info['disk']:.2f} GB/s)",
           "host cpu": f"the host's CPUs {info['cpu']:.0f}% busy feeding them"}[path]
    what = (f"job {info['job']} on {info['node']} waits for its input data ({path}): {info['gpus']} GPU"
            f"{'s' if info['gpus'] != 1 else ''} at {info['util']:.0f}% utilization, {fed}")
    if status == "firing":       # starved since the first positive window began: its window before it fired
        starved = minutes(st) + info.get("window_min", WINDOW_S / SECONDS_PER_MINUTE)
        summary = f"{what[0].upper()}{what[1:]}, for {starved:.0f} min"
    else:
        summary = (f"Job {info['job']} on {info['node']} no longer waits for input data "
                   f"(starved for {minutes(st, resolved_at):.0f} min)")
    evidence = {"cause": path, "also_seen": info["also_seen"], "util_pct": round(info["util"], 1),
                "iowait_pct": round(info["iowait"], 1), "disk_read_gb_per_s": round(info["disk"], 3),
                "net_rx_gb_per_s": round(info["net"], 3), "host_cpu_pct": round(info["cpu"], 1),
                "gpus": info["gpus"], "score": info["score"]}
    return event(KIND, info["target"], status, st, resolved_at, info, summary, evidence)
