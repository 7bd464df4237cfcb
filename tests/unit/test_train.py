"""Training's choice of threshold reads scores of trees that did not see the window's fleet."""
import math
import random

from gpufleet.models.detectors import memory_leak
from gpufleet.models.detectors.memory_leak import LeakSeen
from gpufleet.models.train import Recording, label, left_out_scores

NAMES = memory_leak.FEATURES


def fleet(seed: int, grows_when_leaking: bool) -> Recording:
    """One fleet's leak windows on 20 GPUs, one leak each from minute 100 to 200; while leaking, the trend
    feature is high (or, in the contrary fleet, low)."""
    rng, rec = random.Random(seed), Recording()
    for g in range(20):
        uuid = f"GPU-{seed}-{g}"
        rec.labels.append({"kind": "memory_leak", "level": "gpu", "node": f"n{seed}", "gpus": [uuid],
                           "start": 100 * 60.0, "end": 200 * 60.0})
        for minute in range(0, 300, 2):
            x = [rng.random() for _ in NAMES]
            x[NAMES.index("age")], x[NAMES.index("slope_30")] = 3.0, 0.01      # judged: past the warm-up, growing
            leaking = 116 <= minute <= 200
            x[NAMES.index("trend_60")] = (0.8 if leaking == grows_when_leaking else 0.1) + rng.gauss(0, 0.05)
            rec.rows["memory_leak"].append((f"memory_leak:{uuid}", minute * 60.0, x, LeakSeen()))
    return rec


def both(first: Recording, second: Recording) -> Recording:
    rec = Recording()
    rec.extend(first)
    rec.extend(second)
    return rec


def test_each_fleets_windows_are_scored_by_trees_fitted_without_it():
    rec = both(fleet(1, grows_when_leaking=True), fleet(2, grows_when_leaking=False))
    assert [len(g) for g in rec.groups("memory_leak")] == [3000, 3000]
    ys = label("memory_leak", rec.rows["memory_leak"], rec.labels)
    scores = left_out_scores("memory_leak", rec, ys)
    assert scores is not None
    # each fleet is scored by the other's trees, which learned the contrary: its leaking windows score low
    for g in rec.groups("memory_leak"):
        leaking = [scores[i] for i in g if ys[i] == 1]
        healthy = [scores[i] for i in g if ys[i] == 0]
        assert sum(leaking) / len(leaking) < 0.2 < 0.8 < sum(healthy) / len(healthy)


def test_a_single_fleet_is_tuned_on_its_own_scores():
    rec = fleet(1, grows_when_leaking=True)
    ys = label("memory_leak", rec.rows["memory_leak"], rec.labels)
    assert rec.groups("memory_leak") == [range(0, 3000)]
    assert left_out_scores("memory_leak", rec, ys) is None


def test_tuning_takes_urgency_where_only_it_catches_leaks_before_the_oom_without_false_alerts():
    """Leaks whose windows score high only every other minute in the last quarter hour before the OOM (never
    two in a row), and healthy GPUs with lone high windows far from any OOM: no threshold and persistence tell
    them apart, an urgent score does (it fires on the leak's first high window near the OOM, never on a lone
    window far from it)."""
    from gpufleet.models.artifact import Model
    from gpufleet.models.train import tune

    def window(headroom: float, per_hour: float) -> list[float]:
        x = [0.0] * len(NAMES)
        x[NAMES.index("age")], x[NAMES.index("slope_30")] = 2.0, per_hour        # 99 minutes old, growing
        x[NAMES.index("slope_10")], x[NAMES.index("headroom")] = per_hour, headroom
        x[NAMES.index("minutes_to_oom")] = math.log10(1 + headroom / per_hour * 60)
        return x

    rec, scores = Recording(), []
    for g in range(10):
        uuid = f"GPU-leak-{g}"
        rec.labels.append({"kind": "memory_leak", "level": "gpu", "node": "n1", "gpus": [uuid], "start": 6000.0,
                           "end": 8400.0, "oom_at": 8400.0, "reaches_oom": True})
        for minute in range(60, 140):                                 # 0.45 of the memory an hour: out at 140
            rec.rows["memory_leak"].append((f"memory_leak:{uuid}", minute * 60.0,
                                            window((140 - minute) / 60 * 0.45, 0.45),
                                            LeakSeen(gpu_uuid=uuid, node="n1")))
            scores.append(0.96 if minute >= 125 and minute % 2 else 0.1)
    for g in range(20):
        uuid = f"GPU-ok-{g}"
        for minute in range(0, 300):
            rec.rows["memory_leak"].append((f"memory_leak:{uuid}", minute * 60.0, window(0.8, 0.01),
                                            LeakSeen(gpu_uuid=uuid, node="n2")))
            scores.append(0.99 if (minute + g) % 37 == 0 else 0.1)
    rec.gpu_hours = 30 * 5.0
    km = Model.untrained().kinds["memory_leak"]
    tuned = tune("memory_leak", rec, km, max_false_per_1000h=0.3, scores=scores)
    assert tuned["urgent_score"] is not None and tuned["urgent_score"] <= 0.96 and tuned["persist_on"] >= 2
    assert tuned["f1"] == 1.0 and tuned["false_per_1000_gpu_h"] == 0.0
    assert km.urgent_score == tuned["urgent_score"]
