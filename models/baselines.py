"""The baselines the detectors are compared with, on the same windows.

- ``threshold``: the rules an operator writes first: throttled for most of the window (straggler);
  iowait above 10% while utilization is under half (IO starvation); memory over 90% used (leak);
  a rented GPU under 5% utilization (idle).
- ``isolation_forest``: scikit-learn's IsolationForest over each detector's window features, fitted on
  the data it scores (unsupervised), a window anomalous when its decision function is negative.

Both go through the same incident logic (positive twice in a row to fire, six negatives to resolve).
"""
from __future__ import annotations

import numpy as np

THRESHOLD_RULES = {
    "straggler": lambda x: x[3] >= 0.5,                    # throttled (not the power cap) half the window
    "io_starvation": lambda x: x[3] >= 0.10 and x[0] < 0.5,
    "memory_leak": lambda x: x[5] < 0.10,                  # less than 10% of memory left
    "idle": lambda x: x[2] > 0 and x[1] < 0.05,
}


def threshold(kind: str):
    return THRESHOLD_RULES[kind]


def isolation_forest(kind: str, xs: list[list[float]], seed: int = 0):
    from sklearn.ensemble import IsolationForest
    forest = IsolationForest(n_estimators=100, random_state=seed).fit(np.asarray(xs))

    def rule_batch(batch: list[list[float]]) -> list[bool]:
        return list(forest.decision_function(np.asarray(batch)) < 0)
    return rule_batch
