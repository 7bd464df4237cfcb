"""Shared fixtures. Integration tests talk to a real Kafka broker and a real ClickHouse server:

1. the ones named by KAFKA_BOOTSTRAP and CLICKHOUSE_URL (``make test`` starts them), else
2. containers started with testcontainers where a Docker engine answers, else
3. the project's own local services (deploy/local/), started here for the session.
"""
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
ROOT = Path(__file__).resolve().parent.parent


def _docker_answers() -> bool:
    try:
        import docker
        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def _local_service(script: str, tmp_path_factory, prefix: str):
    state = tmp_path_factory.mktemp(script)
    out = subprocess.run([sys.executable, str(ROOT / "deploy" / "local" / f"{script}.py"), "start", "--dir",
                          str(state)], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        pytest.fail(f"could not start local {script}: {out.stderr.strip().splitlines()[-1:]}")
    value = out.stdout.strip().split(prefix, 1)[1]
    return value, lambda: subprocess.run([sys.executable, str(ROOT / "deploy" / "local" / f"{script}.py"), "stop",
                                          "--dir", str(state)], capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory):
    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield os.environ["KAFKA_BOOTSTRAP"]
    elif _docker_answers():
        from testcontainers.kafka import KafkaContainer
        with KafkaContainer("confluentinc/cp-kafka:7.6.0").with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
    else:
        bootstrap, stop = _local_service("kafka", tmp_path_factory, "KAFKA_BOOTSTRAP=")
        try:
            yield bootstrap
        finally:
            stop()


@pytest.fixture(scope="session")
def clickhouse_url(tmp_path_factory):
    if os.environ.get("CLICKHOUSE_URL"):
        yield os.environ["CLICKHOUSE_URL"]
    elif _docker_answers():
        from testcontainers.clickhouse import ClickHouseContainer
        with ClickHouseContainer("clickhouse/clickhouse-server:25.3") as ch:
            yield f"http://{ch.username}:{ch.password}@{ch.get_container_host_ip()}:{ch.get_exposed_port(8123)}"
    else:
        url, stop = _local_service("clickhouse", tmp_path_factory, "CLICKHOUSE_URL=")
        try:
            yield url
        finally:
            stop()


@pytest.fixture(scope="session")
def chdb_dsn(tmp_path_factory):
    """The embedded engine: one data directory per test session (one engine per process)."""
    return f"chdb://{tmp_path_factory.mktemp('chdb')}"


def _store(dsn: str):
    from gpufleet.sql.store import Store
    store = Store.connect(dsn, f"t_{uuid.uuid4().hex[:12]}", create=True)
    store.migrate()
    return store


@pytest.fixture
def server_store(clickhouse_url):
    """A fresh, migrated database on the ClickHouse server, dropped afterwards."""
    store = _store(clickhouse_url)
    yield store
    store.drop()
    store.close()


@pytest.fixture
def embedded_store(chdb_dsn):
    """A fresh, migrated database in the embedded engine, dropped afterwards."""
    store = _store(chdb_dsn)
    yield store
    store.drop()
    store.close()


@pytest.fixture
def topic(kafka_bootstrap):
    """A factory of fresh topics, deleted afterwards."""
    from gpufleet.streams.kafka import delete_topics, ensure_topics
    made = []

    def make(partitions: int = 4, prefix: str = "test") -> str:
        name = f"{prefix}.{uuid.uuid4().hex[:10]}"
        ensure_topics(kafka_bootstrap, {name: partitions})
        made.append(name)
        return name

    yield make
    if made:
        delete_topics(kafka_bootstrap, made)


def local_script(script: str, state: Path, *args: str) -> str:
    """Run deploy/local/<script>.py with ``args`` on the state folder ``state``; its standard output."""
    out = subprocess.run([sys.executable, str(ROOT / "deploy" / "local" / f"{script}.py"), *args, "--dir",
                          str(state)], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{script}.py {' '.join(args)} failed: {out.stderr.strip()[-500:]}")
    return out.stdout


class LocalService:
    """A Kafka broker or ClickHouse server of one test module's own, to stop and start (same port, data kept)."""

    def __init__(self, script: str, prefix: str, state: Path):
        self.script, self.prefix, self.state, self.address = script, prefix, state, None

    def _run(self, *args):
        return local_script(self.script, self.state, *args)

    def start(self):
        port = self.address.rsplit(":", 1)[1] if self.address else "0"
        keep = ["--keep-data"] if self.address else []
        self.address = self._run("start", "--port", port, *keep).strip().split(self.prefix, 1)[1]

    def stop(self):
        self._run("stop")

    @property
    def bootstrap(self):
        return self.address


@pytest.fixture(scope="module")
def own_kafka(tmp_path_factory):
    """A dedicated broker that a test may stop and start; needs Java (the local broker script)."""
    import shutil
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("broker fault tests need Java for their own broker (deploy/local/kafka.py)")
    broker = LocalService("kafka", "KAFKA_BOOTSTRAP=", tmp_path_factory.mktemp("own-kafka"))
    broker.start()
    yield broker
    broker.stop()


class KafkaCluster:
    """A cluster of three brokers of one test module's own (deploy/local/kafka.py --brokers 3), with replication
    as docs/operations.md advises; a member can be killed and started again, its data kept."""

    def __init__(self, state: Path):
        self.state, self.bootstrap = state, None

    def _run(self, *args):
        return local_script("kafka", self.state, *args)

    def start(self):
        self.bootstrap = self._run("start", "--brokers", "3").strip().split("KAFKA_BOOTSTRAP=", 1)[1]

    def kill(self, node: int):
        self._run("stop", "--node", str(node))

    def restart(self, node: int):
        self._run("start", "--node", str(node))

    def stop(self):
        self._run("stop")


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory):
    """Three brokers of the test module's own; needs Java (the local broker script)."""
    import shutil
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("a broker cluster needs Java (deploy/local/kafka.py)")
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


class ClickHouseShards:
    """Two ClickHouse servers of one test module's own, the shards of the cluster `gpufleet` (deploy/local/
    clickhouse.py --shards 2), each with the cluster's schema in its plain form (render.py --plain) applied to
    the databases asked for; a shard can be killed and started again, its data kept."""

    def __init__(self, state: Path):
        self.state, self.urls = state, []

    def _run(self, *args):
        return local_script("clickhouse", self.state, *args)

    def start(self):
        self.urls = self._run("start", "--shards", "2").split("CLICKHOUSE_SHARDS=", 1)[1].strip().split(",")

    def migrate(self, database: str) -> None:
        import importlib.util

        from gpufleet.sql.store import Store
        spec = importlib.util.spec_from_file_location("render", ROOT / "deploy" / "clickhouse-cluster" / "render.py")
        render = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(render)
        for url in self.urls:
            store = Store.connect(url, database, create=True)
            try:
                for _, text in sorted(render.rendered(replicated=False).items()):
                    for statement in render.statements(text):
                        store.command(statement)
            finally:
                store.close()

    def kill(self, shard: int):
        self._run("stop", "--node", str(shard))

    def restart(self, shard: int):
        self._run("start", "--node", str(shard))

    def stop(self):
        self._run("stop")


@pytest.fixture(scope="module")
def clickhouse_shards(tmp_path_factory):
    shards = ClickHouseShards(tmp_path_factory.mktemp("clickhouse-shards"))
    shards.start()
    yield shards
    shards.stop()


@pytest.fixture(scope="module")
def own_clickhouse(tmp_path_factory):
    """A dedicated ClickHouse server (the chdb one) that a test may stop and start."""
    server = LocalService("clickhouse", "CLICKHOUSE_URL=", tmp_path_factory.mktemp("own-clickhouse"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def cpu_burner():
    """The machine kept busy while the test runs (one spinning process per core, at normal priority), so that a
    result that depends on timing (a consumer reading one partition far ahead of another, a batch cut at another
    place, a wall-clock bound) shows as a failure rather than a flake. Yields how many processes spin."""
    n = os.cpu_count() or 2
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield n
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


@pytest.fixture(autouse=True, scope="session")
def _dev_null_stays_a_device():
    """A test run as root that writes a report to /dev/null by replacing it would leave a regular file there
    and break every later program on the machine (ClickHouse then reads it as input): fail the run instead."""
    import stat

    yield
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode), f"{os.devnull} is no longer a device: a test replaced it"
