"""The NVML boundary: the only module that imports pynvml.

What is read is data: ``FIELDS`` lists each telemetry field with its unit, the ways NVML can give it (newest
first: a driver older than R535 has no ``nvmlDeviceGetCurrentClocksEventReasons``, one older than R510 no
``_v3`` process lists and no ``nvmlDeviceGetMemoryInfo_v2``) and its scope: ``instance`` (a MIG instance's
own), ``gpu`` (the physical GPU's, read once per GPU and given to each of its instances, as the telemetry
contract says) or ``whole`` (none for a MIG instance). The way that works is found once per device and kept;
a field no way can give (NotSupported, FunctionNotFound, a library older than pynvml) is None for that
device and not asked again. Any other failure of one field's read costs that field, that tick, only.

Costly calls stay off the tick: PCIe throughput (NVML blocks 20 ms for each counter, once per physical GPU)
and the process lists (compute, graphics and MPS) are read by a background thread; a tick takes the newest
values it found. Utilization is averaged over the interval from NVML's sample buffer. XID errors come from an
NVML event set and are handed out with the next sample, at most :data:`MAX_XIDS` of them (``xids_dropped``
counts the rest); processes likewise (:data:`MAX_PROCESSES`, the largest kept).

The GPUs are enumerated again every ``rediscover_s`` and at once when a handle goes stale (a MIG
reconfiguration destroys the instances' handles) or a GPU is lost: a device whose UUID is new is sampled from
then on, one gone is dropped. While a GPU is lost, each of those passes shuts NVML down and opens it again,
so the collector holds no handle across a reset (``nvidia-smi -r``) and a GPU reset and back is sampled again.
"""
from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.contracts.telemetry import MAX_PROCESSES, MAX_XIDS

log = logging.getLogger("gpufleet.collect")

IDLE_BIT = 0x1   # nvmlClocksEventReasonGpuIdle: masked out, idleness is read from utilization
MEMORY_V2 = 0x02000028        # nvmlMemory_v2: the struct version nvmlDeviceGetMemoryInfo_v2 expects


class NvmlUnavailable(Exception):
    """NVML cannot be used on this machine; the message says what to check."""


# What to check for each way NVML can fail to start (dcgm-exporter and the GPU operator see the same ones).
ADVICE = {
    "LibraryNotFound": "libnvidia-ml.so.1 is not in this container or host: on Kubernetes run the pod with "
                       "runtimeClassName: nvidia (or make nvidia the node's default container runtime) so the "
                       "NVIDIA container toolkit mounts the driver's library; on a host, install the NVIDIA driver",
    "DriverNotLoaded": "the NVIDIA kernel driver is not loaded: check `lsmod | grep nvidia` and dmesg, and load it "
                       "(modprobe nvidia) or reinstall the driver",
    "LibRmVersionMismatch": "the NVML library and the kernel driver are different versions (a driver upgraded "
                            "without reloading it): stop the GPU processes and reload the driver, or reboot the node",
    "NoPermission": "no permission to the GPU device files (/dev/nvidia*): run the collector as root, or give its "
                    "container the NVIDIA devices",
    "Unknown": "NVML failed for a reason it does not name: check dmesg for XID errors and `nvidia-smi`",
}


@dataclass(frozen=True)
class Way:
    """One way NVML gives a field: the function named (for ``collect --check``) and its reader."""

    function: str
    read: Callable                 # (pynvml, handle) -> value or tuple of values


@dataclass(frozen=True)
class Field:
    names: tuple[str, ...]         # telemetry fields it fills
    unit: str
    ways: tuple[Way, ...]          # tried in order; the first that works on a device is kept for it
    scope: str                     # for a MIG instance: "instance", "gpu" (its physical GPU's) or "whole" (none)


def _reasons(function: str):
    return Way(function, lambda n, h: int(getattr(n, function)(h)) & ~IDLE_BIT)


def _memory_v2(n, h):
    info = n.nvmlDeviceGetMemoryInfo(h, version=MEMORY_V2)
    return int(info.used), int(info.total)


def _memory_v1(n, h):
    info = n.nvmlDeviceGetMemoryInfo(h)       # `used` counts the memory the driver reserves
    return int(info.used), int(info.total)


FIELDS = (
    Field(("mem_util_pct",), "%", (Way("nvmlDeviceGetUtilizationRates",
                                       lambda n, h: float(n.nvmlDeviceGetUtilizationRates(h).memory)),), "whole"),
    Field(("mem_used_bytes", "mem_total_bytes"), "bytes",
          (Way("nvmlDeviceGetMemoryInfo_v2", _memory_v2), Way("nvmlDeviceGetMemoryInfo", _memory_v1)), "instance"),
    Field(("power_w",), "W", (Way("nvmlDeviceGetPowerUsage", lambda n, h: n.nvmlDeviceGetPowerUsage(h) / 1000.0),),
          "gpu"),
    Field(("power_limit_w",), "W", (Way("nvmlDeviceGetEnforcedPowerLimit",
                                        lambda n, h: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),), "gpu"),
    Field(("temp_c",), "°C", (Way("nvmlDeviceGetTemperature", lambda n, h: float(
        n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))),), "gpu"),
    Field(("sm_clock_mhz",), "MHz", (Way("nvmlDeviceGetClockInfo",
                                         lambda n, h: float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))),), "gpu"),
    Field(("sm_clock_max_mhz",), "MHz", (Way("nvmlDeviceGetMaxClockInfo", lambda n, h: float(
        n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))),), "gpu"),
    Field(("throttle_reasons",), "bitmask", (_reasons("nvmlDeviceGetCurrentClocksEventReasons"),
                                             _reasons("nvmlDeviceGetCurrentClocksThrottleReasons")), "gpu"),
    Field(("ecc_dbe_total",), "count", (Way("nvmlDeviceGetTotalEccErrors", lambda n, h: int(
        n.nvmlDeviceGetTotalEccErrors(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC))),), "gpu"),
)
UTIL = Field(("util_pct",), "%", (Way("nvmlDeviceGetUtilizationRates",
                                      lambda n, h: float(n.nvmlDeviceGetUtilizationRates(h).gpu)),), "whole")
# Read by the background thread (each PCIe counter blocks for 20 ms inside NVML).
def _pcie(counter: str):
    return Way("nvmlDeviceGetPcieThroughput",
               lambda n, h: n.nvmlDeviceGetPcieThroughput(h, getattr(n, counter)) * 1024.0)    # KB/s


PCIE = (Field(("pcie_rx_bytes_per_s",), "bytes/s", (_pcie("NVML_PCIE_UTIL_RX_BYTES"),), "gpu"),
        Field(("pcie_tx_bytes_per_s",), "bytes/s", (_pcie("NVML_PCIE_UTIL_TX_BYTES"),), "gpu"))


class _ProcessV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t: what drivers before R450 fill (pynvml no longer has it)."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


def _processes_v1(function: str):
    """The unversioned process list of an old driver, through pynvml's own loader and error classes."""
    def read(n, h):
        fn = n._nvmlGetFunctionPointer(function)
        count = ctypes.c_uint(0)
        ret = fn(h, ctypes.byref(count), None)
        if ret == n.NVML_SUCCESS:
            return []
        if ret != n.NVML_ERROR_INSUFFICIENT_SIZE:
            raise n.NVMLError(ret)
        count.value = count.value * 2 + 5
        procs = (_ProcessV1 * count.value)()
        n._nvmlCheckReturn(fn(h, ctypes.byref(count), procs))
        return [procs[i] for i in range(count.value)]
    return Way(function, read)


def _process_field(kind: str) -> Field:
    name = {"compute": "Compute", "graphics": "Graphics", "mps": "MPSCompute"}[kind]
    base = f"nvmlDeviceGet{name}RunningProcesses"
    return Field((f"processes_{kind}",), "list", (
        Way(f"{base}_v3", lambda n, h: getattr(n, f"{base}_v3")(h)),
        Way(f"{base}_v2", lambda n, h: getattr(n, f"{base}_v2")(h)),
        _processes_v1(base)), "instance")


PROCESSES = tuple(_process_field(k) for k in ("compute", "graphics", "mps"))
_GPU_FIELDS = tuple(f for f in FIELDS if f.scope == "gpu")
_OWN_FIELDS = tuple(f for f in FIELDS if f.scope != "gpu")
ALL_FIELDS = ("util_pct",) + tuple(name for f in FIELDS + PCIE for name in f.names) + ("processes",)
_NOT_AVAILABLE = (1 << 64) - 1     # NVML_VALUE_NOT_AVAILABLE_ulonglong


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
    unsupported: set = field(default_factory=set)   # fields (their names) no way gives on this device
    way: dict = field(default_factory=dict)         # field names -> the index of the way that works here
    xids: list[int] = field(default_factory=list)
    xids_dropped: int = 0


class NvmlReader:
    """Samples every GPU (or MIG instance) of this node through NVML (``lib``: pynvml, the default)."""

    def __init__(self, lib=None, slow_interval_s: float = 5.0, rediscover_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self.lib = lib
        self.slow_interval_s, self.rediscover_s, self.clock = slow_interval_s, rediscover_s, clock
        self.devices: list[Device] = []
        self.physical: list[Device] = []
        self._slow: dict[str, dict] = {}
        self._events = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()        # NVML is not reopened while the background pass calls it
        self._stale = False                   # a handle went stale: enumerate again at the next tick
        self._discovered = 0.0
        self.errors = 0
        self.rediscoveries = 0
        self._registered: set[str] = set()    # GPUs whose XIDs the event set of this NVML session hears

    # -- lifecycle ----------------------------------------------------------------
    def open(self) -> None:
        if self.lib is None:
            try:
                import pynvml
            except ImportError as err:
                raise NvmlUnavailable(f"pynvml is not installed ({err}): pip install nvidia-ml-py") from None
            self.lib = pynvml
        self._init()
        self.discover()

    def _init(self) -> None:
        n = self.lib
        try:
            n.nvmlInit()
        except n.NVMLError as err:
            kind = type(err).__name__.removeprefix("NVMLError_")
            raise NvmlUnavailable(f"NVML could not start ({err}): {ADVICE.get(kind, ADVICE['Unknown'])}") from None
        self._events = None
        self._registered = set()
        try:
            self._events = n.nvmlEventSetCreate()
        except Exception as err:              # noqa: BLE001 -- XIDs are a bonus; sampling goes on without them
            log.warning("XID events unavailable: %s", err)

    def _register(self, devices: list[Device]) -> None:
        if self._events is None:
            return
        n = self.lib
        for d in devices:
            if d.uuid in self._registered:
                continue
            try:
                n.nvmlDeviceRegisterEvents(d.handle, n.nvmlEventTypeXidCriticalError, self._events)
                self._registered.add(d.uuid)
            except Exception as err:          # noqa: BLE001
                log.warning("GPU %d: XID events unavailable: %s", d.index, err)

    def start(self) -> None:
        """Start the background reader of the costly fields (never raises: a field that fails is None)."""
        if self._thread is None:
            try:
                self._read_slow()
            except Exception:                 # noqa: BLE001 -- the fields stay None until the next pass
                log.exception("reading PCIe throughput and processes failed")
            self._thread = threading.Thread(target=self._slow_loop, name="nvml-slow", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.lib is not None:
            self._shutdown()

    def _shutdown(self) -> None:
        n = self.lib
        try:
            if self._events is not None:
                n.nvmlEventSetFree(self._events)
        except Exception:                     # noqa: BLE001
            pass
        self._events = None
        try:
            n.nvmlShutdown()
        except Exception:                     # noqa: BLE001
            pass

    # -- enumeration -----------------------------------------------------------------
    def discover(self) -> None:
        """Enumerate the GPUs and, where MIG is on, their instances; a device already known by its UUID keeps what
        was learnt of it (the ways that work, what it cannot report)."""
        n = self.lib
        known = {d.uuid: d for d in self.devices + self.physical}
        physical, devices = [], []
        try:
            count = n.nvmlDeviceGetCount()
        except Exception as err:              # noqa: BLE001
            log.error("NVML cannot count the GPUs: %s", err)
            count = 0
        for i in range(count):
            try:
                h = n.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(n.nvmlDeviceGetUUID(h))
            except Exception as err:          # noqa: BLE001 -- one GPU that cannot be opened costs itself
                log.error("GPU %d cannot be opened: %s", i, err)
                continue
            d = known.get(uuid)
            if d is None or d.parent is not None:
                d = Device(h, uuid, i, self._try(lambda h=h: _text(n.nvmlDeviceGetName(h))))
            d.handle, d.index, d.lost = h, i, False
            physical.append(d)
            migs = self._mig_instances(d, known)
            devices.extend(migs or [d])
        new = [d for d in physical if d.uuid not in known]
        gone = sorted(set(known) - {d.uuid for d in devices + physical})
        self.physical, self.devices = physical, devices
        self._register(physical)
        self._discovered, self._stale = self.clock(), False
        if new or gone or not known:
            log.info("NVML: %d GPUs, %d sampled devices%s", len(physical), len(devices),
                     f" (gone: {', '.join(gone)})" if gone and known else "")

    def _mig_instances(self, gpu: Device, known: dict[str, Device]) -> list[Device]:
        n = self.lib
        try:
            current, pending = n.nvmlDeviceGetMigMode(gpu.handle)
        except Exception:                     # noqa: BLE001 -- no MIG on this GPU or driver
            return []
        if pending != current:
            log.warning("GPU %d: a MIG mode change is pending a GPU reset", gpu.index)
        if current != n.NVML_DEVICE_MIG_ENABLE:
            return []
        out = []
        for j in range(self._try(lambda: n.nvmlDeviceGetMaxMigDeviceCount(gpu.handle)) or 0):
            try:
                h = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, j)
                uuid = _text(n.nvmlDeviceGetUUID(h))
            except Exception:                 # noqa: BLE001 -- no instance at this index
                continue
            d = known.get(uuid)
            if d is None:
                name = self._try(lambda h=h: _text(n.nvmlDeviceGetName(h)))
                d = Device(h, uuid, gpu.index, gpu.model, parent=gpu,
                           mig_profile=name.rsplit(" MIG ", 1)[1] if name and " MIG " in name else None,
                           gpu_instance=self._try(lambda h=h: n.nvmlDeviceGetGpuInstanceId(h)))
            d.handle, d.parent, d.index = h, gpu, gpu.index
            out.append(d)
        return out

    def _try(self, fn):
        try:
            return fn()
        except Exception:                     # noqa: BLE001
            return None

    def _refresh(self) -> None:
        """Enumerate again when due; while a GPU is lost, reopen NVML first (no handle held across a reset)."""
        with self._lock:
            lost = [d for d in self.physical if d.lost]
            if lost:
                self._shutdown()
                try:
                    self._init()
                except NvmlUnavailable as err:
                    log.error("%s", err)
                    self._discovered = self.clock()
                    return
            self.rediscoveries += 1
            self.discover()
            for d in lost:
                if not any(p.uuid == d.uuid and not p.lost for p in self.physical):
                    self.physical.append(d)          # still lost: reported without values, in its place
                    self.devices += [d] if not any(m.parent is d for m in self.devices) else []
                else:
                    log.warning("GPU %d (%s) is back after a reset", d.index, d.uuid)
            self.physical.sort(key=lambda d: d.index)
            self.devices.sort(key=lambda d: (d.index, -1 if d.parent is None else d.gpu_instance or 0))

    # -- one tick -------------------------------------------------------------------
    def read(self) -> list[dict]:
        """One entry per sampled device, with every NVML field of the telemetry schema."""
        if self._stale or self.clock() - self._discovered >= self.rediscover_s:
            self._refresh()
        self._drain_events()
        out: list[dict] = []
        per_gpu: dict[str, dict] = {}
        for d in self.devices:
            g: dict = {"uuid": d.uuid, "parent_uuid": d.parent.uuid if d.parent else None,
                       "mig_profile": d.mig_profile, "index": d.index, "model": d.model, **dict.fromkeys(ALL_FIELDS),
                       "xid_events": [], "processes": []}
            phys = d.parent or d
            xids = d.xids + (phys.xids if d is not phys else [])
            dropped = d.xids_dropped + (phys.xids_dropped if d is not phys else 0)
            if len(xids) > MAX_XIDS:
                xids, dropped = xids[:MAX_XIDS], dropped + len(xids) - MAX_XIDS
            g["xid_events"] = xids
            if dropped:
                g["xids_dropped"] = dropped
            if not phys.lost:
                shared = per_gpu.get(phys.uuid)
                if shared is None:                     # the physical GPU's fields, once per GPU per tick
                    shared = per_gpu[phys.uuid] = self._read_fields(phys, _GPU_FIELDS)
                g.update(shared)
                g.update(self._read_fields(d, _OWN_FIELDS))
                if d.parent is None and not phys.lost:
                    g["util_pct"] = self._utilization(d)
                slow = self._slow.get(d.uuid)
                if slow:
                    g.update(slow)
            if g["mem_used_bytes"] is not None and g["mem_total_bytes"] is not None:
                g["mem_used_bytes"] = min(g["mem_used_bytes"], g["mem_total_bytes"])
            out.append(g)
        for d in self.devices + self.physical:
            d.xids, d.xids_dropped = [], 0
        return out

    def _read_fields(self, d: Device, fields) -> dict:
        g: dict = {}
        for f in fields:
            if f.scope == "whole" and d.parent is not None:
                continue
            value = self._value(d, f)
            if value is None:
                continue
            if len(f.names) == 1:
                g[f.names[0]] = value
            else:
                g.update(zip(f.names, value))
        return g

    def _value(self, d: Device, f: Field):
        """``f`` on ``d`` by the way known to work there (found once, newest first), or None."""
        if f.names in d.unsupported or (d.parent or d).lost:
            return None
        n = self.lib
        i = d.way.get(f.names, 0)
        while i < len(f.ways):
            try:
                value = f.ways[i].read(n, d.handle)
            except Exception as err:          # noqa: BLE001 -- one field's failure costs that field only
                verdict = self._verdict(d, f, err)
                if verdict == "absent" and f.names not in d.way:
                    i += 1                    # this driver has no such function (or not on this GPU): the next way
                    continue
                if verdict == "absent":
                    d.unsupported.add(f.names)
                return None
            d.way[f.names] = i
            return value
        d.unsupported.add(f.names)
        log.info("GPU %d%s: %s not available (tried %s)", d.index, f" MIG {d.mig_profile}" if d.parent else "",
                 "/".join(f.names), ", ".join(w.function for w in f.ways))
        return None

    def _verdict(self, d: Device, f: Field, err: BaseException) -> str:
        """What a failed read means: ``absent`` (this way will never work here), ``lost``, ``stale`` or
        ``transient`` (counted, asked again next tick)."""
        name = type(err).__name__
        if name in ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLLibraryMismatchError"):
            return "absent"
        if name == "NVMLError_NoPermission":
            log.warning("GPU %d: no permission to read %s; it is left out", d.index, "/".join(f.names))
            return "absent"
        if name == "NVMLError_GpuIsLost":
            phys = d.parent or d
            if not phys.lost:
                phys.lost = True
                self._stale = True
                log.error("GPU %d (%s) is lost (fell off the bus); it is reported without values, and NVML is "
                          "reopened every %g s until it is back", phys.index, phys.uuid, self.rediscover_s)
            return "lost"
        if name in ("NVMLError_InvalidArgument", "NVMLError_NotFound", "NVMLError_Uninitialized"):
            self._stale = True            # e.g. a MIG instance destroyed: its handle means nothing now
            return "stale"
        self.errors += 1
        log.debug("GPU %d: %s failed: %s", d.index, "/".join(f.names), err)
        return "transient"

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
            except Exception as err:          # noqa: BLE001
                verdict = self._verdict(d, UTIL, err) if type(err).__name__ != "NVMLError_NotFound" else "none"
                if verdict == "absent":
                    d.unsupported.add("samples")
                elif verdict == "lost":
                    return None
        return self._value(d, UTIL)

    def _drain_events(self) -> None:
        if self._events is None:
            return
        n = self.lib
        by_handle = {_handle_key(d.handle): d for d in self.physical}
        for _ in range(4 * MAX_XIDS * max(1, len(self.physical))):
            try:
                e = n.nvmlEventSetWait_v2(self._events, 0)
            except Exception:                 # noqa: BLE001 -- Timeout: nothing waiting
                return
            gpu = by_handle.get(_handle_key(e.device))
            if gpu is None:
                continue
            target = next((m for m in self.devices if m.parent is gpu and m.gpu_instance == e.gpuInstanceId), gpu)
            if len(target.xids) < MAX_XIDS:
                target.xids.append(int(e.eventData))
                log.warning("GPU %d (%s): XID %d", gpu.index, gpu.uuid, e.eventData)
            else:
                target.xids_dropped += 1

    # -- the costly fields ------------------------------------------------------------
    def _read_slow(self) -> None:
        fresh, per_gpu = {}, {}
        for d in list(self.devices):
            phys = d.parent or d
            with self._lock:
                if phys.lost:
                    continue
                if phys.uuid not in per_gpu:        # PCIe: the physical GPU's, read once for all its instances
                    per_gpu[phys.uuid] = self._read_fields(phys, PCIE)
                g = dict(per_gpu[phys.uuid])
                procs = self._processes(d)
            if procs is not None:
                g["processes"], dropped = procs
                if dropped:
                    g["processes_dropped"] = dropped
            fresh[d.uuid] = g
        self._slow = fresh

    def _processes(self, d: Device) -> tuple[list[dict], int] | None:
        """Compute, graphics and MPS processes, one entry per pid (its largest memory), the largest kept up to
        :data:`MAX_PROCESSES`; None if no list can be read on this device."""
        found: dict[int, int | None] = {}
        readable = False
        for f in PROCESSES:
            got = self._value(d, f)
            if got is None:
                continue
            readable = True
            for p in got:
                used = None if p.usedGpuMemory in (None, _NOT_AVAILABLE) else int(p.usedGpuMemory)
                pid = int(p.pid)
                if pid not in found or (used or 0) > (found[pid] or 0):
                    found[pid] = used
        if not readable:
            return None
        procs = sorted(({"pid": pid, "mem_used_bytes": used} for pid, used in found.items()),
                       key=lambda p: (-(p["mem_used_bytes"] or 0), p["pid"]))
        return procs[:MAX_PROCESSES], max(0, len(procs) - MAX_PROCESSES)

    def _slow_loop(self) -> None:
        """After the pass ``start`` made: a pass every ``slow_interval_s``."""
        started = time.monotonic()
        while not self._stop.wait(max(0.05, self.slow_interval_s - (time.monotonic() - started))):
            started = time.monotonic()
            try:
                self._read_slow()
            except Exception:   # never let the helper thread die silently
                log.exception("reading PCIe throughput and processes failed")

    # -- what this node can read (collect --check) ---------------------------------------
    def capabilities(self) -> list[tuple[Device, dict[str, str]]]:
        """Per sampled device, each field and how it is read: the NVML function, or why it is not."""
        self.read()
        self._read_slow()
        out = []
        for d in self.devices:
            phys = d.parent or d
            ways: dict[str, str] = {}
            for f in (UTIL, *FIELDS, *PCIE, *PROCESSES):
                src = phys if f.scope == "gpu" else d
                label = "/".join(f.names)
                if f is UTIL and d.parent is None and d.last_sample_us and "samples" not in d.unsupported:
                    ways[label] = "nvmlDeviceGetSamples (the mean over the interval)"
                elif f.scope == "whole" and d.parent is not None:
                    ways[label] = "none for a MIG instance (NVML has none)"
                elif src.lost:
                    ways[label] = "GPU lost"
                elif f.names in src.unsupported:
                    ways[label] = "not supported"
                elif f.names in src.way:
                    i = src.way[f.names]
                    ways[label] = f.ways[i].function + (" (older driver)" if i else "")
                else:
                    ways[label] = "not read (failed this time)"
            out.append((d, ways))
        return out

    def versions(self) -> dict[str, str | None]:
        n = self.lib
        cuda = self._try(n.nvmlSystemGetCudaDriverVersion)
        return {"driver": self._try(lambda: _text(n.nvmlSystemGetDriverVersion())),
                "nvml": self._try(lambda: _text(n.nvmlSystemGetNVMLVersion())),
                "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None}
