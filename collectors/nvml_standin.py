"""A stand-in for ``libnvidia-ml.so.1``, called by the real pynvml through ctypes: for tests and
``gpufleet collect --fake-gpus N``.

pynvml finds every NVML function by name in the library it loaded (``getattr(nvmlLib, name)``) and calls it
with ctypes arguments: handles, ``byref`` pointers, string buffers, struct arrays. :meth:`StandIn.install`
puts this object where that library goes; each name it answers is a C function pointer (``CFUNCTYPE``) to
Python code that writes its results through the pointers it is given, in NVML's own struct layouts (defined
here from the C header, not taken from pynvml, so a layout pynvml gets wrong shows). So the collector's tests
run the real pynvml: its versioned calls, its error classes by return code, its two-call size protocol for
process lists, its ``@throwOnVersionMismatch``.

A :class:`Profile` is a driver branch: the functions its library exports (an older driver lacks
``nvmlDeviceGetCurrentClocksEventReasons`` before R535, the ``_v3`` process lists and ``nvmlDeviceGetMemoryInfo_v2``
before R510; pynvml then raises ``NVMLError_FunctionNotFound`` or ``NVMLLibraryMismatchError``). The GPUs are
simulated (utilization walks; power, temperature and clocks follow it) and faults are set on the object:
``lose``/``reset`` a GPU, ``xid`` (one or a storm), ``reconfigure`` MIG, ``unsupported`` and ``failing``
functions, processes of any kind, memory NVML cannot attribute.
"""
from __future__ import annotations

import ctypes
import random
import threading
import time
from collections.abc import Callable
from ctypes import (
    CFUNCTYPE,
    Structure,
    Union,
    c_double,
    c_int,
    c_longlong,
    c_uint,
    c_ulong,
    c_ulonglong,
    c_ushort,
    c_void_p,
)
from dataclasses import dataclass, field

# -- return codes and constants, as nvml.h numbers them --------------------------------------------------------
SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION = 0, 1, 2, 3, 4
NOT_FOUND, INSUFFICIENT_SIZE, DRIVER_NOT_LOADED, TIMEOUT, LIBRARY_NOT_FOUND = 6, 7, 9, 10, 12
GPU_IS_LOST, LIB_RM_VERSION_MISMATCH, UNKNOWN = 15, 18, 999
ERROR_TEXT = {SUCCESS: "Success", UNINITIALIZED: "Uninitialized", INVALID_ARGUMENT: "Invalid Argument",
              NOT_SUPPORTED: "Not Supported", NO_PERMISSION: "Insufficient Permissions", NOT_FOUND: "Not Found",
              INSUFFICIENT_SIZE: "Insufficient Size", DRIVER_NOT_LOADED: "Driver Not Loaded", TIMEOUT: "Timeout",
              LIBRARY_NOT_FOUND: "NVML Shared Library Not Found", GPU_IS_LOST: "GPU is lost",
              LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.", 13: "Function Not Found",
              25: "Argument version mismatch", UNKNOWN: "Unknown Error"}
NOT_AVAILABLE = (1 << 64) - 1               # NVML_VALUE_NOT_AVAILABLE_ulonglong: memory NVML cannot attribute
IDLE, APP_CLOCKS, SW_POWER_CAP, SYNC_BOOST, SW_THERMAL, DISPLAY = 0x1, 0x2, 0x4, 0x10, 0x20, 0x100
XID_CRITICAL = 0x8
RESERVED = 512 << 20                        # what the driver keeps of each GPU's memory (v2 reports it apart)


# -- the structs, from nvml.h --------------------------------------------------------------------------------
class Utilization(Structure):
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class Memory(Structure):
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class MemoryV2(Structure):
    _fields_ = [("version", c_uint), ("total", c_ulonglong), ("reserved", c_ulonglong), ("free", c_ulonglong),
                ("used", c_ulonglong)]


class Value(Union):
    _fields_ = [("dVal", c_double), ("uiVal", c_uint), ("ulVal", c_ulong), ("ullVal", c_ulonglong),
                ("sllVal", c_longlong), ("siVal", c_int), ("usVal", c_ushort)]


class Sample(Structure):
    _fields_ = [("timeStamp", c_ulonglong), ("sampleValue", Value)]


class ProcessV1(Structure):
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong)]


class ProcessV2(Structure):                  # nvmlProcessInfo_v2_t, also the layout of _v3
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong), ("gpuInstanceId", c_uint),
                ("computeInstanceId", c_uint)]


class EventData(Structure):
    _fields_ = [("device", c_void_p), ("eventType", c_ulonglong), ("eventData", c_ulonglong),
                ("gpuInstanceId", c_uint), ("computeInstanceId", c_uint)]


# -- driver branches ------------------------------------------------------------------------------------------
_V3 = frozenset(f"nvmlDevice{k}RunningProcesses_v3" for k in ("GetCompute", "GetGraphics", "GetMPSCompute"))
_V2 = frozenset(f"nvmlDevice{k}RunningProcesses_v2" for k in ("GetCompute", "GetGraphics", "GetMPSCompute"))


@dataclass(frozen=True)
class Profile:
    """A driver branch: its versions and the functions its library does not export."""

    driver: str
    nvml: str
    cuda: int
    missing: frozenset = frozenset()


PROFILES = {
    "R440": Profile("440.118.02", "10.440.118.02", 10020,
                    _V3 | _V2 | {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetMemoryInfo_v2"}),
    "R470": Profile("470.256.02", "11.470.256.02", 11040,
                    _V3 | {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetMemoryInfo_v2"}),
    "R525": Profile("525.147.05", "12.525.147.05", 12000, frozenset({"nvmlDeviceGetCurrentClocksEventReasons"})),
    "R535": Profile("535.216.03", "12.535.216.03", 12020),
    "R550": Profile("550.127.08", "12.550.127.08", 12040),
    "R570": Profile("570.133.20", "12.570.133.20", 12080),
}


@dataclass
class Process:
    pid: int
    used: int | None                        # None: NVML cannot attribute it (reported as NOT_AVAILABLE)
    kind: str = "compute"                   # compute, graphics or mps


@dataclass(eq=False)
class Gpu:
    """A simulated GPU, or a MIG instance of one."""

    index: int
    uuid: str
    name: str
    rng: random.Random
    mem_total: int
    parent: Gpu | None = None
    profile: str | None = None
    gi: int = 0                              # GPU instance id of a MIG instance
    util: float = 50.0
    power_limit_w: float = 700.0
    lost: bool = False
    mig: list[Gpu] = field(default_factory=list)
    mig_pending: bool | None = None          # a MIG mode change waiting for a reset
    processes: list[Process] = field(default_factory=list)
    trace: Callable[[float], float] | None = None     # utilization as a function of time (tests)
    extra_reasons: int = 0                   # clocks-event bits set whatever the load (benign ones, say)
    reset_gen: int = -1                      # handles made in NVML's init generation up to this one are stale
    mig_made: int = 0                        # MIG instances ever made on this GPU (their UUIDs are new)

    @property
    def phys(self) -> Gpu:
        return self.parent or self

    def utilization(self, t: float) -> float:
        return self.trace(t) if self.trace is not None else self.util


_HANDLE_BASE = 0x5A000000


@dataclass(frozen=True)
class Timing:
    """The stand-in's clock, and how long a PCIe throughput read blocks (NVML samples it for 20 ms)."""

    pcie_delay_s: float = 0.02
    clock: Callable[[], float] = time.time


class StandIn:
    """An NVML library of ``gpus`` simulated GPUs on driver ``profile`` (a name in :data:`PROFILES`).

    ``mig`` maps a GPU index to its instances' profiles (``["3g.40gb", "4g.40gb"]``). Install it with
    :meth:`install` (or ``with standin.installed():``) before pynvml is initialised."""

    def __init__(self, gpus: int = 8, profile: str = "R550", seed: int = 0, model: str = "NVIDIA H100 80GB HBM3",
                 mig: dict[int, list[str]] | None = None, timing: Timing | None = None, init_error: int | None = None):
        timing = timing or Timing()
        pcie_delay_s, clock = timing.pcie_delay_s, timing.clock
        self.profile = PROFILES[profile]
        self.seed, self.model, self.clock, self.pcie_delay_s = seed, model, clock, pcie_delay_s
        self.init_error = init_error                 # nvmlInit fails with this code (no driver, mismatch, ...)
        self.lock = threading.RLock()
        self.calls: dict[str, int] = {}
        self.unsupported: set[str] = set()           # functions answering NOT_SUPPORTED on every GPU
        self.unsupported_on: dict[int, set[str]] = {}
        self.failing: dict[tuple[int, str], int] = {}   # (GPU index, function) -> the code it returns
        self.initialised = 0
        self.generation = 0                          # bumped at each init: handles from before a reset go stale
        self._handles: dict[int, tuple[int, Gpu]] = {}
        self._by_gpu: dict[int, int] = {}
        self._events: list[tuple[Gpu, int, int]] = []
        self._registered: set[int] = set()
        self._strings: dict[int, ctypes.Array] = {}
        self._stepped = clock()
        self.gpus: list[Gpu] = []
        for i in range(gpus):
            g = Gpu(i, f"GPU-{seed:08x}-{i:04x}-4000-8000-{i:012x}", model, random.Random(seed * 100 + i), 80 << 30)
            g.util = g.rng.uniform(20, 95)
            g.processes = [Process(4000 + 17 * i, int(g.mem_total * 0.3))]
            self.gpus.append(g)
            self.reconfigure(i, (mig or {}).get(i, []))
        self._functions = {name[3:]: getattr(self, name) for name in dir(self) if name.startswith("_c_nvml")}
        self._pointers: dict[str, object] = {}
        self._installed: list = []

    # -- faults ------------------------------------------------------------------------------------------------
    def lose(self, index: int) -> None:
        """The GPU falls off the bus: every call on it answers GPU_IS_LOST (and XID 79 is posted)."""
        self.gpus[index].lost = True
        self.xid(index, 79)

    def reset(self, index: int) -> None:
        """The GPU is reset (``nvidia-smi -r``) and back; handles taken before NVML's next init stay lost."""
        self.gpus[index].lost = False
        self.gpus[index].reset_gen = self.generation

    def xid(self, index: int, code: int, count: int = 1, gpu_instance: int = 0xFFFFFFFF) -> None:
        with self.lock:
            if index in self._registered:
                self._events += [(self.gpus[index], code, gpu_instance)] * count

    def reconfigure(self, index: int, profiles: list[str]) -> None:
        """MIG on ``index`` with these instances (none: MIG off); the old instances' handles go invalid."""
        g = self.gpus[index]
        with self.lock:
            for m in g.mig:
                m.lost = True                              # an instance destroyed: its handle answers an error
            g.mig = []
            for j, profile in enumerate(profiles):
                size = int(profile.split(".")[1].rstrip("gb")) << 30
                n = g.mig_made + j
                m = Gpu(j, f"MIG-{self.seed:08x}-{index:04x}-{n:04x}-8000-{j:012x}", f"{g.name} MIG {profile}",
                        g.rng, size, parent=g, profile=profile, gi=j + 1)
                m.processes = [Process(5000 + 100 * index + n, size // 3)]
                g.mig.append(m)
            g.mig_made += len(profiles)

    # -- installing into pynvml ---------------------------------------------------------------------------------
    def install(self) -> None:
        """Be the library pynvml calls (what ``CDLL("libnvidia-ml.so.1")`` would have loaded)."""
        import pynvml
        self._installed.append((pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache)))
        pynvml.nvmlLib = self
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml.NVMLError._errcode_to_string.clear()

    def uninstall(self) -> None:
        import pynvml
        lib, cache = self._installed.pop() if self._installed else (None, {})
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlGetFunctionPointer_cache.update(cache)
        pynvml.NVMLError._errcode_to_string.clear()
        pynvml._nvmlLib_refcount = 0

    def installed(self):
        standin = self

        class Installed:
            def __enter__(self):
                standin.install()
                return standin

            def __exit__(self, *exc):
                standin.uninstall()
        return Installed()

    def __getattr__(self, name: str):
        """A symbol of the library: a C function pointer, or AttributeError where this driver has none."""
        if name.startswith("_") or name in self.profile.missing or name not in self.__dict__.get("_functions", {}):
            raise AttributeError(name)
        pointer = self._pointers.get(name)
        if pointer is None:
            impl, restype, argtypes = self._functions[name]()
            pointer = self._pointers[name] = CFUNCTYPE(restype, *argtypes)(self._counted(name, impl))
        return pointer

    def _counted(self, name: str, impl):
        def call(*args):
            with self.lock:
                self.calls[name] = self.calls.get(name, 0) + 1
                try:
                    return impl(*args)
                except Exception:                       # a bug here must not take the test process down
                    import logging
                    logging.getLogger("gpufleet.standin").exception("stand-in %s failed", name)
                    return UNKNOWN
        return call

    # -- plumbing ------------------------------------------------------------------------------------------------
    def _handle(self, g: Gpu) -> int:
        key = id(g)
        value = self._by_gpu.get(key)
        if value is None or self._handles[value][0] != self.generation:
            value = _HANDLE_BASE + 16 * (len(self._handles) + 1)
            self._handles[value] = (self.generation, g)
            self._by_gpu[key] = value
        return value

    def _device(self, handle: int | None, fn: str) -> tuple[int, Gpu | None]:
        """The GPU behind a handle, or the code to return."""
        if not self.initialised:
            return UNINITIALIZED, None
        entry = self._handles.get(handle or 0)
        if entry is None:
            return INVALID_ARGUMENT, None
        made, g = entry
        phys = g.phys
        if g.lost and g.parent is not None and not phys.lost:
            return INVALID_ARGUMENT, None                # a MIG instance destroyed by a reconfiguration
        if phys.lost or made <= phys.reset_gen:
            return GPU_IS_LOST, None
        if fn in self.unsupported or fn in self.unsupported_on.get(phys.index, ()):
            return NOT_SUPPORTED, None
        code = self.failing.get((phys.index, fn))
        if code is not None:
            return code, None
        self._advance()
        return SUCCESS, g

    def _advance(self) -> None:
        now = self.clock()
        steps = min(int(now - self._stepped), 60)
        if steps > 0:
            self._stepped = now
            for _ in range(steps):
                for g in self.gpus:
                    g.util = min(100.0, max(0.0, g.util + g.rng.gauss(0, 3)))

    @staticmethod
    def _put(pointer: int, ctype, value) -> None:
        ctype.from_address(pointer).value = value

    @staticmethod
    def _text(buffer: int, size: int, text: str) -> int:
        data = text.encode()
        if len(data) + 1 > size:
            return INSUFFICIENT_SIZE
        ctypes.memmove(buffer, data + b"\0", len(data) + 1)
        return SUCCESS

    def _read(self, h, fn: str, write: Callable[[Gpu], int | None]) -> int:
        code, g = self._device(h, fn)
        if g is None:
            return code
        return write(g) or SUCCESS

    # -- the functions: each returns (implementation, restype, argtypes) ---------------------------------------
    def _c_nvmlInitWithFlags(self):
        def f(flags):
            if self.init_error is not None:
                return self.init_error
            if not self.initialised:
                self.generation += 1
            self.initialised += 1
            return SUCCESS
        return f, c_int, (c_uint,)

    def _c_nvmlInit_v2(self):
        impl = self._c_nvmlInitWithFlags()[0]
        return (lambda: impl(0)), c_int, ()

    def _c_nvmlShutdown(self):
        def f():
            if not self.initialised:
                return UNINITIALIZED
            self.initialised -= 1
            return SUCCESS
        return f, c_int, ()

    def _c_nvmlErrorString(self):
        def f(code):
            buf = self._strings.get(code)
            if buf is None:
                buf = self._strings[code] = ctypes.create_string_buffer(
                    ERROR_TEXT.get(code, f"Unknown Error {code}").encode())
            return ctypes.addressof(buf)
        return f, c_void_p, (c_int,)

    def _c_nvmlSystemGetDriverVersion(self):
        return (lambda buf, size: self._text(buf, size, self.profile.driver)), c_int, (c_void_p, c_uint)

    def _c_nvmlSystemGetNVMLVersion(self):
        return (lambda buf, size: self._text(buf, size, self.profile.nvml)), c_int, (c_void_p, c_uint)

    def _c_nvmlSystemGetCudaDriverVersion(self):
        def f(out):
            self._put(out, c_int, self.profile.cuda)
            return SUCCESS
        return f, c_int, (c_void_p,)

    def _c_nvmlDeviceGetCount_v2(self):
        def f(out):
            if not self.initialised:
                return UNINITIALIZED
            self._put(out, c_uint, len(self.gpus))
            return SUCCESS
        return f, c_int, (c_void_p,)

    def _c_nvmlDeviceGetHandleByIndex_v2(self):
        def f(index, out):
            if not self.initialised:
                return UNINITIALIZED
            if index >= len(self.gpus):
                return INVALID_ARGUMENT
            if self.gpus[index].lost:
                return GPU_IS_LOST
            self._put(out, c_void_p, self._handle(self.gpus[index]))
            return SUCCESS
        return f, c_int, (c_uint, c_void_p)

    def _c_nvmlDeviceGetIndex(self):
        return (lambda h, out: self._read(h, "nvmlDeviceGetIndex",
                                          lambda g: self._put(out, c_uint, g.index))), c_int, (c_void_p, c_void_p)

    def _c_nvmlDeviceGetUUID(self):
        return (lambda h, buf, size: self._read(h, "nvmlDeviceGetUUID", lambda g: self._text(buf, size, g.uuid))), \
            c_int, (c_void_p, c_void_p, c_uint)

    def _c_nvmlDeviceGetName(self):
        return (lambda h, buf, size: self._read(h, "nvmlDeviceGetName", lambda g: self._text(buf, size, g.name))), \
            c_int, (c_void_p, c_void_p, c_uint)

    def _c_nvmlDeviceGetMigMode(self):
        def f(h, current, pending):
            def w(g):
                on = int(bool(g.mig))
                self._put(current, c_uint, on)
                self._put(pending, c_uint, on if g.mig_pending is None else int(g.mig_pending))
            return self._read(h, "nvmlDeviceGetMigMode", w)
        return f, c_int, (c_void_p, c_void_p, c_void_p)

    def _c_nvmlDeviceGetMaxMigDeviceCount(self):
        return (lambda h, out: self._read(h, "nvmlDeviceGetMaxMigDeviceCount",
                                          lambda g: self._put(out, c_uint, 7 if g.mig else 0))), \
            c_int, (c_void_p, c_void_p)

    def _c_nvmlDeviceGetMigDeviceHandleByIndex(self):
        def f(h, index, out):
            def w(g):
                if index >= len(g.mig):
                    return NOT_FOUND
                self._put(out, c_void_p, self._handle(g.mig[index]))
                return None
            return self._read(h, "nvmlDeviceGetMigDeviceHandleByIndex", w)
        return f, c_int, (c_void_p, c_uint, c_void_p)

    def _c_nvmlDeviceGetGpuInstanceId(self):
        def f(h, out):
            def w(g):
                if g.parent is None:
                    return INVALID_ARGUMENT
                self._put(out, c_uint, g.gi)
                return None
            return self._read(h, "nvmlDeviceGetGpuInstanceId", w)
        return f, c_int, (c_void_p, c_void_p)

    def _c_nvmlDeviceGetUtilizationRates(self):
        def f(h, out):
            def w(g):
                if g.parent is not None:
                    return NOT_SUPPORTED                 # NVML has no utilization for a MIG instance
                u = g.utilization(self.clock())
                s = Utilization.from_address(out)
                s.gpu, s.memory = int(u), int(u * 0.6)
                return None
            return self._read(h, "nvmlDeviceGetUtilizationRates", w)
        return f, c_int, (c_void_p, c_void_p)

    def _c_nvmlDeviceGetSamples(self):
        def f(h, kind, last_us, value_type, count, out):
            def w(g):
                if g.parent is not None:
                    return NOT_SUPPORTED
                now_us = int(self.clock() * 1e6)
                start = max(last_us, now_us - 10_000_000)      # the driver keeps a short buffer
                stamps = list(range(start + 200_000 - start % 200_000, now_us + 1, 200_000))
                if not stamps:
                    return NOT_FOUND
                if not out:
                    self._put(count, c_uint, len(stamps))
                    return None
                n = min(len(stamps), c_uint.from_address(count).value)
                self._put(value_type, c_uint, 1)               # NVML_VALUE_TYPE_UNSIGNED_INT
                samples = (Sample * n).from_address(out)
                for i, t in enumerate(stamps[:n]):
                    noise = 0.0 if g.trace is not None else g.rng.gauss(0, 4)
                    samples[i].timeStamp = t
                    samples[i].sampleValue.uiVal = int(round(max(0.0, min(100.0, g.utilization(t / 1e6) + noise))))
                self._put(count, c_uint, n)
                return None
            return self._read(h, "nvmlDeviceGetSamples", w)
        return f, c_int, (c_void_p, c_uint, c_ulonglong, c_void_p, c_void_p, c_void_p)

    def _used(self, g: Gpu) -> int:
        return min(g.mem_total - RESERVED, sum(p.used or 0 for p in g.processes) + (300 << 20))

    def _c_nvmlDeviceGetMemoryInfo(self):
        def f(h, out):
            def w(g):
                s = Memory.from_address(out)
                s.total, s.used = g.mem_total, self._used(g) + RESERVED       # v1 counts the reserved memory as used
                s.free = s.total - s.used
                return None
            return self._read(h, "nvmlDeviceGetMemoryInfo", w)
        return f, c_int, (c_void_p, c_void_p)

    def _c_nvmlDeviceGetMemoryInfo_v2(self):
        def f(h, out):
            def w(g):
                s = MemoryV2.from_address(out)
                if s.version != 0x02000028:
                    return 25                            # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
                s.total, s.reserved, s.used = g.mem_total, RESERVED, self._used(g)
                s.free = s.total - s.reserved - s.used
                return None
            return self._read(h, "nvmlDeviceGetMemoryInfo_v2", w)
        return f, c_int, (c_void_p, c_void_p)

    def _uint(self, fn: str, value: Callable[[Gpu], float]):
        return (lambda h, out: self._read(h, fn, lambda g: self._put(out, c_uint, int(value(g))))), \
            c_int, (c_void_p, c_void_p)

    def _c_nvmlDeviceGetPowerUsage(self):
        return self._uint("nvmlDeviceGetPowerUsage",
                          lambda g: min(g.phys.power_limit_w, 70 + 6 * g.phys.util) * 1000)

    def _c_nvmlDeviceGetEnforcedPowerLimit(self):
        return self._uint("nvmlDeviceGetEnforcedPowerLimit", lambda g: g.phys.power_limit_w * 1000)

    def _c_nvmlDeviceGetTemperature(self):
        return (lambda h, sensor, out: self._read(h, "nvmlDeviceGetTemperature",
                                                  lambda g: self._put(out, c_uint, int(35 + 0.4 * g.phys.util)))), \
            c_int, (c_void_p, c_uint, c_void_p)

    def _clock(self, fn: str, value: Callable[[Gpu], float]):
        return (lambda h, kind, out: self._read(h, fn, lambda g: self._put(out, c_uint, int(value(g))))), \
            c_int, (c_void_p, c_uint, c_void_p)

    def _c_nvmlDeviceGetClockInfo(self):
        return self._clock("nvmlDeviceGetClockInfo", lambda g: 1980 if g.phys.util > 10 else 345)

    def _c_nvmlDeviceGetMaxClockInfo(self):
        return self._clock("nvmlDeviceGetMaxClockInfo", lambda g: 1980)

    def _reasons(self, g: Gpu) -> int:
        p = g.phys
        capped = 70 + 6 * p.util >= p.power_limit_w
        return (IDLE if p.util < 5 else SW_POWER_CAP if p.util > 97 or capped else 0) | p.extra_reasons

    def _c_nvmlDeviceGetCurrentClocksEventReasons(self):
        return (lambda h, out: self._read(h, "nvmlDeviceGetCurrentClocksEventReasons",
                                          lambda g: self._put(out, c_ulonglong, self._reasons(g)))), \
            c_int, (c_void_p, c_void_p)

    def _c_nvmlDeviceGetCurrentClocksThrottleReasons(self):
        return (lambda h, out: self._read(h, "nvmlDeviceGetCurrentClocksThrottleReasons",
                                          lambda g: self._put(out, c_ulonglong, self._reasons(g)))), \
            c_int, (c_void_p, c_void_p)

    def _c_nvmlDeviceGetTotalEccErrors(self):
        return (lambda h, kind, counter, out: self._read(h, "nvmlDeviceGetTotalEccErrors",
                                                         lambda g: self._put(out, c_ulonglong, 0))), \
            c_int, (c_void_p, c_uint, c_uint, c_void_p)

    def _c_nvmlDeviceGetPcieThroughput(self):
        def f(h, counter, out):
            def w(g):
                if self.pcie_delay_s:
                    self.lock.release()                  # NVML samples the counter for 20 ms: others may call
                    try:
                        time.sleep(self.pcie_delay_s)
                    finally:
                        self.lock.acquire()
                self._put(out, c_uint, int(g.phys.util * (40_000 if counter == 1 else 10_000)))     # KB/s
                return None
            return self._read(h, "nvmlDeviceGetPcieThroughput", w)
        return f, c_int, (c_void_p, c_uint, c_void_p)

    def _processes(self, fn: str, kind: str, struct):
        def f(h, count, out):
            def w(g):
                procs = [p for p in g.processes if p.kind == kind] if not g.mig else []
                room = c_uint.from_address(count).value
                self._put(count, c_uint, len(procs))
                if not procs:
                    return None
                if not out or room < len(procs):
                    return INSUFFICIENT_SIZE
                array = (struct * len(procs)).from_address(out)
                for i, p in enumerate(procs):
                    array[i].pid = p.pid
                    array[i].usedGpuMemory = NOT_AVAILABLE if p.used is None else p.used
                    if struct is ProcessV2:
                        array[i].gpuInstanceId = g.gi if g.parent is not None else 0xFFFFFFFF
                        array[i].computeInstanceId = 0 if g.parent is not None else 0xFFFFFFFF
                return None
            return self._read(h, fn, w)
        return f, c_int, (c_void_p, c_void_p, c_void_p)

    def _c_nvmlDeviceGetComputeRunningProcesses_v3(self):
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v3", "compute", ProcessV2)

    def _c_nvmlDeviceGetComputeRunningProcesses_v2(self):
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v2", "compute", ProcessV2)

    def _c_nvmlDeviceGetComputeRunningProcesses(self):
        return self._processes("nvmlDeviceGetComputeRunningProcesses", "compute", ProcessV1)

    def _c_nvmlDeviceGetGraphicsRunningProcesses_v3(self):
        return self._processes("nvmlDeviceGetGraphicsRunningProcesses_v3", "graphics", ProcessV2)

    def _c_nvmlDeviceGetGraphicsRunningProcesses_v2(self):
        return self._processes("nvmlDeviceGetGraphicsRunningProcesses_v2", "graphics", ProcessV2)

    def _c_nvmlDeviceGetGraphicsRunningProcesses(self):
        return self._processes("nvmlDeviceGetGraphicsRunningProcesses", "graphics", ProcessV1)

    def _c_nvmlDeviceGetMPSComputeRunningProcesses_v3(self):
        return self._processes("nvmlDeviceGetMPSComputeRunningProcesses_v3", "mps", ProcessV2)

    def _c_nvmlDeviceGetMPSComputeRunningProcesses_v2(self):
        return self._processes("nvmlDeviceGetMPSComputeRunningProcesses_v2", "mps", ProcessV2)

    def _c_nvmlDeviceGetMPSComputeRunningProcesses(self):
        return self._processes("nvmlDeviceGetMPSComputeRunningProcesses", "mps", ProcessV1)

    # -- events ------------------------------------------------------------------------------------------------
    def _c_nvmlEventSetCreate(self):
        def f(out):
            if not self.initialised:
                return UNINITIALIZED
            self._put(out, c_void_p, 0xE7E70000 + self.generation)
            return SUCCESS
        return f, c_int, (c_void_p,)

    def _c_nvmlDeviceRegisterEvents(self):
        def f(h, types, event_set):
            return self._read(h, "nvmlDeviceRegisterEvents", lambda g: self._registered.add(g.phys.index))
        return f, c_int, (c_void_p, c_ulonglong, c_void_p)

    def _c_nvmlEventSetWait_v2(self):
        def f(event_set, out, timeout_ms):
            if not self.initialised:
                return UNINITIALIZED
            if not self._events:
                return TIMEOUT
            g, code, gi = self._events.pop(0)
            e = EventData.from_address(out)
            e.device, e.eventType, e.eventData = self._handle(g), XID_CRITICAL, code
            e.gpuInstanceId, e.computeInstanceId = gi, 0xFFFFFFFF
            return SUCCESS
        return f, c_int, (c_void_p, c_void_p, c_uint)

    def _c_nvmlEventSetFree(self):
        return (lambda event_set: SUCCESS), c_int, (c_void_p,)

