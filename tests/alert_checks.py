"""What an alert's words say against its own evidence: a summary must never contradict the numbers beside it."""
import re

GIB = 2 ** 30
REASONS = 0x8 | 0x20 | 0x40 | 0x80       # NVML's throttle reasons that slow a GPU (not its power cap, not benign)
# straggler causes that name no throttle reason (any other names the reason the GPU reported)
UNTHROTTLED = ("power cap", "lower SM clock without a throttle reason", "slower without throttling (its host, link or "
               "input)")


def _near(said: float, value: float, digits: int) -> bool:
    return abs(said - value) <= 0.6 * 10 ** -digits + 1e-9


def _number(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def contradictions(alert: dict) -> list[str]:
    """Every place the firing ``alert``'s summary disagrees with its evidence (empty: none)."""
    if alert.get("status") != "firing":
        return []
    s, ev, kind, out = alert["summary"], alert["evidence"], alert["kind"], []
    if kind in ("straggler", "io_starvation") and f"({ev['cause']})" not in s:
        out.append(f"cause {ev['cause']!r} not the one the summary names")
    if kind == "straggler":
        behind = _number(r"runs (\d+)% behind", s)
        if behind is None or not _near(behind, 100 * ev["slowdown"], 0):
            out.append(f"behind {behind}% vs slowdown {ev['slowdown']}")
        clock = re.search(r"SM clock at (\d+)% of its maximum vs (\d+)%", s)
        if clock and not (_near(float(clock.group(1)), 100 * ev["sm_clock_share"], 0)
                          and _near(float(clock.group(2)), 100 * ev["peers_sm_clock_share"], 0)):
            out.append("SM clock shares differ")
        if ev["cause"] == "power cap" and not ev["capped_share"] > 0.2:
            out.append(f"power cap named with capped_share {ev['capped_share']}")
        reasons = ev["throttle_reasons"] & REASONS
        if ev["cause"] not in UNTHROTTLED and not reasons:
            out.append(f"throttle reason named with none reported ({ev['throttle_reasons']})")
        if "without a throttle reason" in ev["cause"] and reasons:
            out.append(f"'without a throttle reason' while it reported {ev['throttle_reasons']}")
    elif kind == "io_starvation":
        gpus = _number(r": (\d+) GPUs? at", s)
        util = _number(r"GPUs? at (\d+)% utilization", s)
        if gpus != ev["gpus"] or util is None or not _near(util, ev["util_pct"], 0):
            out.append(f"{gpus} GPUs at {util}% vs {ev['gpus']} at {ev['util_pct']}%")
        net = _number(r"([\d.]+) GiB/s of network receive", s)
        if net is not None and not _near(net, ev["net_rx_gb_per_s"] * 1e9 / GIB, 2):
            out.append(f"network {net} GiB/s vs {ev['net_rx_gb_per_s']} GB/s")
        reads = _number(r"([\d.]+) GiB/s of disk reads", s)
        if reads is not None and not _near(reads, ev["disk_read_gb_per_s"] * 1e9 / GIB, 2):
            out.append(f"disk reads {reads} GiB/s vs {ev['disk_read_gb_per_s']} GB/s")
    elif kind == "memory_leak":
        rate = _number(r"leaks memory: ([\d.]+) GiB/h", s)
        if rate is None or not _near(rate, ev["rate_bytes_per_h"] / GIB, 2):
            out.append(f"rate {rate} GiB/h vs {ev['rate_bytes_per_h']} bytes/h")
        used = _number(r"([\d.]+) of [\d.]+ GiB used", s)
        if used is not None and not _near(used, ev["used_gb"] * 1e9 / GIB, 1):
            out.append(f"used {used} GiB vs {ev['used_gb']} GB")
        oom = _number(r"out of memory in about (\d+) min", s)
        if oom is not None and ev.get("minutes_to_oom") is not None and not _near(oom, ev["minutes_to_oom"], 0):
            out.append(f"OOM in {oom} min vs {ev['minutes_to_oom']}")
    return out
