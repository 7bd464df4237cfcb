"""Training on simulated fleets with ground-truth labels.

1. Record (``streams/recording.py``, which runs the stream's processors over each fleet's telemetry with a
   recorder): every window every detector evaluates is kept with its features and the target it names.
2. Label each window from the ground truth: inside a fault of its kind on its target (once the
   window lies wholly inside) is positive; outside every such fault is negative; the edges are left out.
3. Fit, per kind, gradient-boosted trees (scikit-learn's GradientBoostingClassifier, shallow trees)
   on the windows, the classes weighted equally, and keep the trees as plain arrays.
4. Tune, per kind, the window threshold and how many positive windows in a row open an incident (and, for a
   detector with an ``urgent`` rule, the score from which an urgent window opens one at once), on each
   window's score by trees fitted without its fleet (leave one fleet out: what the trees give on a fleet
   they have not seen), replaying the recorded windows through the incident logic and scoring the
   incidents the way ``evaluate`` does: best F1 (for leaks, the lower of F1 and the shares alerted in
   time, within an hour of the start and ten minutes before the out-of-memory), with at most
   ``max_false_per_1000h`` false alerts and, where the kind has a delay goal, a median delay within it; ties go
   to the shorter median delay.
"""
from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

import numpy as np

from gpufleet.contracts.output import Output

from . import evaluate
from .artifact import KindModel, Model
from .detectors import FEATURE_VERSION, FEATURES, KINDS, REGISTRY, module
from .detectors.base import Incidents, Judge, Seen

log = logging.getLogger("gpufleet.model")



class Recording:
    """Every window the detectors evaluated over some telemetry, with the alerts the stream raised."""

    def __init__(self):
        self.rows: dict[str, list[tuple]] = {k: [] for k in (*KINDS, "idle")}  # kind -> (key, ts, x, info)
        self.alerts: list[dict] = []
        self.labels: list[dict] = []
        self.gpu_hours = 0.0
        self.fleets: list[dict[str, int]] = []     # per fleet extended in: where its rows of each kind end

    def groups(self, kind: str) -> list[range]:
        """The row ranges of each fleet of a kind (one range when the windows were recorded in one go)."""
        ends = [f[kind] for f in self.fleets] or [len(self.rows[kind])]
        return [range(a, b) for a, b in zip([0, *ends], ends) if b > a]

    def record(self, kind: str, key: str, ts: float, x: list, info: Seen) -> None:
        self.rows[kind].append((key, ts, x, info))

    def extend(self, other: Recording) -> None:
        for k, rows in other.rows.items():
            self.rows[k].extend(rows)
        self.fleets.append({k: len(rows) for k, rows in self.rows.items()})
        self.alerts += other.alerts
        self.labels += other.labels
        self.gpu_hours += other.gpu_hours


def _fault_index(labels: list[dict], kind: str) -> dict[str, list[dict]]:
    """Faults of a kind by the target names windows use."""
    index: dict[str, list[dict]] = {}
    for f in labels:
        if f["kind"] != kind:
            continue
        if module(kind).LEVEL == "job":          # a job on a node: its target is node/job
            index.setdefault(f"{f['node']}/{f['job']}", []).append(f)
        else:
            if f["level"] == "node":
                index.setdefault(f["node"], []).append(f)
            for uuid in f["gpus"]:
                index.setdefault(uuid, []).append(f)
    return index


def label(kind: str, rows: list[tuple], labels: list[dict]) -> list[int | None]:
    """1 inside a fault on the window's target, 0 well outside, None on the edges (left out)."""
    index = _fault_index(labels, kind)
    edge = REGISTRY[kind].edge_s
    applies = module(kind).applies
    out: list[int | None] = []
    for key, ts, x, info in rows:
        if not applies(x) or info.held:    # the detector does not judge these: nothing to learn
            out.append(None)
            continue
        target = key.split(":", 1)[1]
        y: int | None = 0
        for f in index.get(target, ()):
            if f["start"] + edge <= ts <= f["end"]:
                y = 1
                break
            if f["start"] - edge <= ts <= f["end"] + edge:
                y = None
        out.append(y)
    return out


def export_trees(clf, x0) -> tuple[float, float, list[dict]]:
    """The fitted ensemble as (initial log-odds, learning rate, trees as arrays), through public attributes."""
    trees = []
    for est in clf.estimators_[:, 0]:
        t = est.tree_
        trees.append({"f": [int(v) for v in t.feature], "t": [float(v) for v in t.threshold],
                      "l": [int(v) for v in t.children_left], "r": [int(v) for v in t.children_right],
                      "v": [float(v) for v in t.value[:, 0, 0]]})
    lr = float(clf.learning_rate)
    init = float(clf.decision_function(x0[:1])[0] - lr * sum(e.predict(x0[:1])[0] for e in clf.estimators_[:, 0]))
    return init, lr, trees


def fit(kind: str, rows: list[tuple], ys: list[int | None], max_negatives: int = 80_000,
        seed: int = 0) -> KindModel:
    from sklearn.ensemble import GradientBoostingClassifier

    keep = [i for i, y in enumerate(ys) if y is not None]
    pos = [i for i in keep if ys[i] == 1]
    neg = [i for i in keep if ys[i] == 0]
    if not pos or not neg:
        raise ValueError(f"{kind}: the training fleets need both faulty and healthy windows (got {len(pos)} faulty, "
                         f"{len(neg)} healthy): simulate more hours or more faults")
    rng = np.random.default_rng(seed)
    if len(neg) > max_negatives:
        neg = sorted(rng.choice(neg, max_negatives, replace=False).tolist())
    idx = pos + neg
    x = np.asarray([rows[i][2] for i in idx], dtype=float)
    y = np.asarray([ys[i] for i in idx])
    weight = np.where(y == 1, len(neg) / len(pos), 1.0)
    clf = GradientBoostingClassifier(n_estimators=100, max_depth=3, learning_rate=0.1, subsample=0.8,
                                     random_state=seed).fit(x, y, sample_weight=weight)
    init, lr, trees = export_trees(clf, x)
    km = KindModel(list(FEATURES[kind]), init, lr, trees, persist_off=REGISTRY[kind].persist_off)
    check = [km.score(list(v)) for v in x[:50]]
    assert np.allclose(check, clf.predict_proba(x[:50])[:, 1], atol=1e-6), "exported trees disagree with the fit"
    return km


@dataclass
class Tuning:
    """A detector's decision settings while tuning (what models.detectors.base.Decider asks for)."""

    threshold: float
    persist_on: int
    persist_off: int
    urgent_score: float | None = None
    hold_down_s: float | None = None


def positives(kind: str, rows: list[tuple], scores: list[float], decider) -> list[bool]:
    """Each recorded window's decision, by the detector's own ``decide`` (the stream's very rule)."""
    m = module(kind)
    group = getattr(m, "EPOCH", None)           # "job" or "node": the detector decides an epoch of it at once
    if group is None:
        return [m.decide(x, score, decider, info) for (_, _, x, info), score in zip(rows, scores)]
    out = [False] * len(rows)
    epochs: dict[tuple, list[int]] = {}
    for i, (_, ts, _, info) in enumerate(rows):
        epochs.setdefault((getattr(info, group), ts), []).append(i)
    for idx in epochs.values():
        decided = m.decide([(rows[i][0], rows[i][2], rows[i][3], scores[i]) for i in idx], decider)
        for i, p in zip(idx, decided):
            out[i] = p
    return out


def urgents(kind: str, rows: list[tuple], scores: list[float], decider) -> list[bool]:
    """Each recorded window's urgency, by the detector's own ``urgent`` where it has one (all False where not)."""
    rule = getattr(module(kind), "urgent", None)
    if rule is None:
        return [False] * len(rows)
    return [rule(x, score, decider, info) for (_, _, x, info), score in zip(rows, scores)]


def incidents(kind: str, rows: list[tuple], decider, scores: list[float] | None = None,
              positive: list[bool] | None = None, urgent: list[bool] | None = None,
              precedence: bool = True) -> list[dict]:
    """Replay recorded windows through the stream's decision and urgency (or the ``positive`` and ``urgent``
    given: the decisions already made, or a baseline's, never urgent) and its incident tracker: the firing
    alerts. ``precedence``: the detector's own rule between the incidents of one node (``held_back``, where
    it has one); off for a baseline's rule."""
    tracker, out = Incidents(), Output()

    def describe(status: str, info: Seen, st, resolved_at) -> dict:
        return {"kind": kind, "status": status, "id": f"{kind}@{st.started_at}", "detected_at": st.detected_at,
                "node": info.node, "gpu_uuid": info.gpu_uuid, "job": info.job}

    if positive is None:
        assert scores is not None
        positive, urgent = positives(kind, rows, scores, decider), urgents(kind, rows, scores, decider)
    elif urgent is None:
        urgent = [False] * len(rows)
    held_back = getattr(module(kind), "held_back", None) if precedence else None
    for (key, ts, _x, info), p, u in zip(rows, positive, urgent):
        if p and not u and held_back is not None and held_back(key, info, tracker):
            p = False
        tracker.observe(key, p, ts, info, Judge(decider, out, describe), urgent=u)
    fired = [e for e in out.events if e["status"] == "firing" and not e.get("revision")]    # each incident once
    for e in fired:                               # ids unique per incident, as alert ids are
        e["id"] = f"{e['id']}:{e['gpu_uuid'] or e['node']}:{e['job']}"
    return fired


def _worst_goal(rep: evaluate.KindReport) -> float:
    """The figure tuning raises: F1, and for leaks the lower of F1 and the shares alerted in time (within an
    hour of the start; ten minutes before the out-of-memory), which are goals of their own."""
    figures = [rep.f1]
    if rep.kind in REGISTRY and REGISTRY[rep.kind].oom_goals:
        figures += [share for share in (rep.leak_within_hour_share, rep.leak_early_share) if share is not None]
    return min(figures)


def left_out_scores(kind: str, rec: Recording, ys: list[int | None]) -> list[float] | None:
    """Every window's score by trees fitted without its fleet (one fit per fleet left out), or None with fewer
    than two fleets. Tuning on these, not on the scores of trees that saw the windows, chooses the threshold
    and persistence that hold on a fleet the trees have not seen: in-sample scores of boosted trees sit near
    0 and 1, and a threshold tuned on them asks for a certainty an unseen fleet does not give."""
    groups = rec.groups(kind)
    if len(groups) < 2:
        return None
    rows = rec.rows[kind]
    scores = [0.0] * len(rows)
    for g in groups:
        others = [None if i in g else y for i, y in enumerate(ys)]
        if not any(others) or all(y is None or y for y in others):
            return None                  # a fleet alone holds every fault (or every healthy window) of the kind
        km = fit(kind, rows, others)
        for i, score in zip(g, km.score_many([rows[i][2] for i in g])):
            scores[i] = score
    return scores


URGENT_SCORES = (None, 0.9, 0.95, 0.98, 0.99)      # tried for a detector with an ``urgent`` rule (None: no urgency)


def tune(kind: str, rec: Recording, km: KindModel, max_false_per_1000h: float,
         scores: list[float] | None = None) -> dict:
    rows = rec.rows[kind]
    if scores is None:
        scores = km.score_many([r[2] for r in rows])
    levels = URGENT_SCORES if hasattr(module(kind), "urgent") else (None,)
    best: tuple | None = None
    goal = REGISTRY[kind].delay_goal_s if kind in REGISTRY else None
    hold = km.hold_down_s if km.hold_down_s is not None else REGISTRY[kind].hold_down_s
    for t, thr in enumerate((0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99)):
        for u, urgent in enumerate(levels):
            # the windows' decisions do not depend on how many in a row open an incident: made once for all
            decider = Tuning(thr, 1, km.persist_off, urgent, hold)
            positive, urgency = positives(kind, rows, scores, decider), urgents(kind, rows, scores, decider)
            for persist in (1, 2, 3, 4):
                fired = incidents(kind, rows, Tuning(thr, persist, km.persist_off, urgent, hold),
                                  positive=positive, urgent=urgency)
                rep = evaluate.score(rec.labels, fired, rec.gpu_hours).kinds[kind]
                false_rate = 1000 * rep.false_alerts / rec.gpu_hours if rec.gpu_hours else 0.0
                delay = rep.delay(0.5) or 0.0
                key = (false_rate <= max_false_per_1000h, goal is None or delay <= goal,
                       round(_worst_goal(rep), 3), round(rep.f1, 3), -delay)
                # ties go to fewer windows in a row, then the lower threshold, then no urgency
                order = (persist, t, u)
                if best is None or key > best[0] or (key == best[0] and order < best[1]):
                    best = (key, order, thr, persist, urgent, rep.f1, false_rate, delay)
    assert best is not None
    _, _, km.threshold, km.persist_on, km.urgent_score, f1, false_rate, delay = best
    return {"threshold": km.threshold, "persist_on": km.persist_on, "urgent_score": km.urgent_score,
            "f1": round(f1, 4), "false_per_1000_gpu_h": round(false_rate, 3), "delay_p50_s": round(delay, 1)}


def train(recordings: Recording, describe: dict, max_false_per_1000h: float = 0.3) -> Model:
    """Fit and tune every detector on the recorded windows of labelled fleets."""
    kinds, metrics = {}, {}
    for kind in KINDS:
        rows = recordings.rows[kind]
        ys = label(kind, rows, recordings.labels)
        km = fit(kind, rows, ys)
        left_out = left_out_scores(kind, recordings, ys)
        metrics[kind] = {"windows": sum(1 for y in ys if y is not None), "faulty_windows": sum(1 for y in ys if y),
                         "tuned_on": ("scores of trees fitted without the fleet" if left_out is not None
                                      else "in-sample scores"),
                         **tune(kind, recordings, km, max_false_per_1000h, left_out)}
        kinds[kind] = km
        log.info("%s: %s", kind, metrics[kind])
    from gpufleet import __version__
    meta = {"created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "gpufleet": __version__,
            "feature_version": FEATURE_VERSION, "trained_on": describe, "gpu_hours": round(recordings.gpu_hours, 1),
            "faults": {k: sum(1 for f in recordings.labels if f["kind"] == k) for k in (*KINDS, "idle")},
            "training_metrics": metrics, "trained_in_s": None}
    return Model(kinds, meta)
