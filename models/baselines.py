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

from .detectors import module


def _idle(x: list[float]) -> bool:
    """A rented GPU under 5% utilization (window: mean utilization, max utilization, rented)."""
    return x[2] > 0 and x[1] < 0.05


def threshold(kind: str):
    """Each detector's own rule an operator writes first (models/detectors), and the idle one."""
    return _idle if kind == "idle" else module(kind).baseline


def isolation_forest(kind: str, xs: list[list[float]], seed: int = 0):
    from sklearn.ensemble import IsolationForest
    forest = IsolationForest(n_estimators=100, random_state=seed).fit(np.asarray(xs))

    def rule_batch(batch: list[list[float]]) -> list[bool]:
        return list(forest.decision_function(np.asarray(batch)) < 0)
    return rule_batch
