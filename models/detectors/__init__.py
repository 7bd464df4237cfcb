"""The detectors, one module per kind, found through this registry.

Each module holds its window state (typed, saved by name), its features (named), its decision (``applies``
and ``decide``, and optionally ``urgent``: a positive that opens the incident at once, and ``held_back``: a
positive window that opens no incident, given the window's info and the incidents open), its incidents'
wording (``describe``), its threshold baseline (``baseline``) and the stage it runs on (``STAGE``). The
stream (streams/node.py, streams/jobs.py), training (models/train.py), evaluation and its baselines, and
the simulated fleet's faults all read :data:`REGISTRY`: adding a kind is one module, one line here, and a
fault in the simulator.

Precedence between kinds (one cause per incident): a process restart (memory_leak) > IO starvation >
straggler. The node stage's detectors run in registry order and hand what they know to the next (GPUs
to leave out, jobs starved of input); the job stage gets the same through the job samples' flags.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gpufleet.contracts.output import Output
from gpufleet.contracts.state import StateError

from . import io_starvation, memory_leak, straggler
from .base import Recorder

# kind -> its module; a module's STAGE says where it runs: "node" (each node's messages, in ts order) or
# "job" (each job's samples from every node, released in (ts, node) order); node detectors run in this order
REGISTRY: dict[str, ModuleType] = {m.KIND: m for m in (memory_leak, io_starvation, straggler)}
KINDS = tuple(REGISTRY)
FEATURES = {kind: m.FEATURES for kind, m in REGISTRY.items()}
FEATURE_VERSION = 5


def module(kind: str) -> ModuleType:
    return REGISTRY[kind]


@dataclass
class Detection:
    """What the processors need to detect: the model, and optionally a recorder of every window's features
    (for training)."""

    model: Any                        # models.artifact.Model
    recorder: Recorder | None = None


@dataclass
class NodeFlags:
    """What the node stage's detectors know that the next ones, and the job stage, must respect."""

    quiet: set[str] = field(default_factory=set)      # GPUs whose process just restarted
    starved: set[str] = field(default_factory=set)    # jobs starved of input on this node


@dataclass
class NodeContext:
    """What a node-stage detector gets with each message, besides its model."""

    out: Output
    tenant_of: dict
    recorder: Recorder | None
    flags: NodeFlags


class NodeDetectors:
    """The node-stage detectors of one node, by kind, in registry order."""

    __slots__ = ("detectors",)

    def __init__(self) -> None:
        self.detectors = {kind: m.Detector() for kind, m in REGISTRY.items() if m.STAGE == "node"}

    def add(self, msg, detection: Detection, out: Output, tenant_of: dict) -> NodeFlags:
        ctx = NodeContext(out, tenant_of, detection.recorder, NodeFlags())
        for kind, d in self.detectors.items():
            d.add(msg, detection.model.kinds[kind], ctx)
        return ctx.flags

    def to_state(self) -> dict:
        return {kind: d.to_state() for kind, d in self.detectors.items()}

    @classmethod
    def from_state(cls, state: dict) -> NodeDetectors:
        d = cls()
        try:
            d.detectors = {kind: module(kind).Detector.from_state(state[kind]) for kind in d.detectors}
        except (KeyError, TypeError) as err:
            raise StateError(f"node detectors: saved state lacks {err}") from None
        return d


class JobDetectors:
    """The job-stage detectors of one job, by kind, in registry order."""

    __slots__ = ("detectors",)

    def __init__(self) -> None:
        self.detectors = {kind: m.Detector() for kind, m in REGISTRY.items() if m.STAGE == "job"}

    def add(self, job: str, ts: float, node: str, sample: dict, tenant, pool, detection: Detection,
            out: Output) -> None:
        for kind, d in self.detectors.items():
            d.add(job, ts, node, sample, tenant, pool, detection.model.kinds[kind], out, detection.recorder)

    def end(self, ts: float, out: Output) -> None:
        for d in self.detectors.values():
            d.end(ts, out)

    def to_state(self) -> dict:
        return {kind: d.to_state() for kind, d in self.detectors.items()}

    @classmethod
    def from_state(cls, state: dict) -> JobDetectors:
        d = cls()
        try:
            d.detectors = {kind: module(kind).Detector.from_state(state[kind]) for kind in d.detectors}
        except (KeyError, TypeError) as err:
            raise StateError(f"job detectors: saved state lacks {err}") from None
        return d
