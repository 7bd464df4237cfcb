import os
from pathlib import Path

import pytest

from gpufleet.collectors.host import HostSampler
from gpufleet.contracts.telemetry import Host

RATES = ("cpu_util_pct", "iowait_pct", "disk_read_bytes_per_s", "net_rx_bytes_per_s")
# user nice system idle iowait irq softirq steal guest guest_nice
CPU_1 = (1000, 10, 500, 8000, 200, 5, 15, 0, 300, 0)
# +30 user, +10 system, +50 idle, +10 iowait: 100 jiffies, 40 busy; guest +20 is inside user already
CPU_2 = (1030, 10, 510, 8050, 210, 5, 15, 0, 320, 0)


def write_proc(root: Path, cpu=CPU_1, disks=None, net=None, mem=(1000, 250)) -> None:
    """A fake /proc: ``disks`` maps device to sectors read, ``net`` interface to bytes received."""
    (root / "net").mkdir(parents=True, exist_ok=True)
    lines = ["cpu  " + " ".join(map(str, cpu)), "cpu0 " + " ".join(map(str, cpu)), "intr 12345 0 0", "ctxt 99"]
    (root / "stat").write_text("\n".join(lines) + "\n")
    rows = [f"   8       {i} {name} 10 0 {sectors} 7 0 0 0 0 0 0 0 0 0 0 0 0 0"
            for i, (name, sectors) in enumerate((disks or {}).items())]
    (root / "diskstats").write_text("\n".join(rows) + "\n")
    head = ("Inter-|   Receive                            |  Transmit\n"
            " face |bytes    packets errs drop fifo frame compressed multicast|bytes packets\n")
    rows = [f"{name:>6}: {rx} 10 0 0 0 0 0 0 {rx * 3} 10 0 0 0 0 0 0" for name, rx in (net or {}).items()]
    (root / "net" / "dev").write_text(head + "\n".join(rows) + "\n")
    total, available = mem
    (root / "meminfo").write_text(f"MemTotal:       {total} kB\nMemFree:          100 kB\n"
                                  f"MemAvailable:   {available} kB\nBuffers:            5 kB\n")


def make_sys(root: Path, disks: list[str]) -> Path:
    for d in disks:
        (root / "block" / d).mkdir(parents=True)
    return root


def ticks(*times):
    it = iter(times)
    return lambda: next(it)


@pytest.fixture
def proc(tmp_path):
    return tmp_path / "proc"


def test_first_tick_has_no_rates_second_has_exact_ones(proc, tmp_path):
    sysfs = make_sys(tmp_path / "sys", ["sda", "nvme0n1", "loop0", "dm-0", "md0", "zram0", "ram0"])
    disks = {"sda": 1000, "sda1": 900, "nvme0n1": 100, "nvme0n1p1": 100, "loop0": 0, "dm-0": 0, "md0": 0,
             "zram0": 0, "ram0": 0}
    write_proc(proc, CPU_1, disks, {"lo": 10, "eth0": 1000, "ib0": 0}, mem=(1000, 250))
    sampler = HostSampler(str(proc), clock=ticks(10.0, 12.0), sysfs=str(sysfs))
    first = sampler.sample()
    assert {k: first[k] for k in RATES} == dict.fromkeys(RATES)
    assert first["mem_used_bytes"] == 750 * 1024 and first["mem_total_bytes"] == 1000 * 1024

    # every device reads 2000 more sectors; partitions and stacked devices must not add theirs
    write_proc(proc, CPU_2, {name: sectors + 2000 for name, sectors in disks.items()},
               {"lo": 10**9, "eth0": 5000, "ib0": 2000}, mem=(1000, 400))
    second = sampler.sample()
    assert second == {
        "cpu_util_pct": 40.0,
        "iowait_pct": 10.0,
        "disk_read_bytes_per_s": 2 * 2000 * 512 / 2.0,     # sda and nvme0n1 over 2 s
        "net_rx_bytes_per_s": (4000 + 2000) / 2.0,          # lo left out
        "mem_used_bytes": 600 * 1024,
        "mem_total_bytes": 1000 * 1024,
    }
    Host.model_validate(first)
    Host.model_validate(second)


def test_partitions_recognised_by_name_when_sysfs_is_unreadable(proc, tmp_path):
    disks = {"sda": 0, "sda1": 0, "sda2": 0, "nvme0n1": 0, "nvme0n1p1": 0, "nvme0n10": 0, "mmcblk0": 0,
             "mmcblk0p1": 0, "loop3": 0}
    write_proc(proc, disks=disks)
    sampler = HostSampler(str(proc), clock=ticks(0.0, 1.0), sysfs=str(tmp_path / "no-sys"))
    sampler.sample()
    write_proc(proc, disks={name: 1 for name in disks})
    # whole disks: sda, nvme0n1, nvme0n10 (not a partition of nvme0n1), mmcblk0
    assert sampler.sample()["disk_read_bytes_per_s"] == 4 * 512


def test_counter_reset_gives_none_for_what_it_feeds_and_the_rest_survives(proc, tmp_path):
    sysfs = make_sys(tmp_path / "sys", ["sda"])
    write_proc(proc, CPU_1, {"sda": 5000}, {"eth0": 9000})
    sampler = HostSampler(str(proc), clock=ticks(1.0, 2.0, 3.0), sysfs=str(sysfs))
    sampler.sample()
    reset_cpu = (10, 0, 5, 80, 2, 0, 0, 0, 0, 0)        # counters restarted lower
    write_proc(proc, reset_cpu, {"sda": 6000}, {"eth0": 100})
    s = sampler.sample()
    assert s["cpu_util_pct"] is None and s["iowait_pct"] is None and s["net_rx_bytes_per_s"] is None
    assert s["disk_read_bytes_per_s"] == 1000 * 512
    assert s["mem_total_bytes"] == 1000 * 1024
    # the next tick measures from the reset values again
    write_proc(proc, (20, 0, 5, 170, 2, 0, 0, 0, 0, 0), {"sda": 6000}, {"eth0": 600})
    s = sampler.sample()
    assert s["cpu_util_pct"] == 10.0 and s["iowait_pct"] == 0.0 and s["net_rx_bytes_per_s"] == 500.0


def test_time_moving_from_idle_to_iowait_keeps_cpu_util_but_not_iowait(proc, tmp_path):
    write_proc(proc, CPU_1)
    sampler = HostSampler(str(proc), clock=ticks(1.0, 2.0), sysfs=str(tmp_path))
    sampler.sample()
    user, nice, system, idle, iowait, *rest = CPU_1
    # the kernel moved 20 jiffies of iowait back to idle: iowait went backwards, idle + iowait still grew
    write_proc(proc, (user + 50, nice, system, idle + 70, iowait - 20, *rest))
    s = sampler.sample()
    assert s["cpu_util_pct"] == 50.0
    assert s["iowait_pct"] is None


def test_missing_or_garbled_files_give_none_for_their_fields_only(proc, tmp_path):
    write_proc(proc, disks={"sda": 1}, net={"eth0": 1})
    sampler = HostSampler(str(proc), clock=ticks(1.0, 2.0, 3.0), sysfs=str(make_sys(tmp_path / "sys", ["sda"])))
    sampler.sample()
    os.remove(proc / "diskstats")
    os.remove(proc / "meminfo")
    (proc / "stat").write_text("garbage\n")
    s = sampler.sample()
    assert s == {"cpu_util_pct": None, "iowait_pct": None, "disk_read_bytes_per_s": None,
                 "net_rx_bytes_per_s": 0.0, "mem_used_bytes": None, "mem_total_bytes": None}
    Host.model_validate(s)
    (proc / "net" / "dev").write_text("Inter-|\n face |\n  eth0: lots of bytes\n")
    assert sampler.sample()["net_rx_bytes_per_s"] is None


def test_nothing_readable_never_raises(tmp_path):
    sampler = HostSampler(str(tmp_path / "absent"), sysfs=str(tmp_path / "absent"))
    for _ in range(2):
        assert sampler.sample() == dict.fromkeys(RATES + ("mem_used_bytes", "mem_total_bytes"))


def test_meminfo_without_memavailable_gives_total_only(proc, tmp_path):
    write_proc(proc)
    (proc / "meminfo").write_text("MemTotal:       2048 kB\nMemFree:        1024 kB\n")
    s = HostSampler(str(proc), sysfs=str(tmp_path)).sample()
    assert s["mem_used_bytes"] is None and s["mem_total_bytes"] == 2048 * 1024


def test_devices_that_appear_between_ticks_are_not_counted_yet(proc, tmp_path):
    write_proc(proc, net={"eth0": 100})
    sampler = HostSampler(str(proc), clock=ticks(1.0, 2.0), sysfs=str(tmp_path))
    sampler.sample()
    write_proc(proc, net={"eth0": 300, "veth9": 10**9})
    assert sampler.sample()["net_rx_bytes_per_s"] == 200.0


def test_no_time_between_ticks_gives_no_byte_rates(proc, tmp_path):
    write_proc(proc, net={"eth0": 100})
    sampler = HostSampler(str(proc), clock=ticks(5.0, 5.0), sysfs=str(tmp_path))
    sampler.sample()
    write_proc(proc, CPU_2, net={"eth0": 300})
    s = sampler.sample()
    assert s["net_rx_bytes_per_s"] is None and s["cpu_util_pct"] == 40.0


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs a Linux /proc")
def test_real_proc_gives_schema_valid_values_twice():
    sampler = HostSampler()
    first, second = sampler.sample(), sampler.sample()
    for s in (first, second):
        Host.model_validate(s)
        assert set(s) == set(Host.model_fields)
    assert first["mem_total_bytes"] > 0
    assert all(first[k] is None for k in RATES)
