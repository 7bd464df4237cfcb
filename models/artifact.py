"""A trained model: per kind, gradient-boosted trees over that detector's window features, and its thresholds.

Saved as a versioned JSON document (weights, feature names, training metadata and
metrics), so it can be read, diffed and loaded without running any code from it.
Loading refuses an artifact made for another format or another feature set.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from gpufleet.contracts.files import FileError, read_json

from .detectors import FEATURE_VERSION, FEATURES

FORMAT = "gpufleet-model"
FORMAT_VERSION = 2
MAX_MODEL_BYTES = 64 << 20      # the packaged model is about 0.4 MB
MAX_TREE_DEPTH = 64             # the packaged trees are 3 to 5 levels deep


class ModelError(ValueError):
    """An artifact that cannot be used, with what to do about it."""


@dataclass
class KindModel:
    """Boosted regression trees on the log-odds scale (what scikit-learn's GradientBoostingClassifier fits),
    kept as plain arrays: node ``i`` splits on feature ``f[i]`` at ``t[i]`` (left when ``x <= t``), or is a
    leaf worth ``v[i]`` when ``l[i] == -1``."""

    features: list[str]
    init: float
    learning_rate: float
    trees: list[dict]
    threshold: float = 0.5          # a window scoring at least this is positive
    persist_on: int = 2             # positive windows in a row before an incident fires
    persist_off: int = 6            # negative windows in a row before it resolves
    urgent_score: float | None = None   # a window urgent by its detector's own rule fires at once from this score
    hold_down_s: float | None = None    # a cleared condition resolves once clear this long (None: the kind's default,
                                        # models/detectors registry, or setting stream.hold_down_s)

    def score(self, x: list[float]) -> float:
        z = 0.0
        for tree in self.trees:
            f, t, left, right, v = tree["f"], tree["t"], tree["l"], tree["r"], tree["v"]
            i = 0
            while left[i] != -1:
                i = left[i] if x[f[i]] <= t[i] else right[i]
            z += v[i]
        return self._probability(z)

    def _probability(self, z: float) -> float:
        z = self.init + self.learning_rate * z
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))

    def score_many(self, xs: Sequence[Sequence[float]]) -> list[float]:
        """:meth:`score` of each row of ``xs``, every tree walked over all rows at once (numpy): the same
        floats to the last bit (each row's leaf values are added in tree order, as :meth:`score` does)."""
        if not xs:
            return []
        packed = self._packed
        if packed is None:                       # no trees: every row scores the bare prior
            return [self._probability(0.0)] * len(xs)
        np, roots, feature, threshold, left, right, value, depth = packed
        x = np.asarray(xs, dtype=np.float64)
        n, width = x.shape
        # every (row, tree) pair walks its tree at once; nodes are numbered across all trees (flat arrays)
        node = np.broadcast_to(roots, (n, len(roots)))
        base = (np.arange(n) * width)[:, None]
        flat = x.ravel()
        for _ in range(depth):
            go_left = flat.take(base + feature.take(node)) <= threshold.take(node)
            node = np.where(go_left, left.take(node), right.take(node))    # a leaf points to itself
        sums = np.add.accumulate(value.take(node), axis=1)[:, -1]          # sequential, in tree order
        return [self._probability(z) for z in sums.tolist()]

    @cached_property
    def _packed(self) -> tuple[Any, ...] | None:
        """The trees' nodes in flat arrays, numbered across every tree, a leaf's children pointing to itself."""
        if not self.trees:
            return None
        import numpy as np  # only where windows are scored in batches

        feature: list[int] = []
        threshold: list[float] = []
        left: list[int] = []
        right: list[int] = []
        value: list[float] = []
        roots, depth = [], 0
        for tree in self.trees:
            first = len(feature)
            roots.append(first)
            for i, (f, t, lo, hi, v) in enumerate(zip(tree["f"], tree["t"], tree["l"], tree["r"], tree["v"])):
                leaf = lo == -1
                feature.append(0 if leaf else f)
                threshold.append(0.0 if leaf else t)
                left.append(first + (i if leaf else lo))
                right.append(first + (i if leaf else hi))
                value.append(v if leaf else 0.0)
            depth = max(depth, _depth(tree["l"], tree["r"], 0))
        index = [np.array(a, dtype=np.intp) for a in (roots, feature)]
        return (np, *index, np.array(threshold, dtype=np.float64), np.array(left, dtype=np.intp),
                np.array(right, dtype=np.intp), np.array(value, dtype=np.float64), depth)


def _number(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _problem(m: dict) -> str | None:
    """What makes a detector's saved settings and trees unusable (wrong types, a node pointing outside its tree or
    back up it), or None: a model file is input, and the stream must never walk a broken tree."""
    for name in ("init", "learning_rate", "threshold"):
        if name in m and not _number(m[name]):
            return f"{name} is not a number"
    for name in ("persist_on", "persist_off"):
        if name in m and (type(m[name]) is not int or m[name] < 1):
            return f"{name} is not a positive whole number"
    if m.get("urgent_score") is not None and not _number(m["urgent_score"]):
        return "urgent_score is not a number"
    trees, width = m.get("trees"), len(m["features"])
    if not isinstance(trees, list):
        return "trees is not a list"
    for k, tree in enumerate(trees):
        if not isinstance(tree, dict) or not all(isinstance(tree.get(a), list) for a in "ftlrv"):
            return f"tree {k} lacks its node arrays f, t, l, r, v"
        n = len(tree["l"])
        if n == 0 or any(len(tree[a]) != n for a in "ftrv"):
            return f"tree {k}'s node arrays differ in length"
        for i in range(n):
            lo, hi = tree["l"][i], tree["r"][i]
            if type(lo) is not int or type(hi) is not int or not _number(tree["v"][i]):
                return f"tree {k} node {i} is not numbers"
            if lo == -1:
                continue
            if not (i < lo < n and i < hi < n) or type(tree["f"][i]) is not int or not 0 <= tree["f"][i] < width \
                    or not _number(tree["t"][i]):
                return f"tree {k} node {i} points outside its tree"
        depth = [0] * n
        for i in range(n):                  # children come after their parent: one pass gives every depth
            if tree["l"][i] != -1:
                depth[tree["l"][i]] = depth[tree["r"][i]] = depth[i] + 1
        if max(depth) > MAX_TREE_DEPTH:
            return f"tree {k} is {max(depth)} levels deep, more than {MAX_TREE_DEPTH}"
    return None


def _depth(left: list[int], right: list[int], i: int) -> int:
    return 0 if left[i] == -1 else 1 + max(_depth(left, right, left[i]), _depth(left, right, right[i]))


@dataclass
class Model:
    kinds: dict[str, KindModel]
    metadata: dict = field(default_factory=dict)

    def with_hold_downs(self, hold_down_s: dict[str, float]) -> Model:
        """The model with each kind's hold-down set where the model leaves it to the registry (None)."""
        kinds = {k: m if m.hold_down_s is not None or k not in hold_down_s else replace(m, hold_down_s=hold_down_s[k])
                 for k, m in self.kinds.items()}
        return Model(kinds, self.metadata)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "feature_version": FEATURE_VERSION,
                "kinds": {k: asdict(m) for k, m in self.kinds.items()}, "metadata": self.metadata}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def from_dict(cls, doc: object, where: str = "model") -> Model:
        if not isinstance(doc, dict) or not isinstance(doc.get("kinds", {}), dict):
            raise ModelError(f"{where} is not a gpufleet model (a JSON object with its detectors is due)")
        if doc.get("format") != FORMAT:
            raise ModelError(f"{where} is not a gpufleet model (format {doc.get('format')!r})")
        if doc.get("format_version") != FORMAT_VERSION or doc.get("feature_version") != FEATURE_VERSION:
            raise ModelError(
                f"{where} was made for model format {doc.get('format_version')} with feature set "
                f"{doc.get('feature_version')}; this gpufleet reads format {FORMAT_VERSION} with feature set "
                f"{FEATURE_VERSION}: train a new one with `gpufleet model train`")
        kinds = {}
        for kind, names in FEATURES.items():
            m = doc.get("kinds", {}).get(kind)
            if m is None:
                raise ModelError(f"{where} has no {kind} detector: train a new one with `gpufleet model train`")
            if not isinstance(m, dict) or not isinstance(m.get("features"), list):
                raise ModelError(f"{where}: the {kind} detector is not an object with its features")
            if list(m["features"]) != list(names):
                raise ModelError(f"{where}: the {kind} detector expects features {m['features']}, this gpufleet "
                                 f"computes {list(names)}: train a new one with `gpufleet model train`")
            settings = {f.name: f for f in fields(KindModel)}
            if unknown := sorted(set(m) - set(settings)):
                raise ModelError(f"{where}: the {kind} detector has settings this gpufleet does not know ({unknown}): "
                                 "it was made by a newer gpufleet; train a new one with `gpufleet model train`")
            if missing := sorted(name for name, f in settings.items() if name not in m and f.default is MISSING):
                raise ModelError(f"{where}: the {kind} detector lacks {missing}: train a new one with "
                                 "`gpufleet model train`")
            problem = _problem(m)
            if problem:
                raise ModelError(f"{where}: the {kind} detector is damaged ({problem}): train a new one with "
                                 "`gpufleet model train`")
            kinds[kind] = KindModel(**m)
        metadata = doc.get("metadata", {})
        return cls(kinds, metadata if isinstance(metadata, dict) else {})

    @classmethod
    def load(cls, path: str | Path) -> Model:
        try:
            doc = read_json(str(path), MAX_MODEL_BYTES)
        except FileError as err:
            raise ModelError(f"model {err}") from None
        return cls.from_dict(doc, f"model {path}")

    @classmethod
    def untrained(cls) -> Model:
        """Scores everything 0.5 and never alerts: for recording window features before training."""
        return cls({k: KindModel(list(names), 0.0, 0.1, [], threshold=2.0) for k, names in FEATURES.items()},
                   {"untrained": True})

    @classmethod
    def default(cls) -> Model:
        """The model shipped with gpufleet (trained on simulated fleets; see its metadata)."""
        text = resources.files(__package__).joinpath("default_model.json").read_text(encoding="utf-8")
        return cls.from_dict(json.loads(text), "the packaged model")
