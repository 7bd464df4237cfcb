"""The detectors, one package per kind, found through this registry.

Each kind's package (``models/detectors/<kind>/``) holds its window state (typed, saved by name), its features
(named), its decision (``applies`` and ``decide``, and optionally ``urgent``: a positive that opens the incident at
once, and ``held_back``: a positive window that opens no incident, given the window's info and the incidents open),
what a window showed (``SEEN``, a :class:`.base.Seen` record of its evidence, which its rules decide from and its
wording describes), its incidents' wording (``describe``), its threshold baseline (``baseline``), the stage it runs
on (``STAGE``), what its alerts name (``LEVEL``: ``gpu``, a GPU or a whole node; ``job``, a job on a node), its
runbook page in the manual (``RUNBOOK``) and its constants, one table; its ``Detector`` has the methods of
:class:`.base.Detector`, with their signatures. :func:`check` holds a package to that contract when its kind
registers: a kind that lacks a part fails at import, not in production. Its :class:`Kind` entry here carries what
the rest of gpufleet needs to know of it: how training labels its windows, its colour, its evaluation goals, and
the simulated fleet's fault. The stream (streams/node.py, streams/jobs.py), training, evaluation, the fleet page
and the simulator all read :data:`REGISTRY`: adding a kind is its package, one line here, and a fault in each fleet
generator (the simulator's ``_place_<fault>`` and sampling, and the held-out generator's own, which shares no code
with this).

Precedence between kinds (one cause per incident): a process restart (memory_leak) > IO starvation >
straggler. The node stage's detectors run in registry order and hand what they know to the next (GPUs
to leave out, jobs starved of input); the job stage gets the same through the job samples' flags.
"""
from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gpufleet.contracts.output import Output
from gpufleet.contracts.state import StateError

from . import io_starvation, memory_leak, straggler
from .base import Detector, JobContext, JobItem, NodeContext, NodeFlags, Recorder, Seen

STAGES, LEVELS = ("node", "job"), ("gpu", "job")
PARTS = ("applies", "baseline", "describe")         # functions every kind's package has


def check(module: ModuleType) -> None:
    """Hold a kind's package to the contract (module docstring); raises TypeError naming what is missing or off."""
    name = getattr(module, "KIND", None) or getattr(module, "__name__", "?")
    what = f"detector kind {name}"
    for attr, ok, wanted in (("KIND", lambda v: isinstance(v, str) and v, "a name"),
                             ("STAGE", lambda v: v in STAGES, f"one of {STAGES}"),
                             ("LEVEL", lambda v: v in LEVELS, f"one of {LEVELS}"),
                             ("FEATURES", lambda v: isinstance(v, tuple) and v and all(isinstance(f, str) for f in v),
                              "a tuple of feature names"),
                             ("RUNBOOK", lambda v: isinstance(v, str) and v.endswith(".md"),
                              "its runbook page in the manual (runbooks/<kind>.md)")):
        if not ok(getattr(module, attr, None)):
            raise TypeError(f"{what}: {attr} must be {wanted}")
    for part in PARTS:
        if not callable(getattr(module, part, None)):
            raise TypeError(f"{what}: no {part}()")
    seen = getattr(module, "SEEN", None)
    if not (inspect.isclass(seen) and issubclass(seen, Seen)):
        raise TypeError(f"{what}: SEEN must be its record of what a window showed (a subclass of base.Seen)")
    cls = getattr(module, "Detector", None)
    if not inspect.isclass(cls):
        raise TypeError(f"{what}: no Detector class")
    for method in ("add", "silence", "end", "to_state", "from_state"):
        theirs, ours = getattr(cls, method, None), getattr(Detector, method)
        if not callable(theirs):
            raise TypeError(f"{what}: Detector has no {method}()")
        got, due = inspect.signature(theirs).parameters.values(), inspect.signature(ours).parameters.values()
        if [_shape(p) for p in got] != [_shape(p) for p in due]:
            raise TypeError(f"{what}: Detector.{method}({', '.join(p.name for p in got)}) must take "
                            f"({', '.join(p.name for p in due)})")


def _shape(p: inspect.Parameter) -> tuple:
    """What a caller relies on of a parameter: how it is passed, and an optional one's name."""
    optional = p.default is not inspect.Parameter.empty
    return p.kind, optional, p.name if optional else None


@dataclass(frozen=True)
class Kind:
    """One kind of fault the detectors find: its package and what the rest of gpufleet needs to know of it."""

    module: ModuleType           # its package: KIND, STAGE, LEVEL, FEATURES, Detector, applies, decide, describe, ...
    edge_s: float                # training: seconds after a labelled fault's start left unlabelled (the windows
                                 # straddling its start are neither healthy nor faulty)
    persist_off: int             # windows without evidence in a row that resolve an incident (the model keeps it)
    hold_down_s: float           # s a cleared condition must stay clear before its incident resolves: one that comes
                                 # back within it is the same incident (setting stream.hold_down_s overrides it)
    colour: str                  # on the fleet page and the evaluation chart
    delay_goal_s: float | None   # evaluation: the median delay from a fault's start to its page must stay under this
    oom_goals: bool              # evaluation: its faults may end in an out-of-memory, so lead-time goals apply
    fault: str | None            # the simulated fleet's fault of this kind (collectors/simulator ``_place_<fault>``)

    def __post_init__(self) -> None:
        check(self.module)

    @property
    def name(self) -> str:
        return self.module.KIND


# kind -> its entry; a package's STAGE says where it runs: "node" (each node's messages, in ts order) or "job"
# (each job's samples from every node, released in (ts, node) order); node detectors run in this order
REGISTRY: dict[str, Kind] = {k.name: k for k in (
    Kind(memory_leak, hold_down_s=600.0, edge_s=900.0, persist_off=4, colour="#a463f2", delay_goal_s=None,
         oom_goals=True, fault="memory_leak"),
    Kind(io_starvation, hold_down_s=300.0, edge_s=90.0, persist_off=6, colour="#efb118", delay_goal_s=120.0,
         oom_goals=False, fault="io_starvation"),
    Kind(straggler, hold_down_s=1200.0, edge_s=90.0, persist_off=6, colour="#4269d0", delay_goal_s=90.0,
         oom_goals=False, fault="straggler"),
)}
# what the stream decides itself, beside the detectors (streams/idle.py), with its colour
STREAM_KINDS = {"idle": "#e4572e"}
# what the stream reports by a rule of cost, not a fault (not scored against fault labels), with its colour
COST_KINDS = {"underuse": "#b07aa1"}
FEATURE_VERSION = 5


class KindNames(Sequence):
    """The kinds registered now, in registry order (and ``extra`` after them): a live view, so a kind registered
    later (a test's) is seen by whatever kept this."""

    def __init__(self, extra: tuple[str, ...] = ()) -> None:
        self.extra = extra

    def _names(self) -> tuple[str, ...]:
        return (*REGISTRY, *self.extra)

    def __getitem__(self, i):
        return self._names()[i]

    def __len__(self) -> int:
        return len(REGISTRY) + len(self.extra)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in REGISTRY or name in self.extra

    def __repr__(self) -> str:
        return repr(self._names())


class Features(Mapping):
    """Each registered kind's feature names (a live view of the registry)."""

    def __getitem__(self, kind: str) -> tuple[str, ...]:
        return REGISTRY[kind].module.FEATURES

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRY)

    def __len__(self) -> int:
        return len(REGISTRY)


KINDS = KindNames()
FEATURES = Features()


def register(kind: Kind) -> None:
    """Add a kind (a test's toy kind: the shipped ones are listed above)."""
    REGISTRY[kind.name] = kind


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


def hold_downs(overrides: dict[str, float] | None = None) -> dict[str, float]:
    """Each kind's hold-down: the registry's, or the setting's where it names the kind."""
    return {k: (overrides or {}).get(k, e.hold_down_s) for k, e in REGISTRY.items()}


def colours() -> dict[str, str]:
    """Every kind's colour: the stream's own kinds, then the detectors'."""
    return {**STREAM_KINDS, **COST_KINDS, **{k: e.colour for k, e in REGISTRY.items()}}


def module(kind: str) -> ModuleType:
    return REGISTRY[kind].module


@dataclass
class Detection:
    """What the processors need to detect: the model, and optionally a recorder of every window's features
    (for training)."""

    model: Any                        # models.artifact.Model
    recorder: Recorder | None = None


class NodeDetectors:
    """The node-stage detectors of one node, by kind, in registry order."""

    __slots__ = ("detectors",)

    def __init__(self) -> None:
        self.detectors: dict[str, Detector] = {kind: e.module.Detector() for kind, e in REGISTRY.items()
                                               if e.module.STAGE == "node"}

    def add(self, msg, detection: Detection, out: Output, tenant_of: dict) -> NodeFlags:
        ctx = NodeContext(out, tenant_of, detection.recorder, NodeFlags())
        for kind, d in self.detectors.items():
            d.add(msg, detection.model.kinds[kind], ctx)
        return ctx.flags

    def silence(self, ts: float, out: Output) -> None:
        """The node stopped reporting at ``ts``: every incident of its detectors resolves, "no telemetry since"."""
        for d in self.detectors.values():
            d.silence(ts, out)

    def end(self, ts: float, out: Output) -> None:
        for d in self.detectors.values():
            d.end(ts, out)

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
        self.detectors: dict[str, Detector] = {kind: e.module.Detector() for kind, e in REGISTRY.items()
                                               if e.module.STAGE == "job"}

    def add(self, item: JobItem, detection: Detection, ctx: JobContext) -> None:
        for kind, d in self.detectors.items():
            d.add(item, detection.model.kinds[kind], ctx)

    def end(self, ts: float, out: Output) -> None:
        for d in self.detectors.values():
            d.end(ts, out)

    def node_silent(self, node: str, ts: float, out: Output) -> None:
        """One of the job's nodes stopped reporting at ``ts``: the incidents on it resolve, "no telemetry since"."""
        for d in self.detectors.values():
            d.silence(ts, out, node)

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
