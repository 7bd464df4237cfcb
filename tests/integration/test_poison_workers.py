"""Poison on a real broker: telemetry of 50,000 levels of nesting, bytes that are not UTF-8, junk on the by-job
topic, among good messages. A Faust worker must store every good message exactly as `gpufleet replay` does,
dead-letter each bad one with its reason and offset, and never crash its agents (the message would come again
and again, and every node of its partition would go unmonitored)."""
import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from test_parity import same_rows
from test_workers import CONTROL_KEY, FAR, TABLES, Workers, gpufleet, wait_until

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.contracts.telemetry import end_of_stream
from gpufleet.sql.store import Store
from gpufleet.streams.kafka import consume, group_progress, produce, produce_to_every_partition

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# what another producer may write on any topic: a tombstone, a control message of a kind no gpufleet knows, and an
# end-of-stream marker not signed with the workers' kafka.control_key
FOREIGN = [None, json.dumps({"schema": "gpufleet.control.v1", "kind": "rewind", "to": 0}).encode(),
           end_of_stream(1.0)]
POISON = [b'{"a":' * 50_000 + b"1" + b"}" * 50_000, b"\xff\xfe not UTF-8", bytes(b for b in range(1, 256) if b != 10),
          b"[1,2,3]", b'{"schema":"gpufleet.telemetry.v2","ts":1767571200,"node":"n"}', b'"' + b"x" * 900_000 + b'"']


def node(line: bytes) -> str:
    """A good line's node (its key), or any key for poison."""
    try:
        return json.loads(line)["node"]
    except (ValueError, RecursionError, TypeError, KeyError):
        return "n"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A recording with poison between its lines, and what `gpufleet replay` makes of it."""
    tmp = tmp_path_factory.mktemp("poison")
    recent = (time.time() // 86400 - 1) * 86400
    sim = Simulation(FleetSpec(nodes=4, gpus_per_node=2, hours=1, seed=5, faults_per_kind=1, start=recent,
                               interval_s=10))
    lines = [json.dumps(m).encode() for m in sim.messages()]
    for i, bad in enumerate(POISON):
        lines.insert(60 + 150 * i, bad)
    path = tmp / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    dsn = f"chdb://{tmp / 'replay'}"
    out = gpufleet("replay", str(path), "--dsn", dsn, "--dead-letters", str(tmp / "dead.jsonl"),
                   env={**{k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}, **FAR})
    assert out.returncode == 0, out.stderr
    reader = subprocess.run([sys.executable, "-c", "import json, sys\nfrom gpufleet.sql.store import Store\n"
                             f"s = Store.connect({dsn!r}, 'gpufleet')\n"
                             f"print(json.dumps({{t: s.query(q) for t, q in {TABLES!r}.items()}}, default=str))"],
                            capture_output=True, text=True, timeout=300)     # chdb: one database per process
    assert reader.returncode == 0, reader.stderr
    rows = json.loads(reader.stdout)
    assert dict(rows["dead_letters"]) == {"invalid": len(POISON)}, rows["dead_letters"]
    return lines, rows


def test_a_worker_stores_every_good_message_and_dead_letters_the_poison(kafka_bootstrap, clickhouse_url, tmp_path,
                                                                       mixed):
    lines, expected = mixed
    workers = Workers(kafka_bootstrap, clickhouse_url, tmp_path)
    try:
        assert gpufleet("topics", env=workers.env).returncode == 0
        telemetry = f"{workers.prefix}.telemetry"
        good = [json.loads(line) for line in lines if line not in POISON]
        node_name = good[0]["node"]
        job = next(g["job"] for m in good for g in m["gpus"] if g.get("job"))
        # the state changelogs are read when the worker starts: foreign records there, under keys it will load
        for table, key in (("nodes", node_name), ("jobs", job), ("clocks", "node:0")):
            produce(kafka_bootstrap, f"{workers.app_id}-{table}-changelog", [(key, v) for v in FOREIGN[1:]] +
                    [(key + "-gone", None), (None, FOREIGN[2])])
        workers.start("a")
        wait_until(lambda: workers.telemetry_partitions("a") == {0, 1, 2, 3}, 120, "the worker to be assigned")
        keyed = [(node(line), line) for line in lines]
        keyed[100:100] = [(node_name, v) for v in FOREIGN]
        produce(kafka_bootstrap, telemetry, keyed)              # raw: `gpufleet publish` would refuse the poison
        junk = [b'{"a":' * 50_000 + b"}" * 50_000, b"\x00\x01", b'[{"job": 7}]', b'[{"watermarks": {"x": 1}}]',
                *FOREIGN]
        produce(kafka_bootstrap, f"{telemetry}.by-job", [("j", v) for v in junk])
        produce_to_every_partition(kafka_bootstrap, telemetry, end_of_stream(time.time(), key=CONTROL_KEY.encode()))
        workers.processed()
        store = Store.connect(clickhouse_url, workers.database)
        try:
            for table, sql in TABLES.items():
                got = json.loads(json.dumps(store.query(sql), default=str))
                if table == "dead_letters":                     # and 3 changelog values no gpufleet saved
                    assert dict(got) == {"invalid": len(POISON) + len(FOREIGN) + len(junk) + 3}, got
                else:
                    assert same_rows(got, expected[table]), (table, len(got), len(expected[table]))
        finally:
            store.close()
        dead = [json.loads(v) for _, v in consume(kafka_bootstrap, f"{telemetry}.dlq",
                                                  f"check-{uuid.uuid4().hex[:6]}", idle_timeout_s=5, to_end=True)]
        assert len(dead) == len(POISON) + len(FOREIGN) + len(junk) + 3
        assert {d["source"].rsplit("/", 2)[0] for d in dead} == {telemetry, f"{telemetry}.by-job", "nodes changelog",
                                                                 "jobs changelog", "clocks changelog"}
        assert sum("tombstone" in d["reason"] for d in dead) == 2
        assert sum("'rewind' is not a control message" in d["reason"] for d in dead) == 1
        assert sum("kafka.control_key" in d["reason"] for d in dead) == 1
        # every partition of both stream topics committed at its end: nothing holds a partition
        progress = group_progress(kafka_bootstrap, workers.app_id, [telemetry, f"{telemetry}.by-job"])
        assert all(committed == end for _, _, committed, end in progress), progress
        assert any("recursion" in d["reason"] or "nested" in d["reason"] for d in dead)
        text = workers.metrics("a")
        assert f'gpufleet_worker_dead_letters_total{{reason_code="invalid",stage="node"}} ' \
               f'{float(len(POISON) + len(FOREIGN) + 2)}' in text, text            # and the nodes, clocks changelogs
        assert f'gpufleet_worker_dead_letters_total{{reason_code="invalid",stage="job"}} {float(len(junk) + 1)}' in text
        log = (tmp_path / "a.log").read_text()
        assert "Traceback" not in log and "RecursionError" not in log and "crashed" not in log.lower(), log[-3000:]
    finally:
        workers.stop_all()


def test_publish_sends_every_good_line_and_refuses_the_poison_by_line_number(kafka_bootstrap, tmp_path, mixed):
    lines, _ = mixed
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    prefix = f"p{uuid.uuid4().hex[:8]}"
    env = {"PATH": "/usr/bin:/bin", "GPUFLEET_KAFKA__BOOTSTRAP": kafka_bootstrap,
           "GPUFLEET_KAFKA__TELEMETRY_TOPIC": f"{prefix}.telemetry"}
    out = gpufleet("publish", str(path), "--dead-letters", str(tmp_path / "dead.jsonl"), env=env)
    assert out.returncode == 1, out.stderr
    bad_lines = [i for i, line in enumerate(lines, 1) if line in POISON]
    assert f"refused {len(POISON)} lines" in out.stderr and f"mixed.jsonl:{bad_lines[0]}: invalid" in out.stderr
    dead = [json.loads(x) for x in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [int(d["source"].rsplit(":", 1)[1]) for d in dead] == bad_lines
    sent = list(consume(kafka_bootstrap, f"{prefix}.telemetry", f"check-{uuid.uuid4().hex[:6]}", idle_timeout_s=5,
                        to_end=True))
    assert sorted(v for _, v in sent) == sorted(line for line in lines if line not in POISON)
