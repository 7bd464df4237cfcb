"""Host metrics from /proc, as rates between two ticks: the ``host`` object of the telemetry.

Reads four small files once per tick (no subprocesses, no psutil). A file that
cannot be read or parsed, the first tick, or a counter that went backwards gives
None for the fields it feeds; the rest of the sample survives.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable

SECTOR_BYTES = 512      # /proc/diskstats counts 512-byte sectors whatever the device's sector size
VIRTUAL_DISKS = ("loop", "ram", "zram", "dm-", "md")    # stacked or memory-backed: their reads are counted below


def _load(path: str, parser: Callable, *args):
    """Read one file and parse it; None when it is missing, unreadable or malformed."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parser(f.read(), *args)
    except (OSError, ValueError, IndexError):
        return None


def _cpu_times(text: str) -> tuple[int, ...]:
    """user, nice, system, idle, iowait, irq, softirq, steal of the aggregate ``cpu`` line (guest is inside user)."""
    fields = text.split("\n", 1)[0].split()
    if fields[:1] != ["cpu"] or len(fields) < 9:
        raise ValueError("no aggregate cpu line")
    return tuple(int(x) for x in fields[1:9])


def _is_partition(name: str, names) -> bool:
    """The kernel names partitions ``sda1`` after ``sda`` and ``nvme0n1p1`` after ``nvme0n1``."""
    for disk in names:
        stem = disk + "p" if disk[-1].isdigit() else disk
        if name.startswith(stem) and name[len(stem):].isdigit():
            return True
    return False


def _disk_read_bytes(text: str, sysfs: str) -> dict[str, int]:
    """Bytes read so far per whole physical disk."""
    sectors = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 6 and not f[2].startswith(VIRTUAL_DISKS):
            sectors[f[2]] = int(f[5])
    try:
        disks = set(os.listdir(os.path.join(sysfs, "block")))   # whole disks only, no partitions
        keep = [n for n in sectors if n.replace("/", "!") in disks]     # cciss/c0d0 is block/cciss!c0d0
    except OSError:
        keep = [n for n in sectors if not _is_partition(n, sectors)]
    return {n: sectors[n] * SECTOR_BYTES for n in keep}


def _net_rx_bytes(text: str) -> dict[str, int]:
    rx = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        name = name.strip()
        if sep and name != "lo":
            rx[name] = int(rest.split()[0])
    return rx


def _memory(text: str) -> tuple[int | None, int | None]:
    kb = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            kb[key] = int(rest.split()[0]) * 1024
    total, available = kb.get("MemTotal"), kb.get("MemAvailable")
    if total is None or available is None or available > total:
        return None, total
    return total - available, total


def _cpu_pcts(prev, cur) -> tuple[float | None, float | None]:
    if prev is None or cur is None:
        return None, None
    user, nice, system, idle, iowait, irq, softirq, steal = (c - p for p, c in zip(prev, cur))
    busy = (user, nice, system, irq, softirq, steal)
    # The kernel may move time between idle and iowait across reads; their sum only grows.
    total = sum(busy) + idle + iowait
    if min(busy) < 0 or idle + iowait < 0 or total <= 0:
        return None, None
    iowait_pct = 100.0 * iowait / total if idle >= 0 and iowait >= 0 else None
    return 100.0 * sum(busy) / total, iowait_pct


def _rate(prev: dict | None, cur: dict | None, dt: float) -> float | None:
    """Summed increase per second over the devices seen in both ticks; None on any reset."""
    if prev is None or cur is None or dt <= 0:
        return None
    total = 0
    for name, value in cur.items():
        if name in prev:
            if value < prev[name]:
                return None
            total += value - prev[name]
    return total / dt


class HostSampler:
    """Samples host CPU, IO wait, disk reads, network receive and memory.

    Args:
        proc: root of the proc file system (a fake tree in tests).
        clock: monotonic seconds, used for the time between ticks.
        sysfs: root of sysfs, where ``block/`` lists the whole disks.
    """

    def __init__(self, proc: str = "/proc", clock: Callable[[], float] = time.monotonic, sysfs: str = "/sys"):
        self.proc, self.clock, self.sysfs = proc, clock, sysfs
        self._prev: dict | None = None

    def sample(self) -> dict:
        """One tick: the six ``host`` fields, None where unknown."""
        cur = {
            "t": self.clock(),
            "cpu": _load(f"{self.proc}/stat", _cpu_times),
            "disk": _load(f"{self.proc}/diskstats", _disk_read_bytes, self.sysfs),
            "net": _load(f"{self.proc}/net/dev", _net_rx_bytes),
        }
        used, total = _load(f"{self.proc}/meminfo", _memory) or (None, None)
        prev, self._prev = self._prev or {}, cur
        dt = cur["t"] - prev.get("t", cur["t"])
        cpu_pct, iowait_pct = _cpu_pcts(prev.get("cpu"), cur["cpu"])
        return {
            "cpu_util_pct": cpu_pct,
            "iowait_pct": iowait_pct,
            "disk_read_bytes_per_s": _rate(prev.get("disk"), cur["disk"], dt),
            "net_rx_bytes_per_s": _rate(prev.get("net"), cur["net"], dt),
            "mem_used_bytes": used,
            "mem_total_bytes": total,
        }
