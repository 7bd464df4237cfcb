"""Faust workers on a real broker writing to a real ClickHouse server give what `gpufleet replay` gives.

A recording of several hours (6 nodes x 4 GPUs, multi-node jobs, faults of every kind) is published at
once (a backlog, as after any outage) to 4 partitions read by 2 workers, then the end-of-stream marker
(`gpufleet publish --end`). Once `gpufleet status --wait` says everything is processed, every table's
rows and the alerts, on the topic and in the store, must equal those of `gpufleet replay` over the same
file: after a backlog, a worker paused for 60 s, a worker killed and restarted, ClickHouse down for 30 s,
and a broker restart. The billing ledger is among the tables (a worker killed mid-period leaves it exactly as
replay makes it), and the billing topic carries replay's billing records.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
from test_parity import same_rows

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.sql.store import Store
from gpufleet.streams.kafka import consume

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# every table the stream writes, and the views over them, as a user reads them: the tables are
# ReplacingMergeTree, read with FINAL (a paused worker finishing a batch its partitions' new owner wrote too
# stores a row twice until the next merge; docs/sql.md, "Idempotent writes")
TABLES = {
    "gpu_samples": "SELECT * EXCEPT (inserted_at) FROM gpu_samples FINAL ORDER BY node, gpu_uuid, ts",
    "gpu_rollup_1m": "SELECT * FROM gpu_rollup_1m FINAL ORDER BY gpu_uuid, minute",
    "node_rollup_1m": "SELECT * FROM node_rollup_1m FINAL ORDER BY node, minute",
    "job_rollup_1m": "SELECT * FROM job_rollup_1m FINAL ORDER BY job, minute",
    "idle_windows": "SELECT * FROM idle_windows FINAL ORDER BY gpu_uuid, started_at",
    "alerts": "SELECT * FROM alerts FINAL ORDER BY id, status",
    "billing_ledger": "SELECT * FROM billing_ledger FINAL ORDER BY gpu_uuid, tenant, job, period_start",
    "billing_cost_monthly": "SELECT * FROM billing_cost_monthly ORDER BY month, tenant, pool, currency",
    "pool_usage_1m": "SELECT * FROM pool_usage_1m ORDER BY pool, minute",
    "tenant_usage_1m": "SELECT * FROM tenant_usage_1m ORDER BY tenant, pool, minute",
    "dead_letters": "SELECT reason_code, count() FROM dead_letters GROUP BY reason_code ORDER BY reason_code",
}


CONTROL_KEY = "test-control-key"      # kafka.control_key: publish --end signs the marker, the workers check it
# The live mode's wall-clock bounds (a node silent that long is silenced, or no longer holds the jobs back) are the
# only results that may depend on timing: far away from any test's duration, for the workers and replay alike.
FAR = {"GPUFLEET_STREAM__SILENT_AFTER_S": "86400", "GPUFLEET_STREAM__NODE_IDLE_S": "86400"}


VIEWS = ("pool_usage_1m", "tenant_usage_1m", "billing_cost_monthly")     # read the tables of the node they are on


def gpufleet(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """The recording, and what `gpufleet replay` makes of it (rows by table, alerts as (id, status))."""
    tmp = tmp_path_factory.mktemp("recording")
    recent = (time.time() // 86400 - 1) * 86400
    sim = Simulation(FleetSpec(nodes=6, gpus_per_node=4, hours=3, seed=2, faults_per_kind=1, start=recent,
                               training_share=0.7))
    path = tmp / "telemetry.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in sim.messages()))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}, **FAR}
    dsn = f"chdb://{tmp / 'replay'}"
    out = gpufleet("replay", str(path), "--events", str(tmp / "events.jsonl"), "--dsn", dsn, env=env)
    assert out.returncode == 0, out.stderr
    reader = subprocess.run([sys.executable, "-c", "import json, sys\nfrom gpufleet.sql.store import Store\n"
                             f"s = Store.connect({dsn!r}, 'gpufleet')\n"
                             f"print(json.dumps({{t: s.query(q) for t, q in {TABLES!r}.items()}}, default=str))"],
                            capture_output=True, text=True, timeout=300)
    assert reader.returncode == 0, reader.stderr
    rows = json.loads(reader.stdout)
    events = [json.loads(x) for x in (tmp / "events.jsonl").read_text().splitlines()]
    alerts = [e for e in events if e["schema"] == "gpufleet.alert.v1"]
    assert any(r[4] > 1 for r in rows["job_rollup_1m"]), "the recording needs multi-node jobs"
    assert {e["kind"] for e in alerts} >= {"idle", "memory_leak"}
    assert len(rows["billing_ledger"]) > 50, "and billing records"
    return path, rows, {(e["id"], e["status"]) for e in alerts}, {
        json.dumps(e, sort_keys=True) for e in events if e["schema"] == "gpufleet.billing.v1"}


class Workers:
    """Two workers of one test: their settings (topics, group, database of their own) and processes."""

    def __init__(self, bootstrap: str, clickhouse_url: str, tmp_path):
        uid = uuid.uuid4().hex[:8]
        self.bootstrap, self.clickhouse_url, self.tmp = bootstrap, clickhouse_url, tmp_path
        self.database, self.prefix, self.app_id = f"w_{uid}", f"t{uid}", f"w{uid}"
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")},
                    "GPUFLEET_KAFKA__BOOTSTRAP": bootstrap, "GPUFLEET_KAFKA__CONTROL_KEY": CONTROL_KEY,
                    "GPUFLEET_KAFKA__TELEMETRY_TOPIC": f"{self.prefix}.telemetry",
                    "GPUFLEET_KAFKA__TOPIC_PREFIX": self.prefix, "GPUFLEET_KAFKA__PARTITIONS": "4",
                    "GPUFLEET_WORKER__APP_ID": self.app_id, "GPUFLEET_WORKER__SESSION_TIMEOUT_S": "6",
                    "GPUFLEET_WORKER__BATCH_WITHIN_S": "0.5", "GPUFLEET_STORE__DSN": clickhouse_url,
                    "GPUFLEET_STORE__DATABASE": self.database, "GPUFLEET_STORE__BATCH_SECONDS": "1", **FAR}
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}

    def start(self, name: str) -> None:
        port = self.ports.setdefault(name, 6100 + len(self.ports) + int(uuid.uuid4().int % 800))
        env = {**self.env, "GPUFLEET_WORKER__WEB_PORT": str(port),
               "GPUFLEET_WORKER__DATA_DIR": str(self.tmp / f"data-{name}")}
        log = open(self.tmp / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen([sys.executable, "-m", "gpufleet", "worker"], env=env, stdout=log,
                                            stderr=subprocess.STDOUT)

    def signal(self, name: str, sig: int) -> None:
        self.procs[name].send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.procs[name].wait(timeout=60)

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()

    def health(self, name: str) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[name]}/health", timeout=2) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as err:          # 503 while the store is unavailable
            return json.loads(err.read())
        except Exception:
            return None

    def metrics(self, name: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[name]}/metrics", timeout=2) as r:
            return r.read().decode()

    def telemetry_partitions(self, name: str) -> set[int]:
        topic = f"{self.prefix}.telemetry/"
        return {int(p.rsplit("/", 1)[1]) for p in (self.health(name) or {}).get("partitions", [])
                if p.startswith(topic)}

    def publish(self, path) -> threading.Thread:
        """`gpufleet publish FILE --end` in the background: everything at once, then the end of stream."""
        result = {}

        def go():
            result["out"] = gpufleet("publish", str(path), "--end", env=self.env)
        t = threading.Thread(target=go)
        t.start()
        t.result = result
        return t

    def processed(self, timeout_s: float = 400) -> None:
        out = gpufleet("status", "--wait", str(timeout_s), env=self.env, timeout=timeout_s + 60)
        if out.returncode != 0:
            logs = {n: (self.tmp / f"{n}.log").read_text()[-3000:] for n in self.procs}
            raise AssertionError(f"not all processed: {out.stdout}{out.stderr}\nlogs: {logs}")

    def alerts(self) -> set[tuple[str, str]]:
        seen = set()
        for _, v in consume(self.bootstrap, f"{self.prefix}.alerts", f"check-{uuid.uuid4().hex[:6]}",
                            idle_timeout_s=5, to_end=True):
            e = json.loads(v)
            seen.add((e["id"], e["status"]))
        return seen

    def billing(self) -> set[str]:
        """The billing records on the billing topic (at least once: a repeat is the same record)."""
        return {json.dumps(json.loads(v), sort_keys=True) for _, v in consume(
            self.bootstrap, f"{self.prefix}.billing", f"check-{uuid.uuid4().hex[:6]}", idle_timeout_s=5, to_end=True)}


def assert_same_as_replay(workers: Workers, recording) -> None:
    """The store's rows, the alerts and the billing records as the embedded replay gives them."""
    _, expected, expected_alerts, expected_billing = recording
    workers.processed()
    store = Store.connect(workers.clickhouse_url, workers.database)
    try:
        for table, sql in TABLES.items():
            got = json.loads(json.dumps(store.query(sql), default=str))
            assert same_rows(got, expected[table]), (table, len(got), len(expected[table]),
                                                     [(g, e) for g, e in zip(got, expected[table]) if g != e][:2])
    finally:
        store.close()
    assert workers.alerts() == expected_alerts
    assert workers.billing() == expected_billing


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def shared(workers: Workers) -> bool:
    a, b = workers.telemetry_partitions("a"), workers.telemetry_partitions("b")
    return bool(a and b and a | b == {0, 1, 2, 3} and not a & b)


def two_workers(workers: Workers) -> None:
    assert gpufleet("topics", env=workers.env).returncode == 0
    workers.start("a")
    workers.start("b")
    wait_until(lambda: shared(workers), 120, "both workers to be assigned partitions")


@pytest.fixture
def workers(kafka_bootstrap, clickhouse_url, tmp_path):
    w = Workers(kafka_bootstrap, clickhouse_url, tmp_path)
    yield w
    w.stop_all()


def test_a_backlog_published_at_once_gives_what_replay_gives(workers, recording, cpu_burner):
    two_workers(workers)
    sender = workers.publish(recording[0])
    sender.join()
    assert sender.result["out"].returncode == 0, sender.result["out"].stderr
    assert_same_as_replay(workers, recording)
    text = workers.metrics("a") + workers.metrics("b")
    assert 'kind="end_of_stream"' in text


def test_a_worker_paused_for_60_s_changes_nothing(workers, recording):
    two_workers(workers)
    sender = workers.publish(recording[0])
    time.sleep(3)
    workers.signal("a", signal.SIGSTOP)            # its partitions move to b, then come back
    wait_until(lambda: workers.telemetry_partitions("b") == {0, 1, 2, 3}, 60, "b to take over")
    time.sleep(60)
    workers.signal("a", signal.SIGCONT)
    sender.join()
    assert_same_as_replay(workers, recording)


def test_a_worker_killed_mid_stream_and_restarted_changes_nothing(workers, recording):
    two_workers(workers)
    sender = workers.publish(recording[0])
    time.sleep(4)
    workers.signal("a", signal.SIGKILL)
    wait_until(lambda: workers.telemetry_partitions("b") == {0, 1, 2, 3}, 60, "b to take over")
    log = (workers.tmp / "b.log").read_text()
    assert "rebalance: partitions assigned" in log and "INFO" in log    # the takeover is logged by default
    workers.start("a")
    sender.join()
    assert_same_as_replay(workers, recording)


def test_clickhouse_down_for_30_s_changes_nothing(kafka_bootstrap, own_clickhouse, tmp_path, recording):
    workers = Workers(kafka_bootstrap, own_clickhouse.address, tmp_path)
    workers.env["GPUFLEET_WORKER__STUCK_AFTER_S"] = "5"
    try:
        two_workers(workers)
        sender = workers.publish(recording[0])
        time.sleep(3)
        own_clickhouse.stop()
        wait_until(lambda: any((workers.health(n) or {}).get("status") == "store unavailable" for n in "ab"), 30,
                   "/health to say so")
        # the partitions whose records wait are named stuck, and their lag is the broker's end less the committed
        # offset (the consumers have read them to the end meanwhile: their own position would say 0)
        wait_until(lambda: any((workers.health(n) or {}).get("stuck") for n in "ab"), 30, "/health to name them")
        health = [workers.health(n) or {} for n in "ab"]
        stuck = {p for h in health for p in h.get("stuck", {})}
        assert stuck and all(p.startswith(f"{workers.prefix}.telemetry") for p in stuck), health
        assert any(f"{p} stuck" in problem for h in health for problem in h["problems"] for p in stuck), health
        time.sleep(5)
        # the failures are counted while the outage lasts, not only once it ends
        text = workers.metrics("a") + workers.metrics("b")
        failures = [float(line.split()[-1]) for line in text.splitlines()
                    if line.startswith("gpufleet_worker_store_failures ")]
        assert max(failures) > 0, text
        lags = [float(line.split()[-1]) for line in text.splitlines()
                if line.startswith("gpufleet_worker_consumer_lag{") and ".telemetry\"" in line]
        assert max(lags) > 0, text
        assert 'gpufleet_worker_partition_stuck{partition=' in text
        time.sleep(20)
        own_clickhouse.start()
        sender.join()
        assert_same_as_replay(workers, recording)
        assert all((workers.health(n) or {}).get("status") == "ok" for n in "ab")
    finally:
        workers.stop_all()


def test_a_broker_restart_changes_nothing(own_kafka, clickhouse_url, tmp_path, recording):
    workers = Workers(own_kafka.bootstrap, clickhouse_url, tmp_path)
    try:
        two_workers(workers)
        sender = workers.publish(recording[0])
        sender.join()
        time.sleep(2)
        own_kafka.stop()
        time.sleep(5)
        own_kafka.start()
        assert_same_as_replay(workers, recording)
    finally:
        workers.stop_all()


def test_a_broker_of_three_killed_mid_stream_and_restarted_changes_nothing(kafka_cluster, clickhouse_url, tmp_path,
                                                                          recording):
    """Replication as docs/operations.md advises (three copies, two in sync): one broker dies while the backlog is
    published and processed, and comes back; nothing is lost and nothing billed twice."""
    from confluent_kafka.admin import AdminClient
    workers = Workers(kafka_cluster.bootstrap, clickhouse_url, tmp_path)
    try:
        two_workers(workers)
        meta = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap}).list_topics(timeout=30).topics
        made = [t for t in meta if t.startswith((workers.prefix, workers.app_id))]
        assert len(made) >= 8 and all(len(p.replicas) == 3 for t in made for p in meta[t].partitions.values())
        sender = workers.publish(recording[0])
        time.sleep(3)
        from gpufleet.streams.kafka import group_progress
        behind = group_progress(kafka_cluster.bootstrap, workers.app_id, [f"{workers.prefix}.telemetry"])
        kafka_cluster.kill(2)
        assert sum(end - (done or 0) for _, _, done, end in behind) > 0, "the kill must land mid-stream"
        time.sleep(15)
        kafka_cluster.restart(2)
        sender.join()
        assert sender.result["out"].returncode == 0, sender.result["out"].stderr
        assert_same_as_replay(workers, recording)
    finally:
        workers.stop_all()


def test_two_shards_written_through_distributed_tables_and_one_killed_change_nothing(
        kafka_bootstrap, clickhouse_shards, tmp_path, recording):
    """The sharded layout of deploy/clickhouse-cluster (rendered --plain: no replication, which needs Keeper) on two
    real ClickHouse shards: the workers write through the Distributed `_all` tables (store.cluster), shard 2 dies
    while the backlog is processed and comes back; read across the shards, every table is replay's. The views
    read one node's tables and are left out (docs/operations.md)."""
    _, expected, expected_alerts, expected_billing = recording
    workers = Workers(kafka_bootstrap, clickhouse_shards.urls[0], tmp_path)
    workers.env["GPUFLEET_STORE__CLUSTER"] = "gpufleet"
    clickhouse_shards.migrate(workers.database)
    try:
        two_workers(workers)
        sender = workers.publish(recording[0])
        time.sleep(3)
        clickhouse_shards.kill(2)
        wait_until(lambda: any((workers.health(n) or {}).get("status") == "store unavailable" for n in "ab"), 60,
                   "the writes to fail while shard 2 is down")
        time.sleep(10)
        clickhouse_shards.restart(2)
        sender.join()
        workers.processed()
        shards = [Store.connect(url, workers.database) for url in clickhouse_shards.urls]
        try:
            for table, sql in TABLES.items():
                if table not in VIEWS:
                    got = json.loads(json.dumps(shards[0].query(sql.replace(f" FROM {table}", f" FROM {table}_all")),
                                                default=str))
                    assert same_rows(got, expected[table]), (table, len(got), len(expected[table]))
            held = [s.query("SELECT count() FROM gpu_samples FINAL")[0][0] for s in shards]
            assert all(held) and sum(held) == len(expected["gpu_samples"]), held     # each shard has its share
        finally:
            for s in shards:
                s.close()
        assert workers.alerts() == expected_alerts and workers.billing() == expected_billing
    finally:
        workers.stop_all()
