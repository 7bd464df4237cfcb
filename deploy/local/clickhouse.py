"""Run a real ClickHouse HTTP server on 127.0.0.1 from the `chdb` package, or a cluster of shards, without Docker.

    python deploy/local/clickhouse.py start  [--dir DIR] [--port P] [--keep-data]
    python deploy/local/clickhouse.py stop   [--dir DIR]
    python deploy/local/clickhouse.py status [--dir DIR]
    python deploy/local/clickhouse.py start  --shards 2 [--dir DIR]    # two shards of one cluster, `gpufleet`
    python deploy/local/clickhouse.py stop   --node 2 [--dir DIR]      # one shard killed (or all, without --node)
    python deploy/local/clickhouse.py start  --node 2 [--dir DIR]      # that shard again, its data kept

chdb is clickhouse-local as a Python module. `start` launches a child process, with
the interpreter running this script (so the same virtualenv), that makes a single
chdb call on the data folder: SYSTEM START LISTEN HTTP (host and port come from the
config.xml written into its working folder), writes the port it got, then runs a
sleeping query forever; the listener lives as long as that query does. The parent
waits until GET /ping answers and prints CLICKHOUSE_URL=http://127.0.0.1:PORT.

Files under DIR: clickhouse.pid, clickhouse.url, clickhouse/config.xml,
clickhouse/data/ and clickhouse/clickhouse.log. Without --keep-data, start wipes
clickhouse/ first. `stop` kills by the PID in clickhouse.pid (SIGTERM, SIGKILL after
30 s); `status` exits 0 if it runs, 1 if not. A fault test restarts it, data kept,
with:  stop, then  start --port P --keep-data.
No password: it only listens on 127.0.0.1. Needs only the standard library and chdb.

`--shards N` starts N servers that each serve HTTP and the native TCP protocol and know each other as the
shards of the cluster `gpufleet` (`remote_servers`, one replica each; the macros `cluster`, `shard` and `replica`
set), so that a `Distributed` table on any of them reads and writes across all: the sharded layout of
deploy/clickhouse-cluster without replication, which chdb cannot run (it starts no ZooKeeper client). Shard i
keeps its files in DIR/clickhouse-<i>/; `start` prints CLICKHOUSE_URL (shard 1's) and CLICKHOUSE_SHARDS (all).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from svcutil import (  # noqa: E402
    alive,
    die,
    free_port,
    log,
    port_is_free,
    read_ports,
    running_pid,
    spawn,
    status,
    stop_pid,
    wait_all,
    write_ports,
)

READY_TIMEOUT = 60.0
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # ignore http_proxy for 127.0.0.1
CONFIG = """\
<clickhouse>
    <listen_host>127.0.0.1</listen_host>
    <http_port>{port}</http_port>
</clickhouse>
"""


def marker(home: Path) -> str:
    """What the server's command line contains: checked before signalling a PID."""
    return f"clickhouse.py _serve {home}"


def serve(home: Path) -> None:
    """Child process: one chdb call that opens the HTTP listener and then sleeps."""
    import chdb._chdb  # only the server process needs chdb

    def sql_str(s: str) -> str:
        return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"

    port_file = home / "http_port"
    tcp = "SYSTEM START LISTEN TCP;" if "<tcp_port>" in (home / "config.xml").read_text() else ""
    query = f"""
        SYSTEM START LISTEN HTTP; {tcp}
        INSERT INTO FUNCTION file({sql_str(str(port_file))}, 'TSV', 'port UInt16')
            SELECT getServerPort('http_port');
        SELECT /* gpufleet keep-alive */ sleepEachRow(1) FROM numbers(1000000000)
            SETTINGS max_block_size = 1 FORMAT Null
    """
    result = chdb._chdb.query(query, "TabSeparated", path=str(home / "data"))
    error = result.error_message() if result.has_error() else ""
    print(f"chdb server call ended: {error or 'no error'}", file=sys.stderr, flush=True)
    sys.exit(0 if not error or "QUERY_WAS_CANCELLED" in error else 1)


def pinged(url: str) -> bool:
    try:
        with NO_PROXY.open(f"{url}/ping", timeout=2) as resp:
            return resp.status == 200 and resp.read().strip() == b"Ok."
    except OSError:
        return False


def start(args: argparse.Namespace) -> None:
    base = Path(args.dir).resolve()
    home, pid_file, url_file = base / "clickhouse", base / "clickhouse.pid", base / "clickhouse.url"
    if (pid := running_pid(pid_file, marker(home))) is not None:
        die(f"ClickHouse already running (pid {pid}, {url_file.read_text().strip()}); stop it first")
    if args.port and not port_is_free(args.port):
        die(f"port {args.port} on 127.0.0.1 is in use")
    try:
        import chdb  # noqa: F401  (fail here, not in the detached child)
    except ImportError:
        die(f"the `chdb` package is not installed for {sys.executable}")
    if not args.keep_data:
        shutil.rmtree(home, ignore_errors=True)
    (home / "data").mkdir(parents=True, exist_ok=True)
    (home / "config.xml").write_text(CONFIG.format(port=args.port))
    port_file, log_file = home / "http_port", home / "clickhouse.log"
    port_file.unlink(missing_ok=True)
    url_file.unlink(missing_ok=True)

    t0 = time.monotonic()
    proc = spawn([sys.executable, str(Path(__file__).resolve()), "_serve", str(home)], home, log_file)
    pid_file.write_text(f"{proc.pid}\n")
    url = None
    while url is None or not pinged(url):
        if proc.poll() is not None:
            pid_file.unlink(missing_ok=True)
            die(f"ClickHouse exited with code {proc.returncode} while starting, see {log_file}")
        if time.monotonic() - t0 > READY_TIMEOUT:
            die(f"ClickHouse not ready after {READY_TIMEOUT:.0f} s (pid {proc.pid} still running), "
                f"see {log_file}")
        if url is None and port_file.exists() and port_file.read_text().strip().isdigit():
            url = f"http://127.0.0.1:{int(port_file.read_text())}"
        time.sleep(0.1)
    url_file.write_text(url + "\n")
    log(f"clickhouse: ready at {url} in {time.monotonic() - t0:.1f} s (pid {proc.pid}, log {log_file})")
    print(f"CLICKHOUSE_URL={url}", flush=True)


# --- shards of a cluster -----------------------------------------------------------------

SHARDS = "clickhouse.shards"          # shard i: "i http_port tcp_port", one line each
CLUSTER_NAME = "gpufleet"


def shard_config(shard: int, ports: dict[int, tuple[int, int]]) -> str:
    members = "".join(f"\n      <shard><replica><host>127.0.0.1</host><port>{tcp}</port></replica></shard>"
                      for _, (_, tcp) in sorted(ports.items()))
    http, tcp = ports[shard]
    return f"""<clickhouse>
    <listen_host>127.0.0.1</listen_host>
    <http_port>{http}</http_port>
    <tcp_port>{tcp}</tcp_port>
    <remote_servers>
      <{CLUSTER_NAME}>{members}
      </{CLUSTER_NAME}>
    </remote_servers>
    <macros><cluster>{CLUSTER_NAME}</cluster><shard>{shard}</shard><replica>r{shard}</replica></macros>
</clickhouse>
"""


def shard_ports(base: Path) -> dict[int, tuple[int, int]]:
    return read_ports(base / SHARDS)


def start_shard(base: Path, shard: int, ports: dict[int, tuple[int, int]], fresh: bool):
    home = base / f"clickhouse-{shard}"
    if fresh:
        shutil.rmtree(home, ignore_errors=True)
    (home / "data").mkdir(parents=True, exist_ok=True)
    (home / "config.xml").write_text(shard_config(shard, ports))
    proc = spawn([sys.executable, str(Path(__file__).resolve()), "_serve", str(home)], home, home / "clickhouse.log")
    (base / f"clickhouse-{shard}.pid").write_text(f"{proc.pid}\n")
    return proc


def wait_shards(procs: dict, ports: dict[int, tuple[int, int]]) -> None:
    wait_all(procs, lambda shard: pinged(f"http://127.0.0.1:{ports[shard][0]}"), "ClickHouse shard", READY_TIMEOUT)


def start_shards(args: argparse.Namespace) -> None:
    base = Path(args.dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    try:
        import chdb  # noqa: F401  (fail here, not in the detached children)
    except ImportError:
        die(f"the `chdb` package is not installed for {sys.executable}")
    ports = {shard: (free_port(), free_port()) for shard in range(1, args.shards + 1)}
    write_ports(base / SHARDS, ports)
    t0 = time.monotonic()
    procs = {shard: start_shard(base, shard, ports, fresh=True) for shard in ports}
    wait_shards(procs, ports)
    urls = [f"http://127.0.0.1:{h}" for h, _ in ports.values()]
    (base / "clickhouse.url").write_text(urls[0] + "\n")
    log(f"clickhouse: {len(ports)} shards of cluster {CLUSTER_NAME} ready in {time.monotonic() - t0:.1f} s")
    print(f"CLICKHOUSE_URL={urls[0]}\nCLICKHOUSE_SHARDS={','.join(urls)}", flush=True)


def shard_marker(base: Path, shard: int) -> str:
    return marker(base / f"clickhouse-{shard}")


def kill_shard(base: Path, shard: int) -> None:
    pid_file = base / f"clickhouse-{shard}.pid"
    pid = running_pid(pid_file, shard_marker(base, shard))
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.05)
        log(f"clickhouse: shard {shard} killed")
    pid_file.unlink(missing_ok=True)


def main() -> None:
    if sys.argv[1:2] == ["_serve"]:
        return serve(Path(sys.argv[2]))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["start", "stop", "status"])
    p.add_argument("--dir", default=".services", help="state folder (default: .services)")
    p.add_argument("--port", type=int, default=0, help="HTTP port on 127.0.0.1 (default 0: a free one)")
    p.add_argument("--keep-data", action="store_true",
                   help="start: keep the databases in DIR instead of starting empty")
    p.add_argument("--shards", type=int, default=1, help="start: this many shards of one cluster (2 or more)")
    p.add_argument("--node", type=int, default=0, help="start, stop: only this shard of the cluster in DIR")
    args = p.parse_args()
    base = Path(args.dir).resolve()
    home = base / "clickhouse"
    sharded = (base / SHARDS).exists() and args.command == "stop"
    if args.command == "start" and args.shards > 1:
        start_shards(args)
    elif args.command == "start" and args.node:
        ports = shard_ports(base)
        if args.node not in ports:
            die(f"--node {args.node}: the cluster in {base} has shards {sorted(ports)}")
        wait_shards({args.node: start_shard(base, args.node, ports, fresh=False)}, ports)
        log(f"clickhouse: shard {args.node} ready again on 127.0.0.1:{ports[args.node][0]}")
    elif args.command == "stop" and args.node:
        kill_shard(base, args.node)
    elif sharded:
        for shard in sorted(shard_ports(base)):
            stop_pid(base / f"clickhouse-{shard}.pid", shard_marker(base, shard), f"clickhouse shard {shard}")
    elif args.command == "start":
        start(args)
    elif args.command == "stop":
        stop_pid(base / "clickhouse.pid", marker(home), "clickhouse")
    else:
        sys.exit(status(base / "clickhouse.pid", marker(home), base / "clickhouse.url", "clickhouse"))


if __name__ == "__main__":
    main()
