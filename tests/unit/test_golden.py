"""A recorded replay gives the same events, byte for byte, and the same table rows as the recorded reference.

The fleet is the one `make demo` simulates (8 nodes x 8 GPUs, 6 hours, seed 1) on a fixed start. It goes
through the embedded pipeline twice: in order, and shuffled within the allowed lateness with repeats.
The reference (tests/data/golden.json) holds a SHA-256 of the events as `replay --events` writes them and
one per table of the rows handed to the store (sorted), recorded when the behaviour was last changed on
purpose. A change of behaviour must show here; when it is meant, record the reference again with

    GPUFLEET_RECORD_GOLDEN=1 .venv/bin/pytest tests/unit/test_golden.py

and say why in the commit.
"""
import hashlib
import json
import os
import random
from pathlib import Path

import pytest
from alert_checks import contradictions

from gpufleet.collectors.simulator import DEFAULT_START, FleetSpec, Simulation
from gpufleet.contracts.events import Alert, Billing
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.pipeline import Pipeline

pytestmark = pytest.mark.slow
GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden.json"
SPEC = FleetSpec(nodes=8, gpus_per_node=8, hours=6, seed=1, faults_per_kind=2, start=DEFAULT_START)
CFG = StreamConfig()


def shuffled(messages: list[dict], lateness_s: float, seed: int) -> list[dict]:
    """Each message delayed by up to 90% of the lateness; 2% sent twice."""
    rng = random.Random(seed)
    arrivals = [(m["ts"] + rng.uniform(0, 0.9 * lateness_s), i, m) for i, m in enumerate(messages)]
    arrivals += [(m["ts"] + rng.uniform(0, 0.9 * lateness_s), -i - 1, m)
                 for i, m in enumerate(messages) if rng.random() < 0.02]
    arrivals.sort(key=lambda a: (a[0], a[1]))
    return [m for _, _, m in arrivals]


def digest(lines) -> str:
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode())
        h.update(b"\n")
    return h.hexdigest()


def run(messages: list[dict]) -> dict:
    pipeline = Pipeline(CFG)
    events: list[str] = []
    rows: dict[str, list[str]] = {}

    def drain() -> None:
        for table, new in pipeline.out.rows.items():
            rows.setdefault(table.name, []).extend(repr(tuple(r)) for r in new)
        for e in pipeline.out.events:
            # every event keeps its contract: gpufleet.alert.v1 or gpufleet.billing.v1
            (Billing if e["schema"] == "gpufleet.billing.v1" else Alert).model_validate(e)
            assert not contradictions(e), (e["summary"], contradictions(e))   # words that match the numbers
            events.append(json.dumps(e, separators=(",", ":")))
        pipeline.out.rows, pipeline.out.events = {}, []

    for i, m in enumerate(messages):
        pipeline.submit(json.dumps(m), f"golden:{i}")
        if i % 512 == 0:
            drain()
    pipeline.flush()
    drain()
    c = pipeline.out.counts
    return {"events": digest(events), "events_sorted": digest(sorted(events)), "event_count": len(events),
            "billing_records": c["billing_records"],
            "tables": {t: {"rows": len(r), "sha256": digest(sorted(r))} for t, r in sorted(rows.items())},
            "gpu_samples": c["gpu_samples"], "dead": sum(v for k, v in c.items() if k.startswith("dead_"))}


@pytest.fixture(scope="module")
def messages():
    return list(Simulation(SPEC).messages())


def test_in_order_replay_matches_the_recorded_reference(messages):
    got = run(messages)
    if os.environ.get("GPUFLEET_RECORD_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    expected = json.loads(GOLDEN.read_text())
    assert got["event_count"] > 0 and got["tables"], "the fleet must produce events and rows"
    assert got["billing_records"] > 0, "and billing records"
    assert got == expected


def test_shuffled_replay_with_repeats_matches_the_recorded_reference(messages):
    expected = json.loads(GOLDEN.read_text())
    got = run(shuffled(messages, CFG.lateness_s, seed=7))
    assert got["dead"] == 0
    assert got["tables"] == expected["tables"]
    assert (got["event_count"], got["events_sorted"]) == (expected["event_count"], expected["events_sorted"])
