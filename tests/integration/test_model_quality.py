"""Models hold their figures on fleets never used in training: simulated seeds, and the held-out family.

The full-size evaluation (`make eval`: simulated seed 9001 and five held-out fleets) is in QUALITY.md;
these are the same goals at a size `make test` can afford, less the two goals on the evaluation's size.
Where QUALITY.md says a goal is missed, the test holds the figure measured then (less a small margin),
so that quality cannot drop further unnoticed.
"""
import json
import sys
from pathlib import Path

import pytest
from alert_checks import contradictions

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.models.artifact import Model
from gpufleet.models.baselines import evaluate_recording
from gpufleet.models.evaluate import goals
from gpufleet.streams.recording import record, train_on_simulations

pytestmark = pytest.mark.slow


def size_goal(goal: str) -> bool:
    """The two goals on the evaluation's size (faults of each kind, GPU-hours), which a test fleet is below."""
    return goal.endswith(" faults") or (goal.startswith("at least ") and goal.endswith(" GPU-hours"))


DETECTED = ("straggler", "io_starvation", "memory_leak")
# goals the packaged model misses on seed 503 (QUALITY.md), each with the floor it must keep
# (stragglers 0.857, 0.897 before the threshold was tuned on scores of trees that had not seen the fleet; leaks meet
# F1 0.9 since runaways are paged at once: 0.933, 0.857 before, 0.72 before urgent windows near the OOM)
MISSED_ON_503 = {"straggler: F1": 0.85,
                 # 0.733 since a job of light usual work is judged once it fell a third of it (QUALITY.md), 0.593
                 # before, 0.574 before a GPU handed to another job was judged by the new job's samples, 0.549
                 # before the IO trees were trained on GPUs starved at their fed pace
                 "io_starvation: F1": 0.7,
                 "memory_leak: faults growing an hour or more alerted within 60 min": None,  # 4 of 6 (67%)
                 # 10 of 11: one input pipeline starved of host CPU (87% busy) beside 0.84 GB/s of its training
                 # job's all-reduce traffic is named network
                 "io_starvation: cause named as its fault's": None,
                 "false alerts <= 1 per 1,000 GPU-hours": None,                # 1.95 (3.3 before)
                 # 10 of 13 (77%) when first measured (issue 58): leaks cleared while their growth paused and
                 # fired again count against it; the goal is 95%, the floor below keeps what is reached
                 "memory_leak: resolution says how the fault ended": None}


def scored(model: Model, spec: FleetSpec) -> tuple[dict, object]:
    sim = Simulation(spec)
    rec = record(sim.messages(), sim.labels(), model=model)
    return evaluate_recording(rec), rec


def test_the_packaged_model_holds_its_goals_on_a_fleet_it_never_saw():
    model = Model.default()
    seen = {s["seed"] for s in model.metadata["trained_on"]["simulated"]}
    spec = FleetSpec(nodes=16, gpus_per_node=8, hours=12, seed=503, faults_per_kind=16)
    assert spec.seed not in seen
    reports, rec = scored(model, spec)
    det = reports["detectors"]
    assert all(det.kinds[k].faults >= 16 for k in DETECTED)
    failed = [(goal, value) for goal, ok, value in goals(reports) if not ok and not size_goal(goal)
              and not any(goal.startswith(m) for m in MISSED_ON_503)]
    assert not failed, json.dumps(failed)
    for kind in DETECTED:
        floor = MISSED_ON_503.get(f"{kind}: F1", 0.9)
        assert det.kinds[kind].f1 >= floor, (kind, det.kinds[kind].f1)
    assert det.kinds["memory_leak"].leak_early_share >= 0.75
    assert (det.kinds["memory_leak"].ending_agreement or 0) >= 0.7, det.kinds["memory_leak"].endings_checked
    assert det.kinds["memory_leak"].precision >= 0.9
    assert det.false_per_1000h() <= 4.0                     # measured: 1.95 (3.3 before); the goal is 1
    alerts = [a for a in rec.alerts if a["status"] == "firing" and a["kind"] == "straggler"]
    assert alerts and all(a["summary"] and a["evidence"]["peers"] >= 1 for a in alerts)
    said = [(a["summary"], contradictions(a)) for a in rec.alerts if contradictions(a)]
    assert not said, said


def test_a_model_trained_on_one_seed_finds_the_faults_of_another(tmp_path):
    # one fleet of the packaged recipe's four: weaker than the packaged model, but it must carry over
    model = train_on_simulations([FleetSpec(nodes=16, gpus_per_node=8, hours=12, seed=601, faults_per_kind=12)])
    path = tmp_path / "model.json"
    model.save(path)
    model = Model.load(path)                              # what is used is what was saved
    assert [s["seed"] for s in model.metadata["trained_on"]["simulated"]] == [601]
    reports, _ = scored(model, FleetSpec(nodes=16, gpus_per_node=8, hours=12, seed=602, faults_per_kind=12))
    det, baseline = reports["detectors"], reports["threshold baseline"]
    # leaks are the weakest kind of a one-fleet model (measured: recall 0.75, F1 0.69; short leaks of 10-20
    # minutes and slow ones far from the OOM are missed)
    # IO starvation is judged after a fall from the usual work, which the simulator's starved inference services
    # at low load do not show (measured: recall 0.5, F1 0.58; QUALITY.md)
    recall = {"straggler": 0.8, "io_starvation": 0.4, "memory_leak": 0.7}
    f1 = {"straggler": 0.8, "io_starvation": 0.5, "memory_leak": 0.65}
    for kind in DETECTED:
        assert det.kinds[kind].faults >= 12
        assert det.kinds[kind].recall >= recall[kind], (kind, det.kinds[kind].recall)
        assert det.kinds[kind].f1 >= f1[kind], (kind, det.kinds[kind].f1)
        assert det.kinds[kind].f1 > baseline.kinds[kind].f1, kind
    # the goal is 1, for a model trained on four fleets; measured 7.2 with feature set 4 (IO starvation reads
    # the fall from the usual work, not PCIe or memory: more false IO incidents beside a starved job)
    assert det.false_per_1000h() <= 8.0


def test_the_packaged_model_on_a_held_out_fleet(tmp_path):
    """A small fleet of the held-out family (bench/evalfleet), never used to train or tune: the figures
    measured when the packaged model was made (QUALITY.md), less a margin. Most of its goals are missed."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))       # bench/ sits at the repository root
    from bench.evalfleet import FleetSpec as HeldOutSpec
    from bench.evalfleet import generate

    telemetry, labels = tmp_path / "t.jsonl", tmp_path / "l.jsonl"
    generate(HeldOutSpec(seed=7, nodes=12, hours=6, stragglers=10, io_starvations=10, leaks=10,
                         intervals=(2, 5, 10, 15, 30, 60)), telemetry, labels)
    with open(labels) as f:
        truth = [json.loads(line) for line in f]
    with open(telemetry) as f:
        rec = record(f, truth, model=Model.default())
    det = evaluate_recording(rec, with_baselines=False)["detectors"]
    assert all(det.kinds[k].faults >= 10 for k in DETECTED)
    assert det.kinds["idle"].f1 == 1.0 and det.kinds["idle"].faults >= 50     # the idle rule is exact
    # measured: 0.725, 0.75, 0.952 (leaks 0.842 before runaways were paged at once). IO starvation was 0.889 with
    # the trees before, which were chosen comparing candidates on this very fleet; the IO trees of now do better on
    # the full-size held-out family (QUALITY.md)
    floors = {"straggler": 0.7, "io_starvation": 0.7, "memory_leak": 0.9}
    for kind, floor in floors.items():
        assert det.kinds[kind].f1 >= floor, (kind, det.kinds[kind].f1)
        assert det.kinds[kind].precision >= 0.8, (kind, det.kinds[kind].precision)
    # one fault, one page; the cause named is the fault's; the words match the numbers. Measured at 6044176:
    # straggler causes 5 of 6 (0.83), so the 95 % goal is missed here as on the full-size held-out family (77 % of
    # 31, QUALITY.md: power-brake and thermal stragglers on nodes that report no throttle reason)
    cause_floor = {"straggler": 0.8}
    for kind in DETECTED:
        assert det.kinds[kind].incidents_per_fault <= 1.1, (kind, det.kinds[kind].incidents_per_fault)
        if det.kinds[kind].cause_agreement is not None:
            assert det.kinds[kind].cause_agreement >= cause_floor.get(kind, 0.95), (kind,
                                                                                  det.kinds[kind].cause_agreement)
    said = [(a["summary"], contradictions(a)) for a in rec.alerts if contradictions(a)]
    assert not said, said
    # measured: 1.99, one false straggler incident (an A100 node of a job on H100s, its clock at 79% of its maximum
    # with no throttle reason), so the goal of 1 is missed here; 0 while the job stage counted this job's epochs
    # in 30 s and 60 s by turns and forgot its incidents (3.97 before the lockstep rule)
    assert det.false_per_1000h() <= 2.0
