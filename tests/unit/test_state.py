"""Processor state is typed, saved by field name under a version, and restored exactly; other versions are refused."""
import json

import pytest

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.contracts.state import StateError, load_fields, pack, save_fields, unpack
from gpufleet.models.detectors import JobDetectors, NodeDetectors, io_starvation, memory_leak, straggler
from gpufleet.models.detectors.base import Incident, Incidents, Seen
from gpufleet.streams.billing.metering import GpuMeter, Metering, Record, Sample
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.eventtime import Gate
from gpufleet.streams.idle import IdleTracker, Run
from gpufleet.streams.jobs import GpuSums, JobMinute, JobProcessor
from gpufleet.streams.node import NodeProcessor
from gpufleet.streams.pipeline import Driver, Pipeline
from gpufleet.streams.rollups import GpuMinutes, MinuteRollups, NodeMinute


@pytest.fixture(scope="module")
def running():
    """A pipeline stopped mid-stream, with open idle runs, incidents, leak histories and jobs in flight."""
    spec = FleetSpec(nodes=6, gpus_per_node=4, hours=2.5, seed=6, faults_per_kind=2, training_share=0.6)
    p = Pipeline(StreamConfig(lateness_s=30))
    msgs = list(Simulation(spec).messages())
    for i, m in enumerate(msgs[: int(len(msgs) * 0.8)]):
        p.submit(m, str(i), position=(0, i))
    return p


def roundtrip(state):
    return json.loads(json.dumps(state))


def test_every_node_and_job_state_round_trips_exactly(running):
    assert running.nodes and running.jobs
    for name, node in running.nodes.items():
        saved = roundtrip(node.to_state())
        again = NodeProcessor.from_state(name, saved)
        assert again.to_state() == saved
        assert saved["v"] and isinstance(saved["gate"], dict)
    for name, job in running.jobs.items():
        saved = roundtrip(job.to_state())
        assert JobProcessor.from_state(name, saved).to_state() == saved


def parts(running):
    """Every nested state value in the running pipeline, with its class."""
    found = []
    for node in running.nodes.values():
        leaks, io = node.detect.detectors["memory_leak"], node.detect.detectors["io_starvation"]
        found += [(Gate, node.gate), (MinuteRollups, node.rollups), (NodeMinute, node.rollups.node),
                  (IdleTracker, node.idle), (NodeDetectors, node.detect), (memory_leak.Detector, leaks),
                  (io_starvation.Detector, io), (Incidents, leaks.incidents), (Incidents, io.incidents)]
        found += [(GpuMinutes, node.rollups.gpus)]
        found += [(Run, r) for r in node.idle.runs.values()]
        found += [(Metering, node.meter)] + [(GpuMeter, m) for m in node.meter.gpus.values()]
        found += [(Sample, m.pending) for m in node.meter.gpus.values() if m.pending is not None]
        found += [(Record, r) for m in node.meter.gpus.values() for r in m.records]
        found += [(memory_leak.MemoryTrack, m) for m in leaks.tracks.values()]
        found += [(Incident, i) for d in (leaks, io) for i in d.incidents.by_key.values()]
    for job in running.jobs.values():
        stragglers = job.detect.detectors["straggler"]
        found += [(JobMinute, job.acc), (JobDetectors, job.detect), (straggler.Detector, stragglers),
                  (Incidents, stragglers.incidents)]
        found += [(GpuSums, s) for s in job.acc.gpus.values()]
        found += [(Incident, i) for i in stragglers.incidents.by_key.values()]
    return found


@pytest.mark.parametrize("cls", [Gate, MinuteRollups, NodeMinute, GpuMinutes, IdleTracker, Run, NodeDetectors,
                                 memory_leak.Detector, io_starvation.Detector, Incidents, Incident,
                                 memory_leak.MemoryTrack, JobMinute, GpuSums, JobDetectors, straggler.Detector,
                                 Metering, GpuMeter, Sample, Record])
def test_each_state_class_round_trips_by_name(running, cls):
    values = [v for c, v in parts(running) if c is cls]
    assert values, f"the running fleet holds no {cls.__name__} to check"
    for v in values:
        if cls in (Incidents, Incident):     # what an incident saw is read back as its kind's record
            saved = roundtrip(v.to_state())
            again = cls.from_state(saved, seen_of(v))
            assert roundtrip(again.to_state()) == saved
            assert [type(i.info) for i in incidents_of(again)] == [seen_of(v)] * len(incidents_of(v))
        elif hasattr(v, "to_state"):
            saved = roundtrip(v.to_state())
            assert isinstance(saved, dict)
            assert roundtrip(cls.from_state(saved).to_state()) == saved
        else:       # flat dataclasses, saved with their holder by field name
            saved = roundtrip(save_fields(v))
            assert save_fields(load_fields(cls, saved, cls.__name__)) == saved


def incidents_of(v) -> list[Incident]:
    return list(v.by_key.values()) if isinstance(v, Incidents) else [v]


def seen_of(v) -> type[Seen]:
    """The record an incident (or a tracker's first) saw: its kind's."""
    found = incidents_of(v)
    return type(found[0].info) if found else Seen


def test_a_restored_processor_goes_on_exactly_as_the_one_it_was_saved_from(running):
    spec = FleetSpec(nodes=6, gpus_per_node=4, hours=2.5, seed=6, faults_per_kind=2, training_share=0.6)
    msgs = list(Simulation(spec).messages())
    rest = msgs[int(len(msgs) * 0.8):]
    node = sorted(running.nodes)[0]
    a = NodeProcessor.from_state(node, roundtrip(running.nodes[node].to_state()))
    b = NodeProcessor.from_state(node, roundtrip(running.nodes[node].to_state()))
    p1, p2 = (Pipeline(StreamConfig(lateness_s=30), driver=Driver(route_jobs=False)) for _ in range(2))
    p1.nodes[node], p2.nodes[node] = a, b
    for m in rest:
        if m["node"] == node:
            p1.submit(m, "x")
            p2.submit(json.loads(json.dumps(m)), "y")
    p1.flush()
    p2.flush()
    assert p1.out.events == p2.out.events
    assert {t.name: r for t, r in p1.out.rows.items()} == {t.name: r for t, r in p2.out.rows.items()}


def test_a_state_of_another_version_is_refused_with_what_to_do(running):
    name, node = next(iter(running.nodes.items()))
    saved = roundtrip(node.to_state())
    with pytest.raises(StateError, match=r"node .*version 4, this gpufleet reads version 5.*worker.app_id"):
        NodeProcessor.from_state(name, {**saved, "v": 4})
    job, proc = next(iter(running.jobs.items()))
    old = [{}, None, None, [{}, 0, []], None, None, []]          # the positional layout before version 1
    with pytest.raises(StateError, match=rf"job {job}: saved state has version None"):
        JobProcessor.from_state(job, old)
    with pytest.raises(StateError, match="lacks"):
        NodeProcessor.from_state(name, {k: v for k, v in saved.items() if k != "idle"})


def test_a_saved_record_missing_a_field_or_with_a_foreign_one_is_refused():
    run = Run(start=1.0, last=2.0, interval=5.0, tenant="t", job=None, index=0, pool=None, price=2.0)
    saved = save_fields(run)
    assert load_fields(Run, saved, "idle run") == run
    with pytest.raises(StateError, match=r"idle run: .*\['detected'\]"):
        load_fields(Run, {k: v for k, v in saved.items() if k != "detected"}, "idle run")
    with pytest.raises(StateError, match="unknown fields"):
        load_fields(Run, {**saved, "colour": 1}, "idle run")


def test_a_changelog_value_is_packed_to_a_fraction_of_its_json_and_read_back_exactly(running):
    for name, node in running.nodes.items():
        state = node.to_state()
        plain = json.dumps(state).encode()
        packed = pack(state)
        assert len(packed) * 3 < len(plain), f"node {name}: {len(packed)} packed bytes against {len(plain)}"
        assert unpack(packed, name) == roundtrip(state)
        assert NodeProcessor.from_state(name, unpack(packed, name)).to_state() == roundtrip(state)


def test_state_saved_as_plain_json_by_an_earlier_version_is_still_read(running):
    name, node = next(iter(running.nodes.items()))
    plain = json.dumps(node.to_state()).encode()
    assert unpack(plain, name) == roundtrip(node.to_state())
    assert unpack(b"[1, 2]", "clock") == [1, 2]


@pytest.mark.parametrize("raw", [b"x\x01garbage", b"not json", pack("ok")[:-3]])
def test_a_changelog_value_that_is_neither_packed_nor_json_is_refused_with_what_to_do(raw):
    with pytest.raises(StateError, match=r"node n7: saved state is neither packed nor plain JSON .*worker.app_id"):
        unpack(raw, "node n7")
