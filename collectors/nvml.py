"""The NVML boundary: the only module that imports pynvml.

What is read is data: ``FIELDS`` lists each telemetry field with its unit, the
NVML reader and, for a MIG instance, whether the value comes from the instance
itself, from its physical GPU, or is not available. Reading is robust: a field
a GPU cannot report is None for that GPU (and not asked again), an error on one
device does not touch the others, and a GPU that falls off the bus is reported
once and then sampled as all-null while the collector keeps running.

Costly calls stay off the tick: PCIe throughput (NVML blocks 20 ms for each
counter) and the per-process memory list are read by a background thread; a
tick takes the newest values it found. Utilization is averaged over the
interval from NVML's sample buffer where the GPU offers it. XID errors come
from an NVML event set and are handed out with the next sample.
"""
from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("gpufleet.collect")

IDLE_BIT = 0x1   # nvmlClocksEventReasonGpuIdle: masked out, idleness is read from utilization


class NvmlUnavailable(Exception):
    """NVML cannot be used on this machine (no driver, no library)."""


@dataclass(frozen=True)
class Field:
    names: tuple[str, ...]     # telemetry fields it fills
    unit: str
    read: Callable             # (lib, handle) -> value or tuple of values
    mig: str                   # for a MIG instance: "self", "parent" (its physical GPU) or "none"


def _reasons(n, h):
    return int(n.nvmlDeviceGetCurrentClocksEventReasons(h)) & ~IDLE_BIT


def _memory(n, h):
    info = n.nvmlDeviceGetMemoryInfo(h)
    return int(info.used), int(info.total)


FIELDS = (
    Field(("mem_util_pct",), "%", lambda n, h: float(n.nvmlDeviceGetUtilizationRates(h).memory), "none"),
    Field(("mem_used_bytes", "mem_total_bytes"), "bytes", _memory, "self"),
    Field(("power_w",), "W", lambda n, h: n.nvmlDeviceGetPowerUsage(h) / 1000.0, "parent"),
    Field(("power_limit_w",), "W", lambda n, h: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0, "parent"),
    Field(("temp_c",), "°C", lambda n, h: float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)), "parent"),
    Field(("sm_clock_mhz",), "MHz", lambda n, h: float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)), "parent"),
    Field(("sm_clock_max_mhz",), "MHz", lambda n, h: float(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)),
          "parent"),
    Field(("throttle_reasons",), "bitmask", _reasons, "parent"),
    Field(("ecc_dbe_total",), "count", lambda n, h: int(n.nvmlDeviceGetTotalEccErrors(
        h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC)), "parent"),
)

# Read by the background thread (each PCIe counter blocks for 20 ms inside NVML).
SLOW_FIELDS = (
    Field(("pcie_rx_bytes_per_s",), "bytes/s",
          lambda n, h: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES) * 1024.0, "parent"),
    Field(("pcie_tx_bytes_per_s",), "bytes/s",
          lambda n, h: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES) * 1024.0, "parent"),
    Field(("processes",), "list", lambda n, h: [
        {"pid": int(p.pid), "mem_used_bytes": None if p.usedGpuMemory is None else int(p.usedGpuMemory)}
        for p in n.nvmlDeviceGetComputeRunningProcesses(h)], "self"),
)
# utilization is read apart (the mean of NVML's sample buffer over the interval, else this point reading)
UTIL = Field(("util_pct",), "%", lambda n, h: float(n.nvmlDeviceGetUtilizationRates(h).gpu), "none")
ALL_FIELDS = ("util_pct",) + tuple(name for f in FIELDS + SLOW_FIELDS for name in f.names)


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _handle_key(handle) -> int:
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value or id(handle)
    except (ctypes.ArgumentError, TypeError):
        return id(handle)


@dataclass(eq=False)
class Device:
    """One GPU, or one MIG instance of a GPU."""

    handle: object
    uuid: str
    index: int
    model: str | None
    parent: Device | None = None
    mig_profile: str | None = None
    gpu_instance: int | None = None
    lost: bool = False
    last_sample_us: int = 0
    unsupported: set = field(default_factory=set)
    xids: list[int] = field(default_factory=list)


class NvmlReader:
    """Samples every GPU (or MIG instance) of this node through NVML (``lib``: pynvml or a fake)."""

    def __init__(self, lib=None, slow_interval_s: float = 5.0):
        self.lib = lib
        self.slow_interval_s = slow_interval_s
        self.devices: list[Device] = []
        self.physical: list[Device] = []
        self._slow: dict[str, dict] = {}
        self._events = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0

    # -- lifecycle ----------------------------------------------------------------
    def open(self) -> None:
        if self.lib is None:
            try:
                import pynvml
            except ImportError as err:
                raise NvmlUnavailable(f"pynvml is not installed ({err})") from None
            self.lib = pynvml
        n = self.lib
        try:
            n.nvmlInit()
        except n.NVMLError as err:
            raise NvmlUnavailable(f"NVML could not start: {err}") from None
        self.discover()
        try:
            self._events = n.nvmlEventSetCreate()
            for d in self.physical:
                try:
                    n.nvmlDeviceRegisterEvents(d.handle, n.nvmlEventTypeXidCriticalError, self._events)
                except n.NVMLError as err:
                    log.warning("GPU %d: XID events unavailable: %s", d.index, err)
        except n.NVMLError as err:
            log.warning("XID events unavailable: %s", err)
            self._events = None

    def start(self) -> None:
        """Start the background reader of the costly fields."""
        if self._thread is None:
            self._read_slow()
            self._thread = threading.Thread(target=self._slow_loop, name="nvml-slow", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.lib is not None:
            try:
                if self._events is not None:
                    self.lib.nvmlEventSetFree(self._events)
                self.lib.nvmlShutdown()
            except self.lib.NVMLError:
                pass

    def discover(self) -> None:
        """Enumerate the GPUs and, where MIG is on, their instances."""
        n = self.lib
        physical, devices = [], []
        for i in range(n.nvmlDeviceGetCount()):
            try:
                h = n.nvmlDeviceGetHandleByIndex(i)
                d = Device(h, _text(n.nvmlDeviceGetUUID(h)), i, self._try(lambda h=h: _text(n.nvmlDeviceGetName(h))))
            except n.NVMLError as err:
                log.error("GPU %d cannot be opened: %s", i, err)
                continue
            physical.append(d)
            migs = self._mig_instances(d)
            devices.extend(migs or [d])
        self.physical, self.devices = physical, devices
        log.info("NVML: %d GPUs, %d sampled devices", len(physical), len(devices))

    def _mig_instances(self, gpu: Device) -> list[Device]:
        n = self.lib
        try:
            current, _pending = n.nvmlDeviceGetMigMode(gpu.handle)
        except n.NVMLError:
            return []
        if current != n.NVML_DEVICE_MIG_ENABLE:
            return []
        out = []
        for j in range(n.nvmlDeviceGetMaxMigDeviceCount(gpu.handle)):
            try:
                h = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, j)
            except n.NVMLError:
                continue
            name = self._try(lambda h=h: _text(n.nvmlDeviceGetName(h)))
            profile = name.rsplit(" MIG ", 1)[1] if name and " MIG " in name else None
            out.append(Device(h, _text(n.nvmlDeviceGetUUID(h)), gpu.index, gpu.model, parent=gpu, mig_profile=profile,
                              gpu_instance=self._try(lambda h=h: n.nvmlDeviceGetGpuInstanceId(h))))
        return out

    def _try(self, fn):
        try:
            return fn()
        except self.lib.NVMLError:
            return None

    # -- one tick -------------------------------------------------------------------
    def read(self) -> list[dict]:
        """One entry per sampled device, with every NVML field of the telemetry schema."""
        self._drain_events()
        out = []
        for d in self.devices:
            g: dict = {"uuid": d.uuid, "parent_uuid": d.parent.uuid if d.parent else None, "mig_profile": d.mig_profile,
                 "index": d.index, "model": d.model, **dict.fromkeys(ALL_FIELDS), "xid_events": [], "processes": []}
            phys = d.parent or d
            if d.xids or phys.xids:
                g["xid_events"] = d.xids + [x for x in phys.xids if d is not phys]
            if not phys.lost:
                self._read_fields(d, FIELDS, g)
                if not phys.lost and d.parent is None:
                    g["util_pct"] = self._utilization(d)
                slow = self._slow.get(d.uuid)
                if slow:
                    g.update(slow)
            if g["mem_used_bytes"] is not None and g["mem_total_bytes"] is not None:
                g["mem_used_bytes"] = min(g["mem_used_bytes"], g["mem_total_bytes"])
            out.append(g)
        for d in self.devices:
            d.xids = []
        for d in self.physical:
            d.xids = []
        return out

    def _read_fields(self, d: Device, fields, g: dict) -> None:
        n = self.lib
        for f in fields:
            if f.mig == "none" and d.parent is not None:
                continue
            src = d.parent if (f.mig == "parent" and d.parent is not None) else d
            if f.names in src.unsupported:
                continue
            try:
                value = f.read(n, src.handle)
            except n.NVMLError as err:
                self._failed(src, f, err)
                if (src.parent or src).lost:
                    return
                continue
            if len(f.names) == 1:
                g[f.names[0]] = value
            else:
                g.update(zip(f.names, value))

    def _failed(self, d: Device, f: Field, err) -> None:
        n = self.lib
        if isinstance(err, n.NVMLError_NotSupported):
            d.unsupported.add(f.names)
        elif isinstance(err, n.NVMLError_GpuIsLost):
            phys = d.parent or d
            if not phys.lost:
                phys.lost = True
                log.error("GPU %d (%s) is lost (fell off the bus); it is reported without values from now on",
                          phys.index, phys.uuid)
        else:
            self.errors += 1
            log.debug("GPU %d: %s failed: %s", d.index, "/".join(f.names), err)

    def _utilization(self, d: Device) -> float | None:
        """Mean of NVML's utilization samples since the last tick; a point sample where there are none."""
        n = self.lib
        if "samples" not in d.unsupported:
            try:
                _, samples = n.nvmlDeviceGetSamples(d.handle, n.NVML_GPU_UTILIZATION_SAMPLES, d.last_sample_us)
                fresh = [s for s in samples if s.timeStamp > d.last_sample_us]
                if fresh:
                    d.last_sample_us = max(s.timeStamp for s in fresh)
                    return sum(s.sampleValue.uiVal for s in fresh) / len(fresh)
            except n.NVMLError as err:
                if isinstance(err, n.NVMLError_NotSupported):
                    d.unsupported.add("samples")
                elif isinstance(err, n.NVMLError_GpuIsLost):
                    self._failed(d, FIELDS[0], err)
                    return None
        try:
            return UTIL.read(n, d.handle)
        except n.NVMLError as err:
            self._failed(d, UTIL, err)
            return None

    def _drain_events(self) -> None:
        if self._events is None:
            return
        n = self.lib
        by_handle = {_handle_key(d.handle): d for d in self.physical}
        for _ in range(1024):
            try:
                e = n.nvmlEventSetWait_v2(self._events, 0)
            except n.NVMLError:   # Timeout: nothing waiting
                return
            gpu = by_handle.get(_handle_key(e.device))
            if gpu is None:
                continue
            target = next((m for m in self.devices if m.parent is gpu and m.gpu_instance == e.gpuInstanceId), gpu)
            target.xids.append(int(e.eventData))
            log.warning("GPU %d (%s): XID %d", gpu.index, gpu.uuid, e.eventData)

    # -- the costly fields ------------------------------------------------------------
    def _read_slow(self) -> None:
        fresh = {}
        for d in self.devices:
            if (d.parent or d).lost:
                continue
            g: dict = {}
            self._read_fields(d, SLOW_FIELDS, g)
            if "processes" in g and g["processes"] is None:
                del g["processes"]
            fresh[d.uuid] = g
        self._slow = fresh

    def _slow_loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._read_slow()
            except Exception:   # never let the helper thread die silently
                log.exception("reading PCIe throughput and processes failed")
            self._stop.wait(max(0.05, self.slow_interval_s - (time.monotonic() - started)))
