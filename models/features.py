"""Window features of each detector, computed the same way in training and in the stream.

Every feature is relative or physical (a deficit against the job's other GPUs, a
share of samples, a rate as a share of the GPU's memory per hour), so that a
model fitted on one fleet carries to GPUs of other sizes and speeds.
"""
from __future__ import annotations

import math

FEATURE_VERSION = 2

POWER_CAP_BIT = 0x4     # brushing the power cap is normal under load; the others are not

STRAGGLER = ("clock_deficit", "util_points_behind", "power_deficit", "throttle_frac", "cap_frac", "temp_excess",
             "job_util", "samples_frac", "slowdown", "throttle_excess")
IO_STARVATION = ("util_mean", "util_low_frac", "util_spread", "iowait", "disk_read_gbps", "pcie_rx_share",
                 "procs_frac", "mem_frac", "idle_while_waiting", "idle_while_reading")
MEMORY_LEAK = ("slope_10", "slope_30", "up_frac_10", "up_frac_30", "growth_10", "headroom", "minutes_to_oom",
               "age", "up_frac_5")
KINDS = {"straggler": STRAGGLER, "io_starvation": IO_STARVATION, "memory_leak": MEMORY_LEAK}


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if not n:
        return float("nan")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _deficit(mine: float, peers: float) -> float:
    """How far below its peers a GPU is, as a share of the peers' value (0 when level or above)."""
    if not peers or peers != peers or mine != mine:
        return 0.0
    return max(-0.5, min(1.0, 1.0 - mine / peers))


def straggler_stats(gpus: dict[str, dict[str, list]]) -> dict[str, tuple]:
    """Per GPU (or node) over one window: mean util, SM clock, power, temperature, the share of samples
    throttled for another reason than the power cap, the share at the power cap, and the sample count.

    ``gpus`` maps a name to lists ``util``, ``clock``, ``power``, ``throttle`` and ``temp``."""
    stats = {}
    for name, w in gpus.items():
        busy = [i for i, u in enumerate(w["util"]) if u is not None]
        if not busy:
            continue
        clocks = [w["clock"][i] for i in busy if w["clock"][i] is not None]
        powers = [w["power"][i] for i in busy if w["power"][i] is not None]
        temps = [w["temp"][i] for i in busy if w["temp"][i] is not None]
        bits = [w["throttle"][i] or 0 for i in busy]
        stats[name] = (mean([w["util"][i] for i in busy]), mean(clocks) if clocks else float("nan"),
                       mean(powers) if powers else float("nan"), mean(temps) if temps else float("nan"),
                       sum(1 for b in bits if b & ~POWER_CAP_BIT) / len(bits),
                       sum(1 for b in bits if b & POWER_CAP_BIT) / len(bits), len(busy))
    return stats


def peer_centre(stats: dict[str, tuple], name: str) -> tuple:
    """Median util, clock, power and temperature of the others (leave one out): the robust centre."""
    others = [s for n, s in stats.items() if n != name]
    return tuple(median([o[i] for o in others if o[i] == o[i]]) for i in range(4))


def straggler_features(stats: dict[str, tuple], expected_samples: int) -> dict[str, list[float]]:
    """Per GPU (or node) of one job, over one window: how far it is behind the others.

    The centre is the median of the *others*, so one slow GPU does not pull its own reference down; a dip
    every GPU shares (a checkpoint, an evaluation) leaves every deficit near zero, and so does throttling
    that every GPU shares (a hot row, a facility power event): ``throttle_excess`` is its share of
    throttled samples above the others' median.
    """
    out: dict[str, list[float]] = {}
    if len(stats) < 2:
        return out
    job_util = median([s[0] for s in stats.values()])
    for name, (util, clock, power, temp, thr, cap, n) in stats.items():
        p_util, p_clock, p_power, p_temp = peer_centre(stats, name)
        x = [_deficit(clock, p_clock), max(-0.5, min(1.0, (p_util - util) / 100.0)), _deficit(power, p_power), thr, cap,
             max(-20.0, min(40.0, temp - p_temp)) if temp == temp and p_temp == p_temp else 0.0,
             job_util / 100.0, min(1.0, n / max(1, expected_samples))]
        x.append(max(x[0], x[1]))
        x.append(thr - median([s[4] for n2, s in stats.items() if n2 != name]))
        out[name] = [0.0 if v != v else v for v in x]
    return out


def io_features(util: list, iowait: list, disk: list, pcie_rx: list, procs: list, mem_frac: list) -> list[float]:
    """One job's GPUs on one node, over one window: busy, or waiting for its input data?

    ``util``, ``pcie_rx``, ``procs`` (1 when the GPU had a process) and ``mem_frac`` have one value per GPU
    sample; ``iowait`` and ``disk`` one per host sample.
    """
    u = [x for x in util if x is not None]
    um = mean(u) if u else 0.0
    spread = (max(u) - min(u)) / 100.0 if u else 0.0
    rx = [x for x in pcie_rx if x is not None]
    iw = [x for x in iowait if x is not None]
    dr = [x for x in disk if x is not None]
    wait, reads = (mean(iw) / 100.0) if iw else 0.0, (mean(dr) / 1e9) if dr else 0.0
    has_work = mean(procs) if procs else 0.0
    # the host waits on reads *and* this job's GPUs, which hold a process, sit idle: both at once
    not_busy = (1.0 - um / 100.0) * has_work
    return [um / 100.0, (sum(1 for x in u if x < 30) / len(u)) if u else 0.0, spread, wait, reads,
            min(1.0, mean(rx) / 5e9) if rx else 0.0, has_work,
            mean([m for m in mem_frac if m is not None]) if any(m is not None for m in mem_frac) else 0.0,
            not_busy * min(1.0, wait / 0.2), not_busy * min(1.0, reads / 1.0)]


def theil_sen(ys: list[float]) -> float:
    """Robust slope of evenly spaced values: the median of all pairwise slopes (Theil-Sen)."""
    n = len(ys)
    slopes = [(ys[j] - ys[i]) / (j - i) for i in range(n) for j in range(i + 1, n)]
    return median(slopes) if slopes else 0.0


def leak_features(minutes: list[float], total: float, age_min: float) -> list[float] | None:
    """One GPU's memory, one value a minute (the minute's highest), oldest first: is it leaking?

    Slopes are shares of the GPU's memory per hour; ``up_frac`` is the share of minutes that grew (a leak
    grows nearly every minute, an allocator cache in a few steps); ``minutes_to_oom`` is log-scaled.
    """
    if len(minutes) < 6 or not total:
        return None
    last10, last30 = minutes[-11:], minutes[-31:]
    s10 = theil_sen(last10) * 60 / total
    s30 = theil_sen(last30) * 60 / total
    steps10 = [b - a for a, b in zip(last10, last10[1:])]
    steps30 = [b - a for a, b in zip(last30, last30[1:])]
    eps = 0.0015 * total                   # ignore the allocator's breathing
    up10 = sum(1 for d in steps10 if d > eps) / len(steps10)
    up30 = sum(1 for d in steps30 if d > eps) / len(steps30)
    headroom = max(0.0, 1.0 - minutes[-1] / total)
    per_min = max(s10, 1e-6) * total / 60
    to_oom = headroom * total / per_min if s10 > 0 else 1e6
    up5 = sum(1 for d in steps10[-5:] if d > eps) / len(steps10[-5:])
    return [s10, s30, up10, up30, (last10[-1] - last10[0]) / total, headroom,
            math.log10(1 + min(to_oom, 1e6)), math.log10(1 + max(0.0, age_min)), up5]
