"""A fake NVML with pynvml's calls, constants and exceptions, for tests and ``gpufleet collect --fake-gpus N``.

It behaves like the real library where gpufleet relies on it: errors are
``NVMLError`` subclasses chosen by code (``NVMLError(3)`` is an
``NVMLError_NotSupported``); ``nvmlDeviceGetPcieThroughput`` blocks for its
20 ms sampling window; utilization samples carry microsecond timestamps;
``nvmlEventSetWait_v2`` raises ``NVMLError_Timeout`` when no event waits; a
lost GPU raises ``NVMLError_GpuIsLost`` on every call; MIG instances are
separate handles without utilization. Faults are injected through the
``FakeNVML`` object itself (``lose``, ``xid``, ``unsupported``).
"""
from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace

# -- constants, as pynvml names them ---------------------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_GPU_UTILIZATION_SAMPLES = 1
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
nvmlEventTypeXidCriticalError = 0x8
nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonSwThermalSlowdown = 0x20

_NAMES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized", NVML_ERROR_INVALID_ARGUMENT: "InvalidArgument",
    NVML_ERROR_NOT_SUPPORTED: "NotSupported", NVML_ERROR_NO_PERMISSION: "NoPermission",
    NVML_ERROR_NOT_FOUND: "NotFound", NVML_ERROR_DRIVER_NOT_LOADED: "DriverNotLoaded",
    NVML_ERROR_TIMEOUT: "Timeout", NVML_ERROR_LIBRARY_NOT_FOUND: "LibraryNotFound",
    NVML_ERROR_GPU_IS_LOST: "GpuIsLost", NVML_ERROR_UNKNOWN: "Unknown",
}
_TEXT = {NVML_ERROR_NOT_SUPPORTED: "Not Supported", NVML_ERROR_GPU_IS_LOST: "GPU is lost",
         NVML_ERROR_TIMEOUT: "Timeout", NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
         NVML_ERROR_NOT_FOUND: "Not Found", NVML_ERROR_UNINITIALIZED: "Uninitialized"}


class NVMLError(Exception):
    _valClassMapping: dict[int, type] = {}

    def __new__(cls, value):
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value):
        super().__init__(value)

    def __str__(self):
        return _TEXT.get(self.value, f"NVML Error with code {self.value}")


def _error_class(code: int, name: str) -> type:
    def new(cls, *args):
        return NVMLError.__new__(cls, code)
    cls = type(f"NVMLError_{name}", (NVMLError,), {"__new__": new, "__init__": lambda self, *a: None})
    NVMLError._valClassMapping[code] = cls
    return cls


for _code, _name in _NAMES.items():
    globals()[f"NVMLError_{_name}"] = _error_class(_code, _name)
NVMLError_NotSupported = NVMLError._valClassMapping[NVML_ERROR_NOT_SUPPORTED]
NVMLError_GpuIsLost = NVMLError._valClassMapping[NVML_ERROR_GPU_IS_LOST]
NVMLError_Timeout = NVMLError._valClassMapping[NVML_ERROR_TIMEOUT]
NVMLError_NotFound = NVMLError._valClassMapping[NVML_ERROR_NOT_FOUND]
NVMLError_LibraryNotFound = NVMLError._valClassMapping[NVML_ERROR_LIBRARY_NOT_FOUND]
NVMLError_Uninitialized = NVMLError._valClassMapping[NVML_ERROR_UNINITIALIZED]


class _Handle:
    """A device (or MIG instance) handle with its simulated state."""

    def __init__(self, index: int, uuid: str, name: str, rng: random.Random, parent: _Handle | None = None,
                 profile: str | None = None, mem_total: int = 80 << 30):
        self.index, self.uuid, self.name, self.parent, self.profile = index, uuid, name, parent, profile
        self.rng = rng
        self.mem_total = mem_total
        self.lost = False
        self.util = rng.uniform(20, 95)
        self.processes = [SimpleNamespace(pid=4000 + 17 * index, usedGpuMemory=int(mem_total * 0.3),
                                          gpuInstanceId=0, computeInstanceId=0)]
        self.mig: list[_Handle] = []
        self.gi = 0
        self.trace = None     # optional utilization as a function of time (tests set it)

    def utilization(self, t: float) -> float:
        return self.trace(t) if self.trace is not None else self.util

    def step(self) -> None:
        self.util = min(100.0, max(0.0, self.util + self.rng.gauss(0, 3)))


class FakeNVML:
    """An NVML library of ``gpus`` simulated devices; pass it where pynvml is expected."""

    NVMLError = NVMLError

    def __init__(self, gpus: int = 8, seed: int = 0, model: str = "NVIDIA H100 80GB HBM3",
                 mig: dict[int, list[str]] | None = None, pcie_delay_s: float = 0.02,
                 clock=time.time):
        self._rng = random.Random(seed)
        self._clock = clock
        self._lock = threading.Lock()
        self._init = 0
        self._stepped = clock()
        self.pcie_delay_s = pcie_delay_s
        self.calls = 0
        self.unsupported: set[str] = set()      # function names that raise NotSupported for every device
        self.unsupported_on: dict[int, set[str]] = {}
        self.timing_out_on: dict[int, set[str]] = {}   # function names that time out, by GPU index
        self._events: list[SimpleNamespace] = []
        self._registered: set[int] = set()
        self.devices = []
        for i in range(gpus):
            h = _Handle(i, f"GPU-fake{seed:04x}-{i:04d}-0000-0000-000000000000", model, random.Random(seed * 100 + i))
            for j, profile in enumerate((mig or {}).get(i, [])):
                size = int(profile.split(".")[1].rstrip("gb")) << 30
                m = _Handle(j, f"MIG-fake{seed:04x}-{i:02d}{j:02d}-0000-0000-000000000000",
                            f"{model} MIG {profile}", h.rng, parent=h, profile=profile, mem_total=size)
                m.gi = j + 1
                m.processes[0].usedGpuMemory = size // 3
                h.mig.append(m)
            self.devices.append(h)
        # pynvml's constants and error classes, reachable through the library object too
        for name, value in globals().items():
            if name.startswith(("NVML_", "nvml", "NVMLError")):
                setattr(self, name, value)

    # -- fault injection ---------------------------------------------------------
    def lose(self, index: int) -> None:
        """The GPU falls off the bus: every later call on it raises GpuIsLost (and XID 79 is posted)."""
        self.devices[index].lost = True
        self.xid(index, 79)

    def xid(self, index: int, code: int, gpu_instance: int = 0xFFFFFFFF) -> None:
        with self._lock:
            if index in self._registered:
                self._events.append(SimpleNamespace(device=self.devices[index], eventType=nvmlEventTypeXidCriticalError,
                                                    eventData=code, gpuInstanceId=gpu_instance,
                                                    computeInstanceId=0xFFFFFFFF))

    def _advance(self) -> None:
        """Utilization walks a little every simulated second."""
        now = self._clock()
        steps = min(int(now - self._stepped), 60)
        if steps > 0:
            self._stepped = now
            for _ in range(steps):
                for d in self.devices:
                    d.step()

    # -- plumbing ---------------------------------------------------------------
    def _call(self, fn: str, h: _Handle | None = None):
        self.calls += 1
        if not self._init:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if h is not None:
            phys = h.parent or h
            if phys.lost:
                raise NVMLError(NVML_ERROR_GPU_IS_LOST)
            if fn in self.unsupported or fn in self.unsupported_on.get(phys.index, ()):
                raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
            if fn in self.timing_out_on.get(phys.index, ()):
                raise NVMLError(NVML_ERROR_TIMEOUT)

    def nvmlInit(self):
        self._init += 1

    def nvmlShutdown(self):
        self._init = max(0, self._init - 1)

    def nvmlSystemGetDriverVersion(self):
        self._call("nvmlSystemGetDriverVersion")
        return "999.99-fake"

    def nvmlDeviceGetCount(self):
        self._call("nvmlDeviceGetCount")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._call("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.devices):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self.devices[index]

    def nvmlDeviceGetUUID(self, h):
        self._call("nvmlDeviceGetUUID", h)
        return h.uuid

    def nvmlDeviceGetName(self, h):
        self._call("nvmlDeviceGetName", h)
        return h.name

    def nvmlDeviceGetIndex(self, h):
        self._call("nvmlDeviceGetIndex", h)
        return h.index

    def nvmlDeviceGetMigMode(self, h):
        self._call("nvmlDeviceGetMigMode", h)
        mode = NVML_DEVICE_MIG_ENABLE if h.mig else NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        self._call("nvmlDeviceGetMaxMigDeviceCount", h)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, index):
        self._call("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if index >= len(h.mig):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return h.mig[index]

    def nvmlDeviceGetGpuInstanceId(self, h):
        self._call("nvmlDeviceGetGpuInstanceId", h)
        if h.parent is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return h.gi

    def nvmlDeviceGetUtilizationRates(self, h):
        self._call("nvmlDeviceGetUtilizationRates", h)
        self._advance()
        if h.parent is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        util = h.utilization(self._clock())
        return SimpleNamespace(gpu=int(util), memory=int(util * 0.6))

    def nvmlDeviceGetSamples(self, h, sampling_type, last_seen_us):
        self._call("nvmlDeviceGetSamples", h)
        self._advance()
        if h.parent is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        now_us = int(self._clock() * 1e6)
        start = max(last_seen_us, now_us - 1_000_000 * 10)   # the driver keeps a short buffer
        samples = []
        t = start + 200_000 - (start % 200_000)              # a sample every 200 ms
        while t <= now_us:
            noise = 0.0 if h.trace is not None else h.rng.gauss(0, 4)
            value = SimpleNamespace(uiVal=int(round(max(0, min(100, h.utilization(t / 1e6) + noise)))))
            samples.append(SimpleNamespace(timeStamp=t, sampleValue=value))
            t += 200_000
        if not samples:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return NVML_VALUE_TYPE_UNSIGNED_INT, samples

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        self._call("nvmlDeviceGetMemoryInfo", h)
        used = min(h.mem_total, sum(p.usedGpuMemory or 0 for p in h.processes) + (300 << 20))
        return SimpleNamespace(total=h.mem_total, used=used, free=h.mem_total - used)

    def nvmlDeviceGetPowerUsage(self, h):
        self._call("nvmlDeviceGetPowerUsage", h)
        return int((70 + 6 * (h.parent or h).util) * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        self._call("nvmlDeviceGetEnforcedPowerLimit", h)
        return 700_000

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._call("nvmlDeviceGetTemperature", h)
        return int(35 + 0.4 * (h.parent or h).util)

    def nvmlDeviceGetClockInfo(self, h, clock_type):
        self._call("nvmlDeviceGetClockInfo", h)
        return int(1980 if (h.parent or h).util > 10 else 345)

    def nvmlDeviceGetMaxClockInfo(self, h, clock_type):
        self._call("nvmlDeviceGetMaxClockInfo", h)
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self._call("nvmlDeviceGetCurrentClocksEventReasons", h)
        util = (h.parent or h).util
        return nvmlClocksEventReasonGpuIdle if util < 5 else (nvmlClocksEventReasonSwPowerCap if util > 97 else 0)

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        self._call("nvmlDeviceGetTotalEccErrors", h)
        return 0

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        self._call("nvmlDeviceGetPcieThroughput", h)
        if self.pcie_delay_s:
            time.sleep(self.pcie_delay_s)     # NVML samples the counter for 20 ms
        util = (h.parent or h).util
        return int(util * (40_000 if counter == NVML_PCIE_UTIL_RX_BYTES else 10_000))   # KB/s

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._call("nvmlDeviceGetComputeRunningProcesses", h)
        return list(h.processes) if not h.mig else []

    # -- events -------------------------------------------------------------------
    def nvmlEventSetCreate(self):
        self._call("nvmlEventSetCreate")
        return object()

    def nvmlDeviceRegisterEvents(self, h, event_types, event_set):
        self._call("nvmlDeviceRegisterEvents", h)
        self._registered.add(h.index)

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        self._call("nvmlEventSetWait_v2")
        with self._lock:
            if self._events:
                return self._events.pop(0)
        if timeout_ms:
            time.sleep(min(timeout_ms, 50) / 1000)
        raise NVMLError(NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set):
        self._call("nvmlEventSetFree")


def missing_library():
    """An NVML whose init fails as on a machine without the NVIDIA driver."""
    lib = FakeNVML(gpus=0)

    def fail():
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    lib.nvmlInit = fail
    return lib
