"""Which tenant and job a GPU belongs to, and where that answer came from.

Sources, in order: a labels file written by the scheduler or rental platform
(``labels``), the environment of the GPU's processes (``process_env``), and the
Kubernetes pod in their cgroup (``cgroup``). The result feeds ``gpus[].tenant``,
``gpus[].job`` and ``gpus[].attribution`` of the telemetry.
"""
from __future__ import annotations

import logging
import os
import re
from collections import OrderedDict

from gpufleet.contracts.files import FileError, read_json
from gpufleet.contracts.telemetry import MAX_ID, MAX_NAME

log = logging.getLogger("gpufleet.collect")

Owner = tuple[str | None, str | None]                   # tenant, job
Attribution = tuple[str | None, str | None, str | None]  # tenant, job, source

MAX_LABELS_BYTES = 32 << 20
_UNSET = object()
# pod<uid> in cgroupfs paths (dashes) and systemd slices (underscores); static pods use a 32-hex config hash.
_POD = re.compile(r"pod([0-9a-f]{8}(?:[-_][0-9a-f]{4}){3}[-_][0-9a-f]{12}|[0-9a-f]{32})(?![0-9a-f])")


def _name(value: object) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= MAX_NAME


class LabelsFile:
    """A JSON file mapping GPU UUID to ``{"tenant": str | null, "job": str | null}``.

    Reloaded by :meth:`refresh` when its inode, mtime or size changes. A file that
    cannot be parsed keeps the last good mapping; an entry with bad values is left
    out. Either sets ``error`` to a one-line message, logged once per change of the
    file; a later good file clears it. A missing file is an empty mapping plus an error.

    Args:
        path: the labels file.
    """

    def __init__(self, path: str):
        self.path = str(path)
        self.error: str | None = None
        self._labels: dict[str, Owner] = {}
        self._version: object = _UNSET
        self.refresh()

    def lookup(self, uuid: str) -> Owner | None:
        """``(tenant, job)`` for a GPU, or None when the file does not list it."""
        return self._labels.get(uuid)

    def refresh(self) -> None:
        """Reload if the file changed since the last call (one ``os.stat`` otherwise)."""
        try:
            st = os.stat(self.path)
            version = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError as e:
            version, problem = None, e.strerror or type(e).__name__
        if version == self._version:
            return
        self._version = version
        if version is None:
            self._labels = {}
            return self._fail(problem)
        try:
            raw = read_json(self.path, MAX_LABELS_BYTES)
        except FileError as e:      # too large, not UTF-8, not JSON, nested too deeply, unreadable
            return self._fail(str(e).removeprefix(f"{self.path}: "))
        if not isinstance(raw, dict):
            return self._fail(f"expected an object of GPU UUID to labels, got {type(raw).__name__}")
        labels, bad = {}, []
        for uuid, entry in raw.items():
            owner = (entry.get("tenant"), entry.get("job")) if isinstance(entry, dict) else None
            if 1 <= len(uuid) <= MAX_ID and owner and all(v is None or _name(v) for v in owner):
                labels[uuid] = owner
            else:
                bad.append(uuid)
        self._labels = labels
        if bad:
            more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
            return self._fail(f"entry {bad[0][:MAX_ID]!r}{more} left out: expected tenant and job "
                              f"as null or strings of 1..{MAX_NAME} characters")
        self.error = None

    def _fail(self, problem: str) -> None:
        self.error = f"labels file {self.path}: {problem}"
        log.warning("%s", self.error)


class ProcessAttributor:
    """Attributes a GPU from its processes: a job id in their environment, else a Kubernetes pod in their cgroup.

    Only the named variables are taken from ``/proc/<pid>/environ``; nothing else
    of a tenant's environment is kept, logged or raised. Files that cannot be read
    (permission denied, process gone) are skipped. Results are cached per process,
    keyed by pid and start time so that a reused pid is read again.

    Args:
        proc: root of the proc file system (a fake tree in tests).
        env_var: the variable holding the job id, e.g. ``SLURM_JOB_ID``; None to not read it.
        tenant_env_var: the variable holding the tenant, if the platform sets one.
        cache_size: processes remembered.
    """

    def __init__(self, proc: str = "/proc", env_var: str | None = "SLURM_JOB_ID",
                 tenant_env_var: str | None = None, cache_size: int = 4096):
        for setting, var in (("env_var", env_var), ("tenant_env_var", tenant_env_var)):
            if var is not None and (not var or "=" in var or "\0" in var):
                raise ValueError(f"{setting}: {var!r} is not an environment variable name")
        if cache_size < 1:
            raise ValueError("cache_size: must be at least 1")
        self.proc, self.env_var, self.tenant_env_var = proc, env_var, tenant_env_var
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[int, int], Attribution | None] = OrderedDict()

    def attribute(self, pids: list[int]) -> Attribution | None:
        """``(tenant, job, source)`` of the first process, in the given order, that tells; else None."""
        for pid in pids:
            found = self._process(pid)
            if found is not None:
                return found
        return None

    def _process(self, pid: int) -> Attribution | None:
        start = self._start_time(pid)
        if start is None:
            return None
        key = (pid, start)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        found = self._from_environ(pid) or self._from_cgroup(pid)
        self._cache[key] = found
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return found

    def _start_time(self, pid: int) -> int | None:
        """Field 22 of ``/proc/<pid>/stat``, counted after the command name, which may hold spaces and parens."""
        try:
            with open(f"{self.proc}/{int(pid)}/stat", "rb") as f:
                return int(f.read().rpartition(b")")[2].split()[19])
        except (OSError, ValueError, IndexError):
            return None

    def _from_environ(self, pid: int) -> Attribution | None:
        if self.env_var is None and self.tenant_env_var is None:
            return None
        try:
            with open(f"{self.proc}/{int(pid)}/environ", "rb") as f:
                environ = b"\0" + f.read()
        except OSError:
            return None
        job, tenant = _env_value(environ, self.env_var), _env_value(environ, self.tenant_env_var)
        del environ
        if job is None and tenant is None:
            return None
        return tenant, job, "process_env"

    def _from_cgroup(self, pid: int) -> Attribution | None:
        try:
            with open(f"{self.proc}/{int(pid)}/cgroup", encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            return None
        for line in text.splitlines():
            m = _POD.search(line) if "kubepods" in line else None
            if m:
                return None, f"pod-{m.group(1).replace('_', '-')}", "cgroup"
        return None


def _env_value(environ: bytes, var: str | None) -> str | None:
    """The first value of ``var`` in a NUL-separated environment that starts with NUL; None if absent or unfit."""
    if var is None:
        return None
    key = b"\0" + var.encode() + b"="
    start = environ.find(key)
    if start < 0:
        return None
    start += len(key)
    end = environ.find(b"\0", start)
    try:
        value = environ[start:end if end >= 0 else len(environ)].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return value if _name(value) else None


class Attributor:
    """Combines the sources: the labels file first, since the platform knows who rents a GPU even when
    nothing runs on it; then the GPU's processes. A labels entry with neither tenant nor job says nothing.

    Args:
        labels: the labels file, if the node has one.
        processes: process attribution, if enabled.
    """

    def __init__(self, labels: LabelsFile | None = None, processes: ProcessAttributor | None = None):
        self.labels, self.processes = labels, processes

    def refresh(self) -> None:
        """Once per tick: pick up a changed labels file."""
        if self.labels is not None:
            self.labels.refresh()

    def attribute(self, uuid: str, pids: list[int]) -> Attribution:
        """``(tenant, job, source)`` of a GPU; ``(None, None, None)`` when no source knows."""
        owner = self.labels.lookup(uuid) if self.labels is not None else None
        if owner is not None and owner != (None, None):
            return owner[0], owner[1], "labels"
        found = self.processes.attribute(pids) if self.processes is not None and pids else None
        return found or (None, None, None)
