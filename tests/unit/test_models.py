"""The detectors' features, the model artifact, the incident logic and the scoring rule."""
import json

import pytest

from gpufleet.models import evaluate
from gpufleet.models.artifact import Model, ModelError
from gpufleet.models.features import KINDS, io_features, leak_features, straggler_features, straggler_stats, theil_sen
from gpufleet.streams.detect import Incidents
from gpufleet.streams.output import Output


def window(util, clock, power=300.0, throttle=0, temp=60.0, n=12):
    return {"util": [util] * n, "clock": [clock] * n, "power": [power] * n, "throttle": [throttle] * n,
            "temp": [temp] * n}


def test_a_slow_gpu_stands_out_and_a_shared_dip_does_not():
    job = {f"g{i}": window(98, 1980) for i in range(7)} | {"slow": window(99, 1188, throttle=0x20, temp=90)}
    f = straggler_features(straggler_stats(job), 12)
    assert f["slow"][0] == pytest.approx(0.4) and f["slow"][3] == 1.0 and f["slow"][5] == pytest.approx(30)
    assert all(abs(f[f"g{i}"][0]) < 1e-9 and f[f"g{i}"][3] == 0 for i in range(7))
    # a checkpoint: every GPU at 2% and low clocks together
    dip = {f"g{i}": window(2, 900) for i in range(8)}
    assert all(max(x[0], x[1]) < 1e-9 for x in straggler_features(straggler_stats(dip), 12).values())


def test_two_gpu_job_uses_the_other_gpu_as_reference():
    f = straggler_features(straggler_stats({"a": window(97, 1980), "b": window(57, 1980)}), 12)
    assert f["b"][1] == pytest.approx(0.40) and f["a"][1] == pytest.approx(-0.40)


def test_theil_sen_follows_a_ramp_not_a_late_step_or_an_outlier():
    assert theil_sen([10.0] * 9 + [30.0] * 2) == 0.0      # a step in the middle does tilt it: up_frac tells
    assert theil_sen([float(3 * i) for i in range(11)]) == pytest.approx(3.0)
    assert theil_sen([0, 1, 2, 300, 4, 5]) == pytest.approx(1.0)       # one outlier


def test_leak_features_tell_steady_growth_from_a_cache_step():
    total = 80e9
    leak = [20e9 + i * 0.5e9 for i in range(31)]
    step = [20e9] * 15 + [22e9] * 16
    fl, fs = leak_features(leak, total, age_min=60), leak_features(step, total, age_min=60)
    assert fl[2] == 1.0 and fs[2] < 0.2                                    # share of minutes that grew
    assert fl[0] > 0.3 and fs[0] == 0.0                                    # slope, share of memory per hour
    assert 10 ** fl[6] - 1 == pytest.approx((total - leak[-1]) / 0.5e9, rel=0.01)   # minutes to OOM
    assert leak_features(leak[:5], total, 60) is None                     # not enough history


def test_io_features_read_the_waiting():
    starved = io_features([10, 90, 5, 8] * 3, [40] * 12, [2e9] * 12, [1e8] * 12, [1] * 12, [0.5] * 12)
    busy = io_features([97] * 12, [1] * 12, [2e8] * 12, [4e9] * 12, [1] * 12, [0.5] * 12)
    assert starved[0] < 0.3 and starved[3] == pytest.approx(0.4) and starved[4] == pytest.approx(2.0)
    assert busy[0] > 0.9 and busy[3] == pytest.approx(0.01)
    assert starved[8] > 0.7 and starved[9] > 0.7 and busy[8] < 0.05 and busy[9] < 0.05


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
    with pytest.raises(ModelError, match="cannot be read"):
        Model.load(bad)
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
        inc.observe("straggler:g", positive, ts, km, {}, out, describe)
    assert out.events == [{"status": "firing", "started": 60, "detected": 90, "resolved": None},
                          {"status": "resolved", "started": 60, "detected": 90, "resolved": 270}]


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
