"""What the detectors share: the registry, the model artifact, incidents, windows, scoring, wording."""
import json
import random
from dataclasses import replace

import pytest

from gpufleet.contracts.output import Output
from gpufleet.models import evaluate
from gpufleet.models.artifact import Model, ModelError
from gpufleet.models.detectors import KINDS, REGISTRY, io_starvation, memory_leak, straggler
from gpufleet.models.detectors.base import Incidents, Judge, Seen, StateError
from gpufleet.models.detectors.straggler import StragglerSeen


def test_every_detector_is_one_package_in_the_registry():
    for kind, entry in REGISTRY.items():
        m = entry.module
        assert m.KIND == kind and m.STAGE in ("node", "job") and m.LEVEL in ("gpu", "job")
        assert len(set(m.FEATURES)) == len(m.FEATURES) and entry.edge_s >= 0 and entry.persist_off >= 1
        assert entry.colour.startswith("#") and (entry.delay_goal_s is None or entry.delay_goal_s > 0)
        for part in ("Detector", "features", "applies", "decide", "describe", "baseline"):
            assert hasattr(m, part), (kind, part)


def test_the_packaged_model_loads_and_an_incompatible_one_is_refused(tmp_path):
    model = Model.default()
    assert set(model.kinds) == set(KINDS) and model.metadata
    doc = model.to_dict()
    bad = tmp_path / "old.json"
    bad.write_text(json.dumps(doc | {"feature_version": 0}))
    with pytest.raises(ModelError, match="feature set 0.*gpufleet model train"):
        Model.load(bad)
    renamed = json.loads(json.dumps(doc))
    renamed["kinds"]["straggler"]["features"][0] = "something_else"
    bad.write_text(json.dumps(renamed))
    with pytest.raises(ModelError, match="straggler detector expects features"):
        Model.load(bad)
    bad.write_text("{not json")
    with pytest.raises(ModelError, match="not JSON"):
        Model.load(bad)
    for damage, why in ((lambda t: t["l"].__setitem__(0, 0), "points outside its tree"),    # a loop
                        (lambda t: t["f"].__setitem__(0, 99), "points outside its tree"),
                        (lambda t: t["v"].pop(), "differ in length"),
                        (lambda t: t["t"].__setitem__(0, "x"), "points outside its tree")):
        broken = json.loads(json.dumps(doc))
        damage(broken["kinds"]["io_starvation"]["trees"][0])
        bad.write_text(json.dumps(broken))
        with pytest.raises(ModelError, match=f"io_starvation detector is damaged .*{why}"):
            Model.load(bad)
    newer = json.loads(json.dumps(doc))
    newer["kinds"]["memory_leak"]["warp_factor"] = 9
    bad.write_text(json.dumps(newer))
    with pytest.raises(ModelError, match=r"memory_leak detector has settings .*\['warp_factor'\].*newer gpufleet"):
        Model.load(bad)
    broken = json.loads(json.dumps(doc))
    del broken["kinds"]["io_starvation"]["trees"]
    bad.write_text(json.dumps(broken))
    with pytest.raises(ModelError, match=r"io_starvation detector lacks \['trees'\]"):
        Model.load(bad)
    older = json.loads(json.dumps(doc))              # made before urgent windows: none, and it loads
    del older["kinds"]["memory_leak"]["urgent_score"]
    bad.write_text(json.dumps(older))
    assert Model.load(bad).kinds["memory_leak"].urgent_score is None
    good = tmp_path / "m.json"
    model.save(good)
    assert Model.load(good).kinds["memory_leak"].trees == model.kinds["memory_leak"].trees


def test_incidents_fire_once_and_resolve_with_one_id():
    km = Model.untrained().kinds["straggler"]
    km.persist_on, km.persist_off = 2, 3
    inc, out = Incidents(), Output()

    def describe(status, info, st, resolved_at):
        return {"status": status, "started": st.started_at, "detected": st.detected_at, "resolved": resolved_at}

    for ts, positive in ((0, True), (30, False), (60, True), (90, True), (120, True), (150, False), (180, True),
                         (210, False), (240, False), (270, False), (300, False)):
        inc.observe("straggler:g", positive, ts, Seen(), Judge(km, out, describe))
    assert out.events == [{"status": "firing", "started": 60, "detected": 90, "resolved": None},
                          {"status": "resolved", "started": 60, "detected": 90, "resolved": 210}]   # when it cleared


def test_a_condition_that_clears_and_returns_within_the_hold_down_is_one_incident_with_its_flaps_counted():
    km = Model.untrained().kinds["straggler"]
    km.persist_on, km.persist_off, km.hold_down_s = 1, 2, 300.0
    inc, out = Incidents(), Output()

    def describe(status, info, st, resolved_at):
        return {"status": status, "started": st.started_at, "resolved": resolved_at, "flaps": st.flaps,
                "reason": st.reason}

    # fires at 0; clears at 60 (two negatives by 90, which would resolve without a hold-down); back at 240, within
    # 300 s of 60: the same incident; clears at 270 and stays clear: resolves once 300 s have passed, at 570
    for ts in range(0, 900, 30):
        inc.observe("straggler:g", ts < 60 or 240 <= ts < 270, ts, Seen(), Judge(km, out, describe))
    assert out.events == [{"status": "firing", "started": 0, "resolved": None, "flaps": 0, "reason": ""},
                          {"status": "resolved", "started": 0, "resolved": 270, "flaps": 1, "reason": "cleared"}]
    km.hold_down_s = 0.0
    inc, out = Incidents(), Output()
    for ts in range(0, 900, 30):
        inc.observe("straggler:g", ts < 60 or 240 <= ts < 270, ts, Seen(), Judge(km, out, describe))
    assert [e["status"] for e in out.events] == ["firing", "resolved", "firing", "resolved"]    # two pages


def test_a_closed_incident_says_why_and_a_pending_one_is_forgotten():
    km = Model.untrained().kinds["straggler"]
    km.persist_on, km.persist_off = 2, 2
    inc, out = Incidents(), Output()

    def describe(status, info, st, resolved_at):
        return {"status": status, "key": info.target, "resolved": resolved_at, "reason": st.reason}

    for key in ("straggler:a", "straggler:b"):
        inc.observe(key, True, 0, StragglerSeen(target=key), Judge(km, out, describe))
    inc.observe("straggler:a", True, 30, StragglerSeen(target="straggler:a"), Judge(km, out, describe))
    inc.close_all(45, describe, out, "no_telemetry")
    assert out.events == [{"status": "firing", "key": "straggler:a", "resolved": None, "reason": ""},
                          {"status": "resolved", "key": "straggler:a", "resolved": 45, "reason": "no_telemetry"}]
    assert not inc.by_key


def test_an_urgent_positive_opens_the_incident_at_once():
    km = Model.untrained().kinds["memory_leak"]
    km.persist_on, km.persist_off = 4, 2
    inc, out = Incidents(), Output()

    def describe(status, info, st, resolved_at):
        return {"status": status, "detected": st.detected_at}

    for ts, positive, urgent in ((0, True, False), (60, True, False), (120, True, True), (180, True, True)):
        inc.observe("memory_leak:g", positive, ts, Seen(), Judge(km, out, describe), urgent=urgent)
    assert out.events == [{"status": "firing", "detected": 120}]          # not 180, the fourth in a row


LABELS = [
    {"kind": "straggler", "level": "gpu", "node": "n1", "gpu_uuid": "g1", "gpus": ["g1"], "job": "j", "start": 1000,
     "end": 2000},
    {"kind": "straggler", "level": "node", "node": "n2", "gpu_uuid": None, "gpus": ["g2", "g3"], "job": "j",
     "start": 1000, "end": 2000},
    {"kind": "io_starvation", "level": "job", "node": "n3", "gpu_uuid": None, "gpus": ["g4"], "job": "j9",
     "start": 5000, "end": 6000},
    {"kind": "memory_leak", "level": "gpu", "node": "n1", "gpu_uuid": "g5", "gpus": ["g5"], "job": "j",
     "start": 0, "end": 4000, "oom_at": 4000},
    {"kind": "idle", "level": "gpu", "node": "n1", "gpu_uuid": "g6", "gpus": ["g6"], "job": "h", "start": 0,
     "end": 3000},
]


def fire(kind, at, i, **who):
    return {"kind": kind, "status": "firing", "id": f"{kind}{i}", "detected_at": at, "node": who.get("node"),
            "gpu_uuid": who.get("gpu"), "job": who.get("job")}


def test_scoring_follows_the_rule():
    alerts = [
        fire("straggler", 1100, 1, node="n1", gpu="g1"),           # match
        fire("straggler", 2500, 2, node="n1", gpu="g1"),           # within ten minutes after the end: match
        fire("straggler", 2700, 3, node="n1", gpu="g1"),           # too late: false
        fire("straggler", 1200, 4, node="n2", gpu="g3"),           # a GPU of the slow node: match
        fire("straggler", 1300, 5, node="n2"),                      # the node itself: match
        fire("io_starvation", 5100, 6, node="n3", job="j9"),       # the fault's job on that node: match
        fire("io_starvation", 5100, 7, node="n3", job="other"),    # another job: false
        fire("memory_leak", 3000, 8, node="n1", gpu="g5"),          # 1000 s before the OOM
        fire("idle", 650, 9, node="n1", gpu="g6"),
        {**fire("straggler", 1100, 1, node="n1", gpu="g1")},        # the same incident again (at least once)
        {**fire("straggler", 1150, 10, node="n1", gpu="g1"), "status": "resolved"},   # not an incident
    ]
    rep = evaluate.score(LABELS, alerts, gpu_hours=2000)
    s = rep.kinds["straggler"]
    assert (s.faults, s.incidents, s.matched_incidents, s.detected_faults) == (2, 5, 4, 2)
    assert s.precision == pytest.approx(0.8) and s.recall == 1.0 and s.f1 == pytest.approx(8 / 9)
    assert sorted(s.delays_s) == [100, 200]
    io = rep.kinds["io_starvation"]
    assert (io.incidents, io.matched_incidents, io.false_alerts) == (2, 1, 1)
    leak = rep.kinds["memory_leak"]
    assert leak.leak_long == 1 and leak.leak_leads_s == [1000] and leak.leak_early_share == 1.0
    assert rep.kinds["idle"].delays_s == [50]                           # from start plus the idle window
    assert rep.false_per_1000h() == pytest.approx(1000 * 2 / 2000)


def test_goals_count_pages_per_fault_and_hold_at_each_interval_on_its_own():
    flapping = [fire("straggler", 1100, 1, node="n1", gpu="g1"), fire("straggler", 1800, 2, node="n1", gpu="g1"),
                fire("straggler", 1200, 4, node="n2", gpu="g3")]
    rep = evaluate.score(LABELS, flapping, gpu_hours=2000)
    assert rep.kinds["straggler"].incidents_per_fault == 1.5              # 3 pages for 2 faults found
    met = {g: ok for g, ok, _ in evaluate.goals({"detectors": rep})}
    assert met["straggler: incidents per fault found <= 1.1"] is False
    once = evaluate.score(LABELS, [flapping[0], flapping[2]], gpu_hours=2000)
    noisy = evaluate.score(LABELS, [flapping[0], fire("straggler", 9000, 9, node="n7", gpu="g9")], gpu_hours=500)
    by = {10.0: {"detectors": once}, 30.0: {"detectors": noisy}}
    met = {g: (ok, v) for g, ok, v in evaluate.interval_goals(by)}
    assert met["every 10 s: false alerts <= 1 per 1,000 GPU-hours"] == (True, "0.00")
    assert met["every 30 s: false alerts <= 1 per 1,000 GPU-hours"] == (False, "2.00")
    assert met["every 30 s: straggler F1 no lower than at 10 s"][0] is False
    assert "every 10 s: straggler F1 no lower than at 10 s" not in met
    from gpufleet.commands.model import interval_of  # held-out files sampled at one interval, scored apart
    assert interval_of(".eval/heldout.every-30s") == 30.0 and interval_of(".eval/heldout") is None


def test_windows_scored_in_a_batch_score_as_one_at_a_time_to_the_last_bit():
    rng = random.Random(7)
    for kind, km in Model.default().kinds.items():
        splits = sorted({t for tree in km.trees for t, left in zip(tree["t"], tree["l"]) if left != -1})
        # values on each side of every split, exactly on the splits, missing (nan), zeros, and wild ones
        def value(splits=splits):
            pick = rng.randrange(5)
            return (rng.uniform(-1.0, 2.0), rng.choice(splits), float("nan"), 0.0, rng.uniform(-1e6, 1e6))[pick]
        xs = [[value() for _ in km.features] for _ in range(2000)]
        one_by_one = [km.score(x) for x in xs]
        assert km.score_many(xs) == one_by_one, kind
        assert [s for lo in range(0, 2000, 7) for s in km.score_many(xs[lo:lo + 7])] == one_by_one, kind
        assert km.score_many([]) == []
    untrained = Model.untrained().kinds["straggler"]
    assert untrained.score_many([[0.0] * len(untrained.features)] * 3) == [0.5] * 3


def test_a_window_forgets_its_samples_at_or_before_the_cutoff_and_keeps_the_rest_in_order():
    w = io_starvation.HostWindow()
    for t in (5, 10, 10, 15, 20):
        w.append(float(t), None, float(t) * 1e6, None, 50.0)
    assert w.drop_through(4.0) == 0 and len(w) == 5
    assert w.drop_through(10.0) == 3
    ts, iowait, disk, net, cpu = w.between(0.0, 100.0)
    assert list(ts) == [15.0, 20.0] and list(disk) == [15e6, 20e6] and list(cpu) == [50.0, 50.0]
    assert all(v != v for v in iowait + net)                 # not reported: NaN, never a value
    assert w.drop_through(99.0) == 2 and len(w) == 0 and w.between(0.0, 100.0) is None
    assert w.drop_through(100.0) == 0


def test_a_window_gives_the_samples_of_a_span_and_saves_as_named_columns_with_none_and_integers():
    w = straggler.JobWindow()
    rows = [(10.0, 95.5, 0.98, 0.7, 0x24, 61.0), (15.0, None, None, None, None, None), (20.0, 40.0, 0.5, 0.3, 0, 55.5),
            (25.0, 99.0, 1.0, 0.9, 2**52 + 5, 70.0)]
    for r in rows:
        w.append(*r)
    assert w.last_ts() == 25.0 and w.span(10.0, 20.0) == (1, 3) and w.span(30.0, 40.0) == (4, 4)
    util = w.between(10.0, 20.0)[1]
    assert util[0] != util[0] and util[1] == 40.0
    saved = w.to_state()
    assert saved == {name: [r[i] for r in rows] for i, name in enumerate(straggler.JobWindow.COLUMNS)}
    assert all(type(b) is int for b in saved["throttle"] if b is not None)       # reasons stay integers
    again = straggler.JobWindow.from_state(json.loads(json.dumps(saved)), "straggler detector")
    assert again.to_state() == saved
    with pytest.raises(StateError, match="straggler detector: a saved window needs the columns"):
        straggler.JobWindow.from_state({"ts": [1.0]}, "straggler detector")
    # the IO starvation window keeps each sample's job beside its numbers, and forgets both together
    g = io_starvation.GpuWindow()
    for t, job in ((5.0, "a"), (10.0, "a"), (15.0, None), (20.0, "b")):
        g.add(t, 50.0, 1.0 if job else 0.0, job, 3, cutoff=0.0)
    assert g.drop_through(5.0) == 1 and g.jobs == ["a", None, "b"]
    g.add(25.0, None, 0.0, None, 3, cutoff=10.0)
    assert g.jobs == [None, "b", None] and g.to_state()["ts"] == [15.0, 20.0, 25.0]
    saved = g.to_state()
    assert list(saved) == ["ts", "util", "has_process", "job", "gpu_index"] and saved["gpu_index"] == [3, 3, 3]
    assert io_starvation.GpuWindow.from_state(saved, "IO").jobs == [None, "b", None]
    with pytest.raises(StateError, match="IO: a saved window"):
        io_starvation.GpuWindow.from_state({**saved, "job": ["a"]}, "IO")


def test_an_alerts_summary_says_how_long_the_evidence_spans_not_how_long_the_incident_waited_to_fire():
    """An IO starvation fires on its first starved window: it has been starved for that window, not 0 min, and the
    incident starts where that window began (detected_at - started_at is the delay from the evidence's start). A
    leak's rate is measured over its last 10 or 30 minutes (fewer on a short history), whatever the incident's age."""
    from gpufleet.models.detectors.base import Incident
    at = 1_800_000_000.0

    def opened(info, first, detected, hits=1, misses=0, reason=""):
        """An incident as the tracker opens it: from the start of its first positive window."""
        return Incident(hits, misses, first, detected, first - info.lookback_s(), info, reason=reason)

    io = io_starvation.StarvedSeen(node="n1", job="train-1", tenant="t", pool="p", score=0.95, gpus=8, util=20.0,
                                   iowait=30.0, disk=2.0, net=0.1, cpu=10.0, cause="disk", also_seen=[],
                                   target="n1/train-1", window_min=3.0)   # sampled every minute: three samples
    first = io_starvation.describe("firing", io, opened(io, at, at), None)
    assert first["summary"].endswith("for 3 min") and first["detected_at"] == at and first["started_at"] == at - 180
    later = io_starvation.describe("firing", io, opened(io, at, at + 120, hits=3), None)
    assert later["summary"].endswith("for 5 min")
    gone = io_starvation.describe("resolved", io, opened(io, at, at + 120, 0, 2), at + 600)
    assert gone["summary"].endswith("(starved for 13 min)") and gone["evidence"]["resolution"] == "cleared"

    # a 3 GB/h leak, an hour of history: the 30-minute rate, over 30 minutes, however few minutes the incident is old
    far = memory_leak.features([20e9 + i * 0.05e9 for i in range(61)], 80e9, age_min=90)
    oom, rate, over = memory_leak.oom_estimate(far)
    assert over == 30 and rate * 80e9 == pytest.approx(3e9, rel=0.01)
    short = memory_leak.features([20e9 + i * 0.05e9 for i in range(16)], 80e9, age_min=16)
    assert memory_leak.oom_estimate(short)[2] == 15                          # 16 peaks a minute apart span 15 min
    leak = memory_leak.LeakSeen(node="n1", gpu_uuid="GPU-1", job="svc", tenant="t", pool="p", index=2, pid=7,
                                score=0.99, rate_gb_h=rate * 80, used_gb=23.0, total_gb=80.0, to_oom_min=oom,
                                rate_over_min=over, severity="warning")
    fired = memory_leak.describe("firing", leak, opened(leak, at, at + 180, hits=4), None)["summary"]
    # in the units people read (GiB), while the evidence keeps the raw figures for machines
    assert "leaks memory: 2.79 GiB/h over the last 30 min, 21.4 of 75 GiB used" in fired and "for 3 min" not in fired
    assert fired.endswith("out of memory in about 19.0 h")                   # 57 GB left at 3 GB/h
    full = replace(leak, used_gb=79.9, to_oom_min=0.2)                       # found as the memory runs out
    assert memory_leak.describe("firing", full, opened(full, at, at), None)["summary"].endswith(
        "74.4 of 75 GiB used, out of memory in under a minute")
    oom = memory_leak.describe("resolved", full, opened(full, at, at, 0, 1, "out_of_memory"), at + 600)
    assert oom["summary"] == "GPU 2 on n1 (job svc, pid 7): its process ran out of memory with 74.4 of 75 GiB used " \
        "(after 40 min)" and oom["evidence"]["resolution"] == "out_of_memory"      # growing 30 min before it fired
    silent = io_starvation.describe("resolved", io, opened(io, at, at, 0, 1, "no_telemetry"), at + 600)
    assert silent["summary"] == "Job train-1 on n1: no telemetry since 08:10 UTC (starved for 13 min)"

    node = straggler.StragglerSeen(level="node", node="n2", gpus=8, job="train-2", peers=1, index=0, bits=0,
                                   throttled=0.0, clock=0.6, peer_clock=0.8, util=85.0, peer_util=84.0,
                                   slowdown=0.25, power=0.5, peer_power=0.7, score=0.9, target="n2")
    text = straggler.describe("firing", node, opened(node, at, at + 90, hits=4), None)["summary"]
    assert "25% behind the job's other node for 2 min" in text
    gpu = replace(node, level="gpu", peers=7)
    text = straggler.describe("firing", gpu, opened(gpu, at, at + 90, hits=4), None)["summary"]
    assert "behind its 7 peers" in text


def test_an_open_incident_is_told_again_when_its_severity_moves_and_its_numbers_every_half_hour():
    """An escalation is told at once; a de-escalation once the lower severity has held 15 minutes (a severity
    hovering at its threshold pages once); the numbers every half hour, at the severity told."""
    from gpufleet.contracts.events import Told
    from gpufleet.models.detectors.base import event
    km = Model.untrained().kinds["memory_leak"]
    km.persist_on, km.persist_off, km.hold_down_s = 1, 1, 0.0
    inc, out = Incidents(), Output()

    def describe(status, info, st, resolved_at):
        return event("memory_leak", "g", status, st, resolved_at, info, Told(f"{info.severity} {info.score}", {}))

    for ts, severity in ((0, "warning"), (60, "warning"), (120, "critical"), (180, "critical"), (240, "warning"),
                         (300, "critical"), (400, "warning"), (1299, "warning"), (1300, "warning"), (3000, "warning"),
                         (3100, "warning"), (3200, "warning")):
        inc.observe("memory_leak:g", True, ts, Seen(severity=severity, score=ts), Judge(km, out, describe))
    inc.observe("memory_leak:g", False, 3260, None, Judge(km, out, describe))
    told = [(e["status"], e["severity"], e["revision"], e.get("change"), e.get("previous_severity"), e["summary"])
            for e in out.events]
    assert told == [("firing", "warning", 0, None, None, "warning 0"),
                    ("firing", "critical", 1, "escalated", "warning", "critical 120"),
                    ("firing", "warning", 2, "deescalated", "critical", "warning 1300"),   # held 15 min from 400
                    ("firing", "warning", 3, "updated", None, "warning 3100"),      # 30 min after the last told
                    ("resolved", "warning", 3, None, None, "warning 3200")]
    assert len({e["id"] for e in out.events}) == 1 and {e["detected_at"] for e in out.events} == {0}
