"""What a leak's page says, in GiB, GiB/h and minutes."""
from __future__ import annotations

from ..base import (
    Incident,
    event,
    minutes,
)
from .constants import BYTES_PER_GB, HOURS_FROM_MIN, KIND, MINUTES_PER_HOUR, UNDER_A_MINUTE


def describe(status: str, info: dict, st: Incident, resolved_at: float | None) -> dict:
    who = f"GPU {info['index']} on {info['node']}" + (
        f" (job {info['job']}, pid {info['pid']})" if info.get("job") else f" (pid {info['pid']})")
    oom = info["to_oom_min"]
    when = f"about {oom / MINUTES_PER_HOUR:.1f} h" if oom >= HOURS_FROM_MIN else \
        f"about {oom:.0f} min" if oom >= UNDER_A_MINUTE else "under a minute"
    if status == "firing":       # the rate's own span, not the minutes the incident waited to fire
        over = info.get("rate_over_min")
        summary = (f"{who} leaks memory: {info['rate_gb_h']:.2f} GB/h" + (f" over the last {over} min" if over else "")
                   + f", {info['used_gb']:.1f} of {info['total_gb']:.0f} GB used, out of memory in {when}")
    else:
        summary = f"{who} memory stopped growing (or the process ended) after {minutes(st, resolved_at):.0f} min"
    evidence = {"cause": "memory growth", "also_seen": [], "rate_bytes_per_h": round(info["rate_gb_h"] * BYTES_PER_GB),
                "slope_gb_per_h": round(info["rate_gb_h"], 3), "used_gb": round(info["used_gb"], 2),
                "total_gb": round(info["total_gb"], 2), "minutes_to_oom": round(oom, 1), "pid": info["pid"],
                "score": info["score"]}
    return event(KIND, info["gpu_uuid"], status, st, resolved_at, info, summary, evidence)
