"""What a leak's page says, in GiB, GiB/h and minutes."""
from __future__ import annotations

from ..base import (
    RESOLUTIONS,
    Incident,
    Seen,
    Told,
    ended,
    event,
    minutes,
)
from .constants import BYTES_PER_GB, GB_PER_GIB, HOURS_FROM_MIN, KIND, MINUTES_PER_HOUR, UNDER_A_MINUTE
from .seen import LeakSeen


def describe(status: str, info: Seen, st: Incident, resolved_at: float | None) -> dict:
    assert isinstance(info, LeakSeen)
    who = f"GPU {info.index} on {info.node}" + (
        f" (job {info.job}, pid {info.pid})" if info.job else f" (pid {info.pid})")
    oom = info.to_oom_min
    used, total = f"{info.used_gb * GB_PER_GIB:.1f}", f"{info.total_gb * GB_PER_GIB:.0f}"
    when = f"about {oom / MINUTES_PER_HOUR:.1f} h" if oom >= HOURS_FROM_MIN else \
        f"about {oom:.0f} min" if oom >= UNDER_A_MINUTE else "under a minute"
    if status == "firing":       # the rate's own span, not the minutes the incident waited to fire
        over = info.rate_over_min
        summary = (f"{who} leaks memory: {info.rate_gb_h * GB_PER_GIB:.2f} GiB/h"
                   + (f" over the last {over} min" if over else "")
                   + f", {used} of {total} GiB used, out of memory in {when}")
    else:
        lasted = f"after {minutes(st, resolved_at):.0f} min"
        if st.reason in ("out_of_memory", "process_ended"):
            summary = f"{who}: {RESOLUTIONS[st.reason]} with {used} of {total} GiB used ({lasted})"
        else:
            summary = ended(who, st, resolved_at, lasted) or f"{who}: memory stopped growing ({lasted})"
    evidence = {"cause": "memory growth", "also_seen": [], "rate_bytes_per_h": round(info.rate_gb_h * BYTES_PER_GB),
                "slope_gb_per_h": round(info.rate_gb_h, 3), "used_gb": round(info.used_gb, 2),
                "total_gb": round(info.total_gb, 2), "minutes_to_oom": round(oom, 1), "pid": info.pid,
                "score": info.score}
    return event(KIND, info.gpu_uuid or "", status, st, resolved_at, info, Told(summary, evidence))
