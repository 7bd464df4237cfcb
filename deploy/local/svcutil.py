"""Small process helpers shared by kafka.py and clickhouse.py (standard library only).

Conventions: a service NAME run with --dir DIR keeps its PID in DIR/NAME.pid and its
address in a one-line file next to it; everything else lives in DIR/NAME/.
A service is stopped by the PID in its pid file, never by process name.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def alive(pid: int, marker: str | None = None) -> bool:
    """True if PID runs (not a zombie) and, when given, its command line contains marker."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    if state in ("Z", "X"):
        return False
    return marker is None or marker in cmdline


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def running_pid(pid_file: Path, marker: str) -> int | None:
    """PID from pid_file if that process is still ours and alive."""
    pid = read_pid(pid_file)
    return pid if pid is not None and alive(pid, marker) else None


def spawn(argv: list[str], cwd: Path, log_file: Path, env: dict | None = None) -> subprocess.Popen:
    """Start argv detached (own session), stdout and stderr appended to log_file."""
    with open(log_file, "ab") as out:
        return subprocess.Popen(
            argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=env,
        )


def write_ports(path: Path, ports: dict[int, tuple[int, int]]) -> None:
    """The two ports of each member of a cluster, one line each: ``member first second``."""
    path.write_text("".join(f"{m} {a} {b}\n" for m, (a, b) in sorted(ports.items())))


def read_ports(path: Path) -> dict[int, tuple[int, int]]:
    ports = {}
    for line in path.read_text().splitlines():
        member, first, second = map(int, line.split())
        ports[member] = (first, second)
    return ports


def wait_all(procs: dict, ready, what: str, timeout_s: float) -> None:
    """Wait until ``ready(name)`` holds for every ``name -> process`` of ``procs``; die if one exits or the time runs
    out."""
    t0 = time.monotonic()
    for name, proc in procs.items():
        while not ready(name):
            if proc.poll() is not None:
                die(f"{what} {name} exited with code {proc.returncode} while starting")
            if time.monotonic() - t0 > timeout_s:
                die(f"{what} {name} not ready after {timeout_s:.0f} s")
            time.sleep(0.1)


def stop_pid(pid_file: Path, marker: str, name: str, grace: float = 30.0) -> None:
    """SIGTERM the PID in pid_file, SIGKILL after `grace` seconds; idempotent."""
    pid = running_pid(pid_file, marker)
    if pid is None:
        log(f"{name}: not running")
    else:
        log(f"{name}: stopping pid {pid}")
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            log(f"{name}: still running after {grace:.0f} s, sending SIGKILL")
            os.kill(pid, signal.SIGKILL)
            while alive(pid):
                time.sleep(0.05)
        log(f"{name}: stopped")
    pid_file.unlink(missing_ok=True)


def status(pid_file: Path, marker: str, addr_file: Path, name: str) -> int:
    pid = running_pid(pid_file, marker)
    if pid is None:
        print(f"{name}: stopped")
        return 1
    addr = addr_file.read_text().strip() if addr_file.exists() else "?"
    print(f"{name}: running pid={pid} {addr}")
    return 0
