"""Faust workers on a real broker writing to a real ClickHouse server, against the embedded mode.

Input: a simulated fleet, shuffled within the allowed lateness with some messages repeated, sent in
chunks while the workers run, then one empty message per node far enough ahead to close every window.
The reference is the embedded mode over the same messages in order (without an end-of-input flush, as a
live worker never has one). After each disturbance the stored rows, read with the queries a user would
run, and the alerts on the alert topic must equal the reference: nothing lost, nothing counted twice.
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
from test_parity import QUERIES, same_rows, shuffled_with_repeats

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.sql.store import Store
from gpufleet.streams import embedded
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.kafka import consume, ensure_topics, produce
from gpufleet.streams.pipeline import Pipeline
from gpufleet.streams.sink import Sink

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CFG = StreamConfig()
COUNTS = "SELECT (SELECT count() FROM gpu_samples), (SELECT count() FROM gpu_rollup_1m), " \
         "(SELECT count() FROM job_rollup_1m), (SELECT count() FROM idle_windows), (SELECT count() FROM alerts)"


def fleet_messages(seed: int) -> list[dict]:
    recent = (time.time() // 86400 - 1) * 86400
    msgs = list(Simulation(FleetSpec(nodes=4, gpus_per_node=4, hours=1.5, seed=seed, faults_per_kind=1,
                                     start=recent)).messages())
    last = max(m["ts"] for m in msgs)
    closers = [{"schema": "gpufleet.telemetry.v1", "ts": last + 600 + i, "node": n, "interval_s": 5.0, "gpus": []}
               for i, n in enumerate(sorted({m["node"] for m in msgs}))]
    return msgs + closers


class Fleet:
    """Workers of one test: their settings (unique topics, group, database), processes and input."""

    def __init__(self, bootstrap: str, clickhouse_url: str, tmp_path, seed: int = 5):
        uid = uuid.uuid4().hex[:8]
        self.bootstrap, self.clickhouse_url, self.tmp = bootstrap, clickhouse_url, tmp_path
        self.database, self.prefix = f"w_{uid}", f"t{uid}"
        self.env = {**os.environ, "GPUFLEET_KAFKA__BOOTSTRAP": bootstrap,
                    "GPUFLEET_KAFKA__TELEMETRY_TOPIC": f"{self.prefix}.telemetry",
                    "GPUFLEET_KAFKA__TOPIC_PREFIX": self.prefix, "GPUFLEET_KAFKA__PARTITIONS": "4",
                    "GPUFLEET_WORKER__APP_ID": f"w{uid}", "GPUFLEET_WORKER__SESSION_TIMEOUT_S": "6",
                    "GPUFLEET_WORKER__BATCH_WITHIN_S": "0.5", "GPUFLEET_STORE__DSN": clickhouse_url,
                    "GPUFLEET_STORE__DATABASE": self.database}
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        self.messages = fleet_messages(seed)
        self.arrival = shuffled_with_repeats(self.messages[:-4], CFG.lateness_s, seed) + self.messages[-4:]

    def start(self, name: str) -> None:
        port = self.ports.setdefault(name, 6100 + len(self.ports) + int(uuid.uuid4().int % 800))
        env = {**self.env, "GPUFLEET_WORKER__WEB_PORT": str(port),
               "GPUFLEET_WORKER__DATA_DIR": str(self.tmp / f"data-{name}")}
        log = open(self.tmp / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen([sys.executable, "-m", "gpufleet", "--log-level", "INFO", "worker"],
                                            env=env, stdout=log, stderr=subprocess.STDOUT)

    def signal(self, name: str, sig: int) -> None:
        self.procs[name].send_signal(sig)
        self.procs[name].wait(timeout=60)

    def stop_all(self) -> None:
        for _name, p in self.procs.items():
            if p.poll() is None:
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

    def telemetry_partitions(self, name: str) -> set[int]:
        h = self.health(name) or {}
        topic = f"{self.prefix}.telemetry/"
        return {int(p.rsplit("/", 1)[1]) for p in h.get("partitions", []) if p.startswith(topic)}

    def publish(self, chunks: int = 8, pause_s: float = 1.0) -> threading.Thread:
        """Send the input in chunks, in the background, so that disturbances hit mid-stream."""
        ensure_topics(self.bootstrap, {f"{self.prefix}.telemetry": 4})
        size = len(self.arrival) // chunks + 1

        def go():
            for i in range(0, len(self.arrival), size):
                produce(self.bootstrap, f"{self.prefix}.telemetry",
                        ((m["node"], json.dumps(m).encode()) for m in self.arrival[i:i + size]))
                time.sleep(pause_s)
        t = threading.Thread(target=go)
        t.start()
        return t

    def wait_for(self, expected, timeout_s: float = 240) -> None:
        store = None
        deadline, stable, last = time.monotonic() + timeout_s, 0, None
        while time.monotonic() < deadline:
            try:
                store = store or Store.connect(self.clickhouse_url, self.database)
                now = store.query(COUNTS)[0]
            except Exception:
                now, store = None, None
            if now == expected:
                stable += 1
                if stable >= 3:
                    return
            else:
                stable = 0
            last = now
            time.sleep(1)
        raise AssertionError(f"stored counts {last} never reached {expected}; logs in {self.tmp}")

    def alerts(self) -> set[str]:
        events = set()
        for _, v in consume(self.bootstrap, f"{self.prefix}.alerts", f"check-{uuid.uuid4().hex[:6]}",
                            idle_timeout_s=5, to_end=True):
            events.add(json.dumps(json.loads(v), sort_keys=True))
        return events


def reference(fleet: Fleet, store) -> set[str]:
    pipeline, collected = Pipeline(CFG), []
    events = embedded.JsonLines(None)
    events.write = collected.extend
    embedded.run(embedded.dict_source(fleet.messages), pipeline, Sink(store), events, flush=False)
    return {json.dumps(e, sort_keys=True) for e in collected}


def assert_same(fleet: Fleet, ref_store, ref_events: set[str]) -> None:
    try:
        fleet.wait_for(ref_store.query(COUNTS)[0])
    except AssertionError:
        keys = "SELECT node, toUnixTimestamp64Milli(ts), count() FROM gpu_samples GROUP BY 1, 2"
        got = set(Store.connect(fleet.clickhouse_url, fleet.database).query(keys))
        missing = sorted(set(ref_store.query(keys)) - got)
        server = Store.connect(fleet.clickhouse_url, fleet.database)
        dead = server.query("SELECT reason_code, count() FROM dead_letters GROUP BY 1")
        dup_sql = ("SELECT (SELECT count() - uniqExact(node, gpu_uuid, ts) FROM gpu_samples), "
                   "(SELECT count() - uniqExact(gpu_uuid, minute) FROM gpu_rollup_1m), "
                   "(SELECT count() - uniqExact(job, minute) FROM job_rollup_1m), "
                   "(SELECT count() - uniqExact(gpu_uuid, started_at) FROM idle_windows), "
                   "(SELECT count() - uniqExact(id, status) FROM alerts)")
        counts = (server.query(COUNTS)[0], ref_store.query(COUNTS)[0], server.query(dup_sql)[0])
        job_keys = "SELECT job, toUnixTimestamp(minute) FROM job_rollup_1m"
        jobs_missing = sorted(set(ref_store.query(job_keys)) - set(server.query(job_keys)))
        seen = {}
        for name in fleet.procs:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{fleet.ports[name]}/metrics", timeout=2) as r:
                    seen[name] = [ln for ln in r.read().decode().splitlines()
                                  if ln.startswith("gpufleet_worker_events_total")]
            except Exception as err:
                seen[name] = str(err)
        raise AssertionError(f"raw samples missing for (node, ts ms, gpus): {missing[:8]} "
                             f"({len(missing)} in all); job rollups missing {jobs_missing[:12]} ({len(jobs_missing)}); "
                             f"counts got/expected/repeated keys {counts}; dead letters {dead}; "
                             f"worker counts {seen}") from None
    got = Store.connect(fleet.clickhouse_url, fleet.database)
    for what, sql in QUERIES.items():
        expected = ref_store.query(sql)
        assert expected, f"{what}: the reference stored nothing"
        rows = got.query(sql)
        assert same_rows(rows, expected), (what, [(g, e) for g, e in zip(rows, expected) if g != e][:3])
    assert fleet.alerts() == ref_events and ref_events


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def shared(fleet: Fleet) -> bool:
    a, b = fleet.telemetry_partitions("a"), fleet.telemetry_partitions("b")
    return bool(a and b and a | b == {0, 1, 2, 3} and not a & b)


@pytest.fixture
def fleet(kafka_bootstrap, clickhouse_url, tmp_path):
    f = Fleet(kafka_bootstrap, clickhouse_url, tmp_path)
    yield f
    f.stop_all()


def test_two_workers_share_the_partitions_and_match_the_embedded_mode(fleet, embedded_store):
    ref_events = reference(fleet, embedded_store)
    fleet.start("a")
    fleet.start("b")
    wait_until(lambda: shared(fleet), 90, "both workers to be assigned partitions")
    a, b = fleet.telemetry_partitions("a"), fleet.telemetry_partitions("b")
    assert a and b and not a & b, (a, b)
    fleet.publish(chunks=4, pause_s=0.5).join()
    assert_same(fleet, embedded_store, ref_events)


def test_a_worker_killed_mid_stream_loses_and_doubles_nothing(fleet, embedded_store):
    ref_events = reference(fleet, embedded_store)
    fleet.start("a")
    fleet.start("b")
    wait_until(lambda: shared(fleet), 90, "both workers to be assigned partitions")
    sender = fleet.publish(chunks=10, pause_s=1.0)
    time.sleep(4)
    fleet.signal("a", signal.SIGKILL)
    wait_until(lambda: fleet.telemetry_partitions("b") == {0, 1, 2, 3}, 60, "the survivor to take over")
    time.sleep(2)
    fleet.start("a")                                   # restarted: the partitions are shared again
    sender.join()
    assert_same(fleet, embedded_store, ref_events)


def test_clickhouse_down_for_30_s_loses_and_doubles_nothing(kafka_bootstrap, own_clickhouse, tmp_path,
                                                           embedded_store):
    fleet = Fleet(kafka_bootstrap, own_clickhouse.address, tmp_path, seed=6)
    try:
        ref_events = reference(fleet, embedded_store)
        fleet.start("a")
        fleet.start("b")
        sender = fleet.publish(chunks=6, pause_s=1.0)
        time.sleep(5)
        own_clickhouse.stop()
        wait_until(lambda: (fleet.health("a") or {}).get("status") == "store unavailable" or
                   (fleet.health("b") or {}).get("status") == "store unavailable", 30, "/health to say so")
        time.sleep(25)
        own_clickhouse.start()
        sender.join()
        assert_same(fleet, embedded_store, ref_events)
    finally:
        fleet.stop_all()


def test_broker_restart_loses_and_doubles_nothing(own_kafka, clickhouse_url, tmp_path, embedded_store):
    fleet = Fleet(own_kafka.bootstrap, clickhouse_url, tmp_path, seed=7)
    try:
        ref_events = reference(fleet, embedded_store)
        fleet.start("a")
        fleet.start("b")
        wait_until(lambda: shared(fleet), 90, "both workers to be assigned partitions")
        sender = fleet.publish(chunks=4, pause_s=0.5)
        sender.join()
        time.sleep(2)
        own_kafka.stop()
        time.sleep(5)
        own_kafka.start()
        assert_same(fleet, embedded_store, ref_events)
    finally:
        fleet.stop_all()
