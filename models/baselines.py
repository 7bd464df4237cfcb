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

from . import evaluate
from .detectors import module
from .train import Recording, Tuning, incidents


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


def _baseline_report(rec: Recording, kind_rule) -> evaluate.Report:
    fired = []
    for kind in evaluate.KINDS:
        rows = rec.rows[kind]
        if not rows:
            continue
        fired += incidents(kind, rows, Tuning(0.5, 2, 6), positive=kind_rule(kind, rows), precedence=False)
    return evaluate.score(rec.labels, fired, rec.gpu_hours)


def _threshold(kind, rows):
    rule = threshold(kind)
    return [bool(rule(r[2])) for r in rows]


def _forest(kind, rows):
    return isolation_forest(kind, [r[2] for r in rows])([r[2] for r in rows])


def evaluate_recording(rec: Recording, with_baselines: bool = True) -> dict:
    reports = {"detectors": evaluate.score(rec.labels, rec.alerts, rec.gpu_hours)}
    if with_baselines:
        reports["threshold baseline"] = _baseline_report(rec, _threshold)
        reports["isolation forest baseline"] = _baseline_report(rec, _forest)
    return reports
