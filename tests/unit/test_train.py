"""Training's choice of threshold reads scores of trees that did not see the window's fleet."""
import random

from gpufleet.models.detectors import memory_leak
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
            rec.rows["memory_leak"].append((f"memory_leak:{uuid}", minute * 60.0, x, {}))
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
