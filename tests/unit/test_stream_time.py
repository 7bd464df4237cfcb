"""The embedded pipeline's results depend on the telemetry only, never on how it arrived: shuffled within the
allowed lateness, or read from a log of several partitions far apart (as a consumer under load reads them), nodes
that fall silent for longer than ``stream.silent_after_s`` and nodes that come back just before it give the same
rows and events as the recording read in order."""
import json
import random
import zlib

import pytest

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.pipeline import Driver, Pipeline

CFG = StreamConfig(lateness_s=30)
P = 4


@pytest.fixture(scope="module")
def fleet():
    messages = list(Simulation(FleetSpec(nodes=6, gpus_per_node=1, hours=2, seed=13, faults_per_kind=1)).messages())
    t0 = messages[0]["ts"]
    gaps = {"node-000": (3600, 700), "node-001": (3900, 605), "node-002": (4200, 580)}   # silent, just, not quite

    def kept(m):
        start, length = gaps.get(m["node"], (0, 0))
        return not t0 + start <= m["ts"] < t0 + start + length
    return [m for m in messages if kept(m)]


def run(arrivals, partitions=None):
    p = Pipeline(CFG, driver=Driver(partitions=partitions))
    for partition, offset, m in arrivals:
        p.submit(json.dumps(m), f"t/{partition}/{offset}", position=None if partition is None else (partition, offset))
    p.flush()
    rows = {t.name: sorted(map(repr, r)) for t, r in p.out.rows.items()}
    return p.out.counts, rows, sorted(json.dumps(e, sort_keys=True) for e in p.out.events)


def shuffled(messages, seed):
    rng = random.Random(seed)
    arrivals = sorted((m["ts"] + rng.uniform(0, 0.9 * CFG.lateness_s), i, m) for i, m in enumerate(messages))
    return [(None, i, m) for i, (_, _, m) in enumerate(arrivals)]


def partitions_far_apart(messages, seed):
    """Each partition in order, the partitions interleaved in chunks of 1 to 2,000 messages: one may be hours
    ahead of another."""
    parts = [[] for _ in range(P)]
    for m in messages:
        parts[zlib.crc32(m["node"].encode()) % P].append(m)
    rng, pos, out = random.Random(seed), [0] * P, []
    while any(pos[p] < len(parts[p]) for p in range(P)):
        p = rng.randrange(P)
        for m in parts[p][pos[p]:pos[p] + rng.choice([1, 50, 500, 2000])]:
            out.append((p, pos[p], m))
            pos[p] += 1
    return out


def test_any_arrival_order_gives_the_rows_and_events_of_the_recording_in_order(fleet):
    counts, rows, events = run([(None, i, m) for i, m in enumerate(fleet)])
    assert counts["silent_nodes"] == 2                         # 700 s and 605 s of silence; 580 s is not
    assert any("no_telemetry" in e or "no telemetry" in e for e in events)    # an incident the silence ended
    for seed in range(2):
        got = run(shuffled(fleet, seed))
        assert got[0]["dead_late"] == 0 and got[0]["silent_nodes"] == 2
        assert got[1] == rows and got[2] == events, seed
    for seed in range(3):
        got = run(partitions_far_apart(fleet, seed), partitions=P)
        assert got[0]["dead_late"] == got[0]["job_late"] == 0, (seed, got[0])
        assert got[1] == rows and got[2] == events, seed
