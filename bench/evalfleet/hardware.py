"""The hardware an evaluation fleet is built from: GPU models as NVML reports them, and node shapes.

Figures are public datasheet values or what `nvidia-smi -q` shows on such parts: memory totals in MiB as
NVML reports them (a little under the marketing size), board power limits, the clock the SM parks at with
no work, the top boost clock. `power_full` is what a dense kernel mix would draw at the top clock with no
limit: above `power_limit` on the SXM parts, which is why they train with the power cap engaged.
"""
from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class GpuModel:
    """One GPU part."""

    key: str
    name: str               # nvmlDeviceGetName
    mem_total: int          # bytes, nvmlDeviceGetMemoryInfo.total
    reserved: int           # bytes NVML reports used with no process (driver and firmware reservations)
    power_limit: float      # W, enforced limit (default board limit)
    power_idle: float       # W at parked clocks
    power_full: float       # W a dense kernel mix would draw at the top clock if nothing capped it
    clock_max: int          # MHz, max SM clock
    clock_idle: int         # MHz the SM clock parks at with no work
    speed: float            # dense training throughput relative to an H100 SXM
    slowdown_c: float       # temperature at which software thermal slowdown starts
    r_th: float             # °C per W above inlet, at nominal airflow
    pcie_gbs: float         # usable PCIe bandwidth per direction, GB/s
    memory_bound: float     # share of a typical kernel mix bound by memory, not clocks (0..1)


GPUS: dict[str, GpuModel] = {g.key: g for g in (
    GpuModel("h100", "NVIDIA H100 80GB HBM3", 81559 * MIB, 579 * MIB, 700.0, 71.0, 765.0, 1980, 345, 1.00,
             87.0, 0.060, 50.0, 0.30),
    GpuModel("h200", "NVIDIA H200", 143771 * MIB, 603 * MIB, 700.0, 76.0, 780.0, 1980, 345, 1.12,
             87.0, 0.058, 50.0, 0.35),
    GpuModel("a100", "NVIDIA A100-SXM4-80GB", 81920 * MIB, 485 * MIB, 400.0, 57.0, 430.0, 1410, 210, 0.36,
             88.0, 0.105, 25.0, 0.30),
    GpuModel("a100-40", "NVIDIA A100-SXM4-40GB", 40960 * MIB, 421 * MIB, 400.0, 52.0, 415.0, 1410, 210, 0.34,
             88.0, 0.108, 25.0, 0.30),
    GpuModel("l40s", "NVIDIA L40S", 46068 * MIB, 436 * MIB, 350.0, 34.0, 365.0, 2520, 210, 0.37,
             88.0, 0.135, 25.0, 0.25),
    GpuModel("l4", "NVIDIA L4", 23034 * MIB, 270 * MIB, 72.0, 16.0, 75.0, 2040, 210, 0.12,
             85.0, 0.62, 25.0, 0.25),
    GpuModel("rtx6000ada", "NVIDIA RTX 6000 Ada Generation", 49140 * MIB, 412 * MIB, 300.0, 27.0, 315.0, 2505, 210,
             0.35, 88.0, 0.16, 25.0, 0.25),
)}


@dataclass(frozen=True)
class NodeShape:
    """A server model: its GPUs and its host."""

    key: str
    gpu: GpuModel
    gpus: int
    cores: int              # logical CPUs
    host_mem: int           # bytes, MemTotal
    disk_max: float         # bytes/s the local NVMe array reads at most
    nic_max: float          # bytes/s the front-end (TCP) network receives at most


SHAPES: dict[str, NodeShape] = {s.key: s for s in (
    NodeShape("h100x8", GPUS["h100"], 8, 224, 2063 * GIB, 12e9, 24e9),
    NodeShape("h200x8", GPUS["h200"], 8, 224, 2063 * GIB, 12e9, 24e9),
    NodeShape("a100x8", GPUS["a100"], 8, 256, 2015 * GIB, 8e9, 12e9),
    NodeShape("a100-40x8", GPUS["a100-40"], 8, 256, 1007 * GIB, 6e9, 12e9),
    NodeShape("l40sx8", GPUS["l40s"], 8, 128, 1007 * GIB, 6e9, 12e9),
    NodeShape("l40sx4", GPUS["l40s"], 4, 64, 503 * GIB, 3e9, 6e9),
    NodeShape("l4x8", GPUS["l4"], 8, 96, 755 * GIB, 3e9, 6e9),
    NodeShape("l4x4", GPUS["l4"], 4, 48, 376 * GIB, 2e9, 3e9),
    NodeShape("rtx6000x4", GPUS["rtx6000ada"], 4, 64, 503 * GIB, 3e9, 6e9),
)}

# NVML clocks-event-reasons bits (nvmlClocksEventReason*); the idle bit (0x1) is never reported.
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
