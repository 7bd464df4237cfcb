"""Any record at all on the topics and changelogs a worker reads ends stored or dead-lettered with its reason, and
is acknowledged: a tombstone, a control message of an unknown kind, an end-of-stream marker that its producer could
not sign, junk in a changelog. The good messages around them give replay's rows, events and billing."""
import json

import pytest
from test_distributed import Log, P, Worker, by_partition, catch_up, reference, stored

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.contracts.telemetry import control_problem, end_of_stream
from gpufleet.streams.sink import alert_row

UNKNOWN = json.dumps({"schema": "gpufleet.control.v1", "kind": "rewind", "to": 0}).encode()
FOREIGN = [None, UNKNOWN, end_of_stream(0.0), end_of_stream(0.0, key=b"another key")]


class Acking(Worker):
    def __init__(self, log):
        super().__init__(log)
        self.acked: dict[tuple[str, int], set[int]] = {}

    async def ack(self, ev):
        m = ev.message
        self.acked.setdefault((m.topic, m.partition), set()).add(m.offset)


@pytest.fixture(scope="module")
def fleet():
    return list(Simulation(FleetSpec(nodes=4, gpus_per_node=2, hours=1, seed=4, faults_per_kind=1,
                                     training_share=0.7)).messages())


def test_foreign_records_on_every_topic_and_changelog_are_dead_lettered_and_acknowledged(fleet):
    ref_rows, ref_events = reference(fleet)
    log, parts, read = Log(), by_partition(fleet), [0] * P
    worker = Acking(log)
    nodes = sorted({m["node"] for m in fleet})
    # junk in each changelog before anything runs: another program wrote there
    worker.tables["nodes"][nodes[0].encode()] = UNKNOWN
    worker.tables["clocks"][b"node:1"] = b"\x00\x01 not a state"
    worker.tables["jobs"][sorted({g["job"] for m in fleet for g in m["gpus"] if g.get("job")})[0].encode()] = b"[]"
    for p in range(P):
        for i, value in enumerate(FOREIGN):           # spread through the partition, before its end marker
            parts[p].insert(5 + i * 40, value)
        worker.feed(worker.node, "telemetry", p, parts[p], 0)
        for value in (None, UNKNOWN):                  # the by-job topic is input like any other
            log.partition("by-job", p).insert(0, value)
    catch_up(worker, log, read)

    rows, alerts = stored(worker.store)
    for table, expected in ref_rows.items():
        assert sorted(map(repr, rows[table])) == sorted(map(repr, expected)), table
    assert sorted(set(alerts)) == sorted({alert_row(e) for e in ref_events if e["schema"] != "gpufleet.billing.v1"})
    dead = worker.store.rows["dead_letters"]
    reasons = [r for r in map(str, dead)]
    assert len(dead) == len(FOREIGN) * P + 2 * P + 3, reasons
    assert sum("tombstone" in r for r in reasons) == 2 * P
    assert sum("'rewind' is not a control message" in r for r in reasons) == P
    assert sum("this worker's kafka.control_key" in r for r in reasons) == 2 * P
    assert sum("saved state" in r for r in reasons) == 3
    for p in range(P):                                 # every record acknowledged: the offsets can be committed
        assert worker.acked[("telemetry", p)] == set(range(len(parts[p]))), p
        assert worker.acked[("by-job", p)] == set(range(len(log.partition("by-job", p)))), p


def test_a_control_message_is_acted_on_only_when_known_and_signed_with_the_workers_key():
    assert control_problem(end_of_stream(1.0, 2.0, key=b"k"), b"k") is None
    assert "has none" in control_problem(end_of_stream(1.0, 2.0, key=b"k"), None)
    assert "does not hold it" in control_problem(end_of_stream(1.0, 2.0), b"k")
    forged = json.loads(end_of_stream(1.0, 2.0, key=b"k"))
    forged["newest"] = 9e9                              # a signed marker changed on the way is not the one signed
    assert "does not hold it" in control_problem(json.dumps(forged), b"k")
    assert "'rewind' is not a control message" in control_problem(UNKNOWN, b"k")
