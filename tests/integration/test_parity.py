"""The same telemetry through Kafka (shuffled within the lateness, some repeated) and through the embedded
mode (in order) gives the same stored rollups, idle windows and events."""
import json
import math
import random
import time

import pytest

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.streams import embedded
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.kafka import consume, produce
from gpufleet.streams.pipeline import Driver, Pipeline
from gpufleet.streams.sink import Sink

pytestmark = pytest.mark.integration

CFG = StreamConfig(lateness_s=30)

# The queries a user would run; ClickHouse sums floats in insert order, so they are compared
# to a relative 1e-9 (see same_rows).
QUERIES = {
    "gpu rollups": "SELECT * FROM gpu_rollup_1m ORDER BY gpu_uuid, minute",
    "node rollups": "SELECT * FROM node_rollup_1m ORDER BY node, minute",
    "pool usage": """SELECT minute, pool, gpus, rented_gpus, util_pct, rented_util_pct,
                            util_max_pct, power_w, mem_used_bytes FROM pool_usage_1m
                     ORDER BY pool, minute""",
    "tenant usage": """SELECT minute, tenant, pool, gpus, util_pct, power_w
                       FROM tenant_usage_1m ORDER BY tenant, pool, minute""",
    "idle windows": "SELECT * FROM idle_windows ORDER BY gpu_uuid, started_at",
    "job rollups": "SELECT * FROM job_rollup_1m ORDER BY job, minute",
    "alerts": "SELECT * FROM alerts ORDER BY id, status",
    "raw samples": "SELECT count(), uniqExact(gpu_uuid, ts), sum(util_pct) FROM gpu_samples",
    "billing ledger": "SELECT * FROM billing_ledger ORDER BY gpu_uuid, tenant, job, period_start",
}


def same_rows(got: list, expected: list) -> bool:
    """Equal rows, floats equal to a relative 1e-9 (sums over rows inserted in another order)."""
    def same(a, b):
        if isinstance(a, float) and isinstance(b, float):
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
        return a == b
    return len(got) == len(expected) and all(
        len(g) == len(e) and all(same(a, b) for a, b in zip(g, e)) for g, e in zip(got, expected))


def shuffled_with_repeats(messages: list[dict], lateness_s: float, seed: int) -> list[dict]:
    """Arrival order: each message delayed by up to 90% of the lateness; 3% sent twice, shortly after."""
    rng = random.Random(seed)
    arrivals = [(m["ts"] + rng.uniform(0, 0.9 * lateness_s), i, m) for i, m in enumerate(messages)]
    arrivals += [(m["ts"] + rng.uniform(0, 0.9 * lateness_s), -i - 1, m)
                 for i, m in enumerate(messages) if rng.random() < 0.03]
    arrivals.sort(key=lambda a: (a[0], a[1]))
    return [m for _, _, m in arrivals]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    recent = (time.time() // 86400 - 1) * 86400
    sim = Simulation(FleetSpec(nodes=4, gpus_per_node=4, hours=3, seed=11, faults_per_kind=1, start=recent))
    path = tmp_path_factory.mktemp("parity") / "telemetry.jsonl"
    messages = list(sim.messages())
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return path, messages


def run_embedded(path, store):
    pipeline, events = Pipeline(CFG), embedded.JsonLines(None)
    collected = []
    events.write = collected.extend
    embedded.run(embedded.file_source(str(path)), pipeline, Sink(store, max_rows=20_000), events)
    return pipeline, collected


def test_kafka_shuffled_equals_embedded_ordered(fleet, embedded_store, server_store, kafka_bootstrap, topic,
                                                cpu_burner):
    path, messages = fleet
    reference, ref_events = run_embedded(path, embedded_store)

    arrival = shuffled_with_repeats(messages, CFG.lateness_s, seed=3)
    assert [m["ts"] for m in arrival] != sorted(m["ts"] for m in arrival)
    name = topic(partitions=4)
    produced = produce(kafka_bootstrap, name, ((m["node"], json.dumps(m).encode()) for m in arrival))
    assert produced == len(arrival) > len(messages)

    pipeline, kafka_events = Pipeline(CFG, driver=Driver(partitions=4)), []     # four partitions, however far apart
    events = embedded.JsonLines(None)
    events.write = kafka_events.extend
    source = consume(kafka_bootstrap, name, f"parity-{name}", stop_after=produced, idle_timeout_s=30)
    n = embedded.run(source, pipeline, Sink(server_store, max_rows=7_000), events)

    assert n == produced
    assert pipeline.out.counts["duplicates"] == produced - len(messages)
    assert pipeline.out.counts["dead_late"] == 0 and pipeline.out.counts["gpu_samples"] == \
        reference.out.counts["gpu_samples"]
    for what, sql in QUERIES.items():
        expected = embedded_store.query(sql)
        assert expected, f"{what}: the embedded run stored nothing"
        got = server_store.query(sql)
        assert same_rows(got, expected), (what, [(g, e) for g, e in zip(got, expected) if g != e][:3])
    assert sorted(map(json.dumps, kafka_events)) == sorted(map(json.dumps, ref_events))
    kinds = {e.get("kind") for e in ref_events}
    assert "idle" in kinds and any(e["schema"] == "gpufleet.billing.v1" for e in ref_events)


def test_a_group_is_anchored_at_the_start_of_partitions_it_never_committed(kafka_bootstrap, topic):
    from confluent_kafka import Consumer, TopicPartition

    from gpufleet.streams.kafka import anchor_offsets
    name = topic(partitions=3)
    produce(kafka_bootstrap, name, [(f"node-{i}", b"{}") for i in range(30)])
    group = f"anchor-{time.time_ns()}"
    assert anchor_offsets(kafka_bootstrap, group, [name]) == 3
    assert anchor_offsets(kafka_bootstrap, group, [name]) == 0          # committed now: left alone
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition(name, p) for p in range(3)], timeout=10)
        assert [tp.offset for tp in committed] == [0, 0, 0]
    finally:
        c.close()
