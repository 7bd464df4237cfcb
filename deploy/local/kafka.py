"""Run a real Kafka broker (KRaft mode), or a cluster of them, on 127.0.0.1, without Docker.

    python deploy/local/kafka.py start  [--dir DIR] [--port P] [--keep-data] [--jars DIR]
    python deploy/local/kafka.py stop   [--dir DIR]
    python deploy/local/kafka.py status [--dir DIR]
    python deploy/local/kafka.py start  --brokers 3 [--dir DIR]       # a cluster, replication as production runs it
    python deploy/local/kafka.py stop   --node 2 [--dir DIR]          # one member of it (or all, without --node)
    python deploy/local/kafka.py start  --node 2 [--dir DIR]          # that member again, its data kept

Needs Java 17+ and, the first time only, Maven: the broker jars listed in pom.xml
(next to this file) are downloaded once into
${GPUFLEET_CACHE:-~/.cache/gpufleet}/kafka-<version>-jars and reused; Maven's own
repository goes to ${GPUFLEET_CACHE:-~/.cache/gpufleet}/maven-repository (never ~/.m2).

`start` formats a fresh log directory (unless --keep-data finds one already
formatted), starts the broker detached, waits until it answers a metadata request
and prints KAFKA_BOOTSTRAP=127.0.0.1:PORT on stdout. Files under DIR:
kafka.pid, kafka.bootstrap (host:port), kafka/server.properties, kafka/data/
(log.dirs) and kafka/kafka.log (all broker output). `stop` kills by the PID in
kafka.pid (SIGTERM, SIGKILL after 30 s); `status` exits 0 if it runs, 1 if not.
A fault test restarts the same broker, data kept, with:  stop, then
start --port P --keep-data  (the storage is only formatted when it is not yet).

`--brokers N` (3 or more) starts a cluster of N nodes, each a broker and a KRaft controller (a static quorum of
N voters), with replication as a production cluster runs it: default.replication.factor=3 (every topic gpufleet
creates, and the consumer offsets), min.insync.replicas=2, no unclean leader election. Member i keeps its files in
DIR/kafka-<i>/ and its PID in DIR/kafka-<i>.pid; DIR/kafka.bootstrap lists every member. `stop --node I` kills
member I (SIGKILL: a broker that dies) and `start --node I` starts it again on its ports with its data.
Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
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

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
READY_TIMEOUT = 90.0
JAVA = str(Path(os.environ["JAVA_HOME"]) / "bin" / "java") if os.environ.get("JAVA_HOME") else "java"


def kafka_version() -> str:
    return re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text()).group(1)


def cache_dir() -> Path:
    return Path(os.environ.get("GPUFLEET_CACHE") or Path.home() / ".cache" / "gpufleet")


def default_jars() -> Path:
    return cache_dir() / f"kafka-{kafka_version()}-jars"


def has_jars(jars: Path) -> bool:
    return any(jars.glob("kafka_2.13-*.jar")) and any(jars.glob("log4j-core-*.jar"))


def ensure_jars(jars: Path) -> None:
    """Download the broker jars with Maven once; atomic (temp folder, then rename)."""
    if has_jars(jars):
        return
    if not shutil.which("mvn"):
        die(f"no Kafka jars in {jars} and no `mvn` to fetch them")
    jars.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=jars.name + ".tmp-", dir=jars.parent))
    log(f"kafka: downloading Kafka {kafka_version()} jars with Maven into {jars} (once) ...")
    t0 = time.monotonic()
    # Maven's own repository lives in the same cache, not in ~/.m2
    repo = jars.parent / "maven-repository"
    cmd = ["mvn", "-B", "-ntp", "-f", str(POM), f"-Dmaven.repo.local={repo}", "dependency:copy-dependencies",
           f"-DoutputDirectory={tmp}"]
    mvn = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if mvn.returncode != 0 or not has_jars(tmp):
        shutil.rmtree(tmp, ignore_errors=True)
        log(mvn.stdout[-4000:])
        die(f"Maven could not resolve the Kafka jars (exit {mvn.returncode}): {' '.join(cmd)}")
    try:
        tmp.rename(jars)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
        if not has_jars(jars):
            raise
    log(f"kafka: {len(list(jars.glob('*.jar')))} jars ready in {time.monotonic() - t0:.1f} s")


# --- readiness: a real Metadata request over the Kafka protocol ----------------------

def _call(sock: socket.socket, api_key: int, version: int, corr: int, body: bytes) -> bytes:
    client_id = b"gpufleet-ready"
    msg = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)

    def recv(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed")
            buf += chunk
        return buf

    size, = struct.unpack(">i", recv(4))
    data = recv(size)
    if struct.unpack(">i", data[:4])[0] != corr:
        raise ConnectionError("bad correlation id")
    return data[4:]


def broker_ready(host: str, port: int) -> bool:
    """True when the broker answers ApiVersions and a Metadata request listing a broker."""
    try:
        with socket.create_connection((host, port), timeout=3) as sock:
            sock.settimeout(3)
            resp = _call(sock, 18, 0, 1, b"")  # ApiVersions v0
            error, count = struct.unpack(">hi", resp[:6])
            if error:
                return False
            versions = {}
            for i in range(count):
                key, lo, hi = struct.unpack(">hhh", resp[6 + 6 * i: 12 + 6 * i])
                versions[key] = (lo, hi)
            lo, hi = versions.get(3, (0, -1))
            version = min(hi, 8)  # v4..v8: non-flexible encoding, same broker layout
            if version < max(lo, 4):
                return False
            body = struct.pack(">ib", -1, 0)  # all topics, no auto-creation
            if version >= 8:
                body += struct.pack(">bb", 0, 0)
            resp = _call(sock, 3, version, 2, body)
            _throttle, brokers = struct.unpack(">ii", resp[:8])
            return brokers > 0
    except (OSError, struct.error):
        return False


# --- start / stop ---------------------------------------------------------------------

def server_properties(data: Path, port: int, cport: int, node: int = 1, voters: str | None = None) -> str:
    """A broker-controller's settings: alone (its own quorum, one copy of everything), or member ``node`` of a
    cluster whose controllers are ``voters`` (``1@host:port,...``), with replication as docs/operations.md
    advises: three copies, two in sync for a write to count, no unclean leader election."""
    if voters is None:
        quorum = f"controller.quorum.bootstrap.servers=127.0.0.1:{cport}"
        advertised = f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}"
        copies, in_sync, what = 1, 1, "single-node KRaft broker"
    else:
        quorum = f"controller.quorum.voters={voters}"
        advertised = f"PLAINTEXT://127.0.0.1:{port}"
        copies, in_sync, what = 3, 2, f"member {node} of a KRaft cluster"
    replication = "" if voters is None else f"""\
default.replication.factor={copies}
min.insync.replicas={in_sync}
unclean.leader.election.enable=false
"""
    return f"""\
# {what} for local development and tests (written by kafka.py)
process.roles=broker,controller
node.id={node}
{quorum}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners={advertised}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs={data}
num.partitions=1
auto.create.topics.enable=false
{replication}offsets.topic.replication.factor={copies}
offsets.topic.num.partitions={1 if voters is None else 4}
transaction.state.log.replication.factor={copies}
transaction.state.log.min.isr={in_sync}
share.coordinator.state.topic.replication.factor={copies}
share.coordinator.state.topic.min.isr={in_sync}
group.initial.rebalance.delay.ms=0
# a restarted broker waits for its previous registration to expire: keep that short
broker.heartbeat.interval.ms=500
broker.session.timeout.ms={2500 if voters is None else 3000}
"""


def log4j_properties(log_file: Path) -> str:
    return f"""\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log_file}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""


def previous_controller_port(props: Path) -> int | None:
    if props.exists():
        m = re.search(r"^controller\.quorum\.bootstrap\.servers=127\.0\.0\.1:(\d+)$", props.read_text(), re.M)
        if m:
            return int(m.group(1))
    return None


def marker(base: Path) -> str:
    """What the broker's command line contains: checked before signalling a PID."""
    return f"kafka.Kafka {base / 'kafka' / 'server.properties'}"


def java_cmd(jars: Path, home: Path, main: str, *args: str) -> list[str]:
    return [JAVA, "-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
            "-cp", f"{jars}/*", main, *args]


def start(args: argparse.Namespace) -> None:
    base = Path(args.dir).resolve()
    home, pid_file, addr_file = base / "kafka", base / "kafka.pid", base / "kafka.bootstrap"
    if (pid := running_pid(pid_file, marker(base))) is not None:
        die(f"Kafka already running (pid {pid}, {addr_file.read_text().strip()}); stop it first")
    if not shutil.which(JAVA):
        die(f"`{JAVA}` not found: Kafka needs Java 17 or newer")
    if args.port and not port_is_free(args.port):
        die(f"port {args.port} on 127.0.0.1 is in use")
    jars = Path(args.jars).resolve() if args.jars else default_jars()
    ensure_jars(jars)

    data, props, log_file = home / "data", home / "server.properties", home / "kafka.log"
    cport = previous_controller_port(props) if args.keep_data else None
    if not args.keep_data:
        shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True, exist_ok=True)
    port = args.port or free_port()
    if cport is None or cport == port or not port_is_free(cport):
        cport = free_port()
    props.write_text(server_properties(data, port, cport))
    (home / "log4j2.properties").write_text(log4j_properties(log_file))
    addr_file.unlink(missing_ok=True)

    if not (data / "meta.properties").exists():
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        fmt = java_cmd(jars, home, "kafka.tools.StorageTool", "format", "--standalone",
                       f"--cluster-id={cluster_id}", "-c", str(props))   # an id may start with "-"
        with open(log_file, "ab") as out:
            if subprocess.call(fmt, stdout=out, stderr=subprocess.STDOUT) != 0:
                die(f"formatting Kafka storage failed, see {log_file}")

    t0 = time.monotonic()
    proc = spawn(java_cmd(jars, home, "kafka.Kafka", str(props)), home, log_file)
    pid_file.write_text(f"{proc.pid}\n")
    while not broker_ready("127.0.0.1", port):
        if proc.poll() is not None:
            pid_file.unlink(missing_ok=True)
            die(f"Kafka exited with code {proc.returncode} while starting, see {log_file}")
        if time.monotonic() - t0 > READY_TIMEOUT:
            die(f"Kafka not ready after {READY_TIMEOUT:.0f} s (pid {proc.pid} still running), see {log_file}")
        time.sleep(0.25)
    addr_file.write_text(f"127.0.0.1:{port}\n")
    log(f"kafka: ready on 127.0.0.1:{port} in {time.monotonic() - t0:.1f} s (pid {proc.pid}, log {log_file})")
    print(f"KAFKA_BOOTSTRAP=127.0.0.1:{port}", flush=True)


# --- a cluster --------------------------------------------------------------------------

CLUSTER_PORTS = "cluster.ports"        # member i: "i client_port controller_port", one line each


def member_marker(base: Path, node: int) -> str:
    return f"kafka.Kafka {base / f'kafka-{node}' / 'server.properties'}"


def cluster_ports(base: Path) -> dict[int, tuple[int, int]]:
    return read_ports(base / CLUSTER_PORTS)


def start_member(base: Path, jars: Path, node: int, ports: dict[int, tuple[int, int]], cluster_id: str | None):
    """Start member ``node`` (formatting its storage first when ``cluster_id`` is given); returns the process."""
    home = base / f"kafka-{node}"
    home.mkdir(parents=True, exist_ok=True)
    props, log_file = home / "server.properties", home / "kafka.log"
    port, cport = ports[node]
    voters = ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in sorted(ports.items()))
    props.write_text(server_properties(home / "data", port, cport, node, voters))
    (home / "log4j2.properties").write_text(log4j_properties(log_file))
    if cluster_id is not None:
        fmt = java_cmd(jars, home, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c",
                       str(props))
        with open(log_file, "ab") as out:
            if subprocess.call(fmt, stdout=out, stderr=subprocess.STDOUT) != 0:
                die(f"formatting member {node}'s storage failed, see {log_file}")
    proc = spawn(java_cmd(jars, home, "kafka.Kafka", str(props)), home, log_file)
    (base / f"kafka-{node}.pid").write_text(f"{proc.pid}\n")
    return proc


def wait_ready(procs: dict, ports: dict[int, tuple[int, int]]) -> None:
    wait_all(procs, lambda node: broker_ready("127.0.0.1", ports[node][0]), "Kafka member", READY_TIMEOUT)


def start_cluster(args: argparse.Namespace) -> None:
    base = Path(args.dir).resolve()
    if args.brokers < 3:
        die("--brokers: a cluster has at least 3 nodes (replication factor 3)")
    for node in range(1, args.brokers + 1):
        if running_pid(base / f"kafka-{node}.pid", member_marker(base, node)) is not None:
            die(f"Kafka member {node} already running; stop the cluster first")
    jars = Path(args.jars).resolve() if args.jars else default_jars()
    ensure_jars(jars)
    for node in range(1, args.brokers + 1):
        shutil.rmtree(base / f"kafka-{node}", ignore_errors=True)
    base.mkdir(parents=True, exist_ok=True)
    ports = {node: (free_port(), free_port()) for node in range(1, args.brokers + 1)}
    write_ports(base / CLUSTER_PORTS, ports)
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    t0 = time.monotonic()
    procs = {node: start_member(base, jars, node, ports, cluster_id) for node in ports}
    wait_ready(procs, ports)
    bootstrap = ",".join(f"127.0.0.1:{p}" for p, _ in ports.values())
    (base / "kafka.bootstrap").write_text(bootstrap + "\n")
    log(f"kafka: a cluster of {len(ports)} ready in {time.monotonic() - t0:.1f} s ({bootstrap})")
    print(f"KAFKA_BOOTSTRAP={bootstrap}", flush=True)


def start_node(args: argparse.Namespace) -> None:
    """One member of a cluster again, on its ports, with its data."""
    base = Path(args.dir).resolve()
    ports = cluster_ports(base)
    if args.node not in ports:
        die(f"--node {args.node}: the cluster in {base} has members {sorted(ports)}")
    if running_pid(base / f"kafka-{args.node}.pid", member_marker(base, args.node)) is not None:
        die(f"Kafka member {args.node} already running")
    jars = Path(args.jars).resolve() if args.jars else default_jars()
    proc = start_member(base, jars, args.node, ports, None)
    wait_ready({args.node: proc}, ports)
    log(f"kafka: member {args.node} ready again on 127.0.0.1:{ports[args.node][0]}")
    print(f"KAFKA_BOOTSTRAP={(base / 'kafka.bootstrap').read_text().strip()}", flush=True)


def stop_cluster(args: argparse.Namespace) -> None:
    base = Path(args.dir).resolve()
    if args.node:                 # one member: killed, as a broker that dies
        pid_file = base / f"kafka-{args.node}.pid"
        pid = running_pid(pid_file, member_marker(base, args.node))
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            while alive(pid):
                time.sleep(0.05)
            log(f"kafka: member {args.node} killed")
        pid_file.unlink(missing_ok=True)
        return
    pids = {}                     # all of them at once: a member left alone waits for a quorum that is gone
    for node in sorted(cluster_ports(base)):
        pid = running_pid(base / f"kafka-{node}.pid", member_marker(base, node))
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            pids[node] = pid
    deadline = time.monotonic() + 15
    for node, pid in pids.items():
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
            while alive(pid):
                time.sleep(0.05)
        (base / f"kafka-{node}.pid").unlink(missing_ok=True)
    log(f"kafka: cluster stopped ({len(pids)} members)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["start", "stop", "status"])
    p.add_argument("--dir", default=".services", help="state folder (default: .services)")
    p.add_argument("--port", type=int, default=0, help="client port on 127.0.0.1 (default 0: a free one)")
    p.add_argument("--keep-data", action="store_true",
                   help="start: reuse the formatted data in DIR instead of starting empty")
    p.add_argument("--jars", help="folder with the broker jars (default: the cache, filled by Maven)")
    p.add_argument("--brokers", type=int, default=1,
                   help="start: a cluster of this many nodes (3 or more) instead of a single broker")
    p.add_argument("--node", type=int, default=0, help="start, stop: only this member of the cluster in DIR")
    args = p.parse_args()
    base = Path(args.dir).resolve()
    clustered = (base / CLUSTER_PORTS).exists() and args.brokers == 1 and args.command != "status"
    if args.command == "start" and args.brokers > 1:
        start_cluster(args)
    elif args.command == "start" and args.node:
        start_node(args)
    elif args.command == "stop" and (args.node or clustered):
        stop_cluster(args)
    elif args.command == "start":
        start(args)
    elif args.command == "stop":
        stop_pid(base / "kafka.pid", marker(base), "kafka")
    else:
        sys.exit(status(base / "kafka.pid", marker(base), base / "kafka.bootstrap", "kafka"))


if __name__ == "__main__":
    main()
