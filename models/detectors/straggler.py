"""Stragglers: a GPU, or a whole node, that a synchronous job waits for.

State: per GPU of the job (from every node, on the job stage), its last window of samples:
utilization, SM clock and its maximum, power and its limit, temperature, throttle reasons; and, per
node and GPU, until when the other detectors say to leave it out.

Every epoch the job's GPUs are compared, each against the median of the *others* (so one slow GPU does
not pull its own reference down): how far behind in SM clock (as a share of each GPU's own maximum, so
GPUs of different models compare), in utilization and power (as a share of each GPU's limit), how much
more it is throttled than its peers (throttling every GPU shares, a hot row or a power event, is not a
straggler), its excess temperature. A whole node counts as its typical GPU, against the other nodes.

When the question applies (``applies``), and what is evidence:

- only jobs that are working: the job's median utilization at least ``WORKING_UTIL`` (a checkpoint, an
  evaluation pause, a service at low load are not judged); idle or lightly loaded replicas never are
  judged, and a clock difference counts only between GPUs that are busy (an idle GPU parks its clock,
  which says nothing);
- only jobs whose GPUs work in lockstep, told from how their utilization moves (``lockstep``): every
  step of a synchronous job waits for all its GPUs, so when the job's pace changes (a checkpoint, an
  evaluation, a stall, a slow peer) every GPU's utilization changes together. Each epoch the job keeps
  its GPUs' mean utilization; over the last ``LOCKSTEP_EPOCHS`` epochs a GPU *moved alone* when its
  utilization changed by ``BIG_MOVE`` points or more from one epoch to the next and fewer than a third
  of the job's other GPUs moved the same way by half as much, then or one epoch before or after (nodes
  sampled every minute see a shared pause at different moments). When at least half of the job's GPUs (and
  at least two) moved alone, the job runs independent work (a batch sweep, replicas of a service): it is
  not judged. One GPU, or one node of several, moving alone is what a straggler looks like, and GPUs
  that hold steady give no evidence either way: those jobs are judged;
- not while a node of the job is starved of input (IO starvation takes precedence: every GPU then waits,
  and the page would name the wrong GPUs), nor on a GPU whose process just restarted (a leak's OOM);
- a window is positive only when the GPU (or node) is at least ``MIN_SLOWDOWN`` behind its peers in clock
  or utilization, whatever the trees score: throttled like the rest of its job, it keeps nobody waiting;
- behind in utilization with its clock level with its peers' (a GPU its host or link feeds slowly), only in
  a job whose GPUs were seen pausing together since it began (``paused_together``: from an epoch where the
  job worked, at least two GPUs and two thirds of them fell by half a big move, one by a big move, in the same
  epoch or the next; a checkpoint, an evaluation, a stall every GPU waits through). GPUs of independent work
  held at different steady levels look exactly like that deficit and never pause together.

Precedence: memory leak restart > IO starvation > straggler; the evidence names the cause (the throttle
reason, or a slow GPU without throttling: its host, link or input) and what else was seen.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import pairwise
from operator import sub
from typing import NamedTuple, Self

from gpufleet.contracts.jobsample import CLOCK, CLOCK_MAX, INDEX, POWER, POWER_LIMIT, TEMP, THROTTLE, UTIL, UUID
from gpufleet.contracts.output import Output
from gpufleet.contracts.telemetry import BENIGN_CLOCK_EVENTS

from .base import (
    EPOCH_S,
    NAN,
    POWER_CAP_BIT,
    Decider,
    Incident,
    Incidents,
    Recorder,
    StateError,
    Window,
    add_run,
    clip,
    event,
    forget_runs,
    known_mean,
    median,
    minutes,
    runs_of,
    throttle_text,
    union,
    window_s,
)

KIND = "straggler"
EPOCH = "job"                # decide() takes one job's epoch: every GPU and node of the job at once
STAGE = "job"
LEVEL = "gpu"
FEATURES = ("clock_deficit", "util_behind", "util_ahead", "power_deficit", "throttle_frac", "throttle_excess",
            "cap_frac", "temp_excess", "job_util", "busy_frac", "samples_frac", "slowdown", "multi_node")
WORKING_UTIL = 40.0          # the job's median utilization under which it is not judged
LOCKSTEP_EPOCHS = 20         # epochs of per-GPU utilization kept to tell lockstep (10 minutes at 30 s)
BIG_MOVE = 15.0              # points of utilization from one epoch to the next that count as a move
BUSY_UTIL = 50.0             # samples at or above it are busy: clocks compare only between those
MIN_SLOWDOWN = 0.03          # behind its peers by less (clock or utilization), nobody waits for it
_SLOWDOWN = FEATURES.index("slowdown")
_CLOCK_DEFICIT = FEATURES.index("clock_deficit")
_TENTHS_MAX = 3000.0         # a lockstep history's utilization kept in 16-bit tenths below this (any percent is)


class JobWindow(Window):
    """One GPU's samples in a job's window: time, utilization, clock and power (shares of the GPU's maximum) and
    temperature in the window's array; the throttle reasons, which seldom change, as runs (a value, NaN where not
    reported, and how many samples in a row had it: a double a sample held 480 bytes a GPU in a minute sampled
    every second, a run 16, one or two a window). The columns read and saved are as before: ``COLUMNS``, the
    throttle reasons as integers in saved state."""

    __slots__ = ("throttle",)
    FIELDS = ("ts", "util", "clock", "power", "temp")
    COLUMNS = ("ts", "util", "clock", "power", "throttle", "temp")

    def __init__(self) -> None:
        super().__init__()
        self.throttle: list = []              # value, count; two runs in a row differ in value

    def append(self, ts: float, util: float | None, clock: float | None, power: float | None,  # type: ignore[override]
               throttle: float | None, temp: float | None) -> None:
        super().append(ts, util, clock, power, temp)
        add_run(self.throttle, NAN if throttle is None else float(throttle))   # a double, as the array held it

    def _throttles(self, i: int, j: int) -> list:
        """The throttle reasons of samples ``i`` to ``j`` (past the last)."""
        return runs_of(self.throttle, 2, 0, i, j)

    def columns(self, i: int, j: int) -> list[list[float]]:
        """Samples ``i`` to ``j`` (past the last), one list per field of ``COLUMNS``."""
        ts, util, clock, power, temp = super().columns(i, j)
        return [ts, util, clock, power, self._throttles(i, j), temp]

    def drop_through(self, cutoff: float) -> int:
        n = Window.drop_through(self, cutoff)
        forget_runs(self.throttle, 2, n)
        return n

    def to_state(self) -> dict:
        saved = super().to_state()
        ts, util, clock, power, temp = (saved[name] for name in self.FIELDS)
        throttle = [None if v != v else int(v) for v in self._throttles(0, len(self))]
        return {"ts": ts, "util": util, "clock": clock, "power": power, "throttle": throttle, "temp": temp}

    @classmethod
    def from_state(cls, state: dict, what: str) -> Self:
        wrong = StateError(f"{what}: a saved window needs the columns {list(cls.COLUMNS)}")
        try:
            w = super().from_state(state, what)
            throttle = state["throttle"]
            if not isinstance(throttle, list) or len(throttle) != len(w):
                raise wrong
            for v in throttle:
                add_run(w.throttle, NAN if v is None else float(v))
        except (StateError, KeyError, TypeError, ValueError):
            raise wrong from None
        return w


W_THROTTLE = JobWindow.COLUMNS.index("throttle")


class Stats(NamedTuple):
    """One GPU (or node) over one window."""

    util: float
    clock: float                 # mean clock share over its busy samples (nan if none)
    power: float                 # mean power share over its busy samples
    temp: float
    throttled: float             # share of samples throttled for another reason than the power cap
    capped: float                # share of samples at the power cap
    busy: float                  # share of busy samples
    samples: int


def _bits(throttle: Iterable[float]) -> list[int]:
    """Throttle reasons kept as doubles, as integers (0 when not reported)."""
    return [int(b) if b == b else 0 for b in throttle]


def _stats(columns: Sequence[list[float]]) -> Stats | None:
    """One GPU's window, as :meth:`JobWindow.between` gives it: a column per field, NaN where not reported."""
    _, util, clock, power, throttle, temp = columns
    total = sum(util)
    if total != total:               # some samples without utilization: the others only
        seen = [i for i, u in enumerate(util) if u == u]
        if not seen:
            return None
        util, clock, power, throttle, temp = ([c[i] for i in seen] for c in (util, clock, power, throttle, temp))
        total = sum(util)
    n = len(util)
    busy = [i for i, u in enumerate(util) if u >= BUSY_UTIL]
    if len(busy) < n:
        clock, power, temp = ([c[i] for i in busy] for c in (clock, power, temp))
    if sum(throttle) == 0:           # none throttled (the usual case; reasons are never negative)
        throttled = capped = 0.0
    else:
        bits = _bits(throttle)
        throttled = sum(1 for b in bits if b & ~(POWER_CAP_BIT | BENIGN_CLOCK_EVENTS)) / n
        capped = sum(1 for b in bits if b & POWER_CAP_BIT) / n
    return Stats(total / n, known_mean(clock), known_mean(power), known_mean(temp), throttled, capped, len(busy) / n, n)


def _typical(gpus: list[Stats]) -> Stats:
    """A node as its typical GPU: the median of each measure (one slow GPU does not make a node slow)."""
    def known(values):
        return median([v for v in values if v == v])
    return Stats(median([g.util for g in gpus]), known(g.clock for g in gpus), known(g.power for g in gpus),
                 known(g.temp for g in gpus), median([g.throttled for g in gpus]),
                 median([g.capped for g in gpus]), median([g.busy for g in gpus]),
                 int(median([g.samples for g in gpus])))


def _deficit(mine: float, peers: float) -> float:
    """How far below its peers, as a share of the peers' value (0 when level or above, or unknown)."""
    if not peers or peers != peers or mine != mine:
        return 0.0
    return clip(1.0 - mine / peers, -0.5, 1.0)


def features(stats: dict[str, Stats], expected_samples: int, multi_node: bool,
             peers: dict[str, Peers] | None = None) -> dict[str, list[float]]:
    """Per GPU (or node) of one job over one window: how far it is behind the others (``peers``: the medians of
    the others, :func:`peer_medians`, when already computed)."""
    out: dict[str, list[float]] = {}
    if len(stats) < 2:
        return out
    job_util = median([s.util for s in stats.values()])
    peers = peers if peers is not None else peer_medians(stats)
    for name, s in stats.items():
        p_util, p_clock, p_power, p_temp, p_throttled = peers[name]
        clock_deficit = _deficit(s.clock, p_clock)
        behind = clip((p_util - s.util) / 100.0, -0.5, 1.0)
        x = [clock_deficit, max(0.0, behind), max(0.0, -behind), _deficit(s.power, p_power), s.throttled,
             s.throttled - p_throttled, s.capped,
             clip(s.temp - p_temp, -20.0, 40.0) if s.temp == s.temp and p_temp == p_temp else 0.0,
             job_util / 100.0, s.busy, min(1.0, s.samples / max(1, expected_samples)),
             max(clock_deficit, behind), 1.0 if multi_node else 0.0]
        out[name] = [0.0 if v != v else v for v in x]
    return out


class Peers(NamedTuple):
    """The medians of the other GPUs (or nodes) of the job: utilization, clock, power, temperature, throttling
    (clock, power and temperature over those that have a value)."""

    util: float
    clock: float
    power: float
    temp: float
    throttled: float


def peer_medians(stats: dict[str, Stats]) -> dict[str, Peers]:
    """For each member, the medians of the others, from one sort per measure: ``median`` of the others' values
    to the last bit, without a list and a sort per member."""
    columns = [_without_each([getattr(s, field) for s in stats.values()], known_only=field in _KNOWN_ONLY)
               for field in Peers._fields]
    return {name: Peers(*(column[i] for column in columns)) for i, name in enumerate(stats)}


_KNOWN_ONLY = ("clock", "power", "temp")        # measures a GPU may lack (NaN): medians over those that have one


def _without_each(values: list[float], known_only: bool) -> list[float]:
    """``median`` of the values without each one in turn (without the NaN ones too, when ``known_only``)."""
    order = sorted((i for i, v in enumerate(values) if v == v or not known_only), key=values.__getitem__)
    ranked = [values[i] for i in order]          # a stable sort: with one member taken out, the others' sort
    rank = {i: r for r, i in enumerate(order)}
    out = []
    for i in range(len(values)):
        r = rank.get(i)
        n = len(ranked) - (r is not None)
        if n == 0:
            out.append(float("nan"))
            continue
        mid = n // 2
        hi = ranked[mid + 1] if r is not None and mid >= r else ranked[mid]
        if n % 2:
            out.append(hi)
        else:
            lo = ranked[mid] if r is not None and mid - 1 >= r else ranked[mid - 1]
            out.append((lo + hi) / 2)
    return out


def lockstep(history: Sequence[dict[str, float]]) -> bool:
    """Whether the job's GPUs move together (see the module docstring): ``history`` holds, per epoch, each
    GPU's mean utilization. False only when at least half of the job's GPUs, and at least two, moved
    alone: a big move that fewer than a third of the others shared, in the same epoch or the one before or
    after (nodes sampled every minute at other moments see one pause in neighbouring epochs)."""
    return _lockstep([(tuple(epoch), list(epoch.values())) for epoch in history])


def _lockstep(epochs: Iterable[tuple[tuple[str, ...], Sequence[float]]]) -> bool:
    """:func:`lockstep` over epochs kept as the GPUs' names and their utilizations in that order (epochs that saw
    the same GPUs share one tuple of names): each step from one epoch to the next is one subtraction per GPU, and
    only a step that holds a big move is looked at GPU by GPU."""
    steps = _steps(epochs)
    alone: set[str] = set()
    seen: set[str] = set()
    for i, (names, moves) in enumerate(steps):
        seen.update(names)
        if not moves or max(map(abs, moves)) < BIG_MOVE:
            continue
        near = steps[max(0, i - 1):i + 2]
        gpus = {w for step_names, _ in near for w in step_names}
        # who moved up (down) by at least half a big move, in this step or the one before or after
        up = {w for step_names, step in near for w, v in zip(step_names, step) if v >= BIG_MOVE / 2}
        down = {w for step_names, step in near for w, v in zip(step_names, step) if v <= -BIG_MOVE / 2}
        for u, d in zip(names, moves):
            if u in alone or abs(d) < BIG_MOVE:
                continue
            same_way = up if d > 0 else down
            along = len(same_way) - (u in same_way)
            if 3 * along < len(gpus) - (u in gpus):
                alone.add(u)
    return len(alone) < max(2, (len(seen) + 1) // 2)


def _steps(epochs: Iterable[tuple[tuple[str, ...], Sequence[float]]]) -> list[tuple[tuple[str, ...], list[float]]]:
    """Each step from one epoch to the next: the GPUs seen in both and how their utilization changed."""
    steps: list[tuple[tuple[str, ...], list[float]]] = []
    for (names_before, before), (names, after) in pairwise(epochs):
        if names is names_before or names == names_before:
            steps.append((names, list(map(sub, after, before))))
        else:
            was = dict(zip(names_before, before))
            kept = [(u, a - was[u]) for u, a in zip(names, after) if u in was]
            steps.append((tuple(u for u, _ in kept), [d for _, d in kept]))
    return steps


def paused_together(history: Sequence[dict[str, float]]) -> bool:
    """Whether the job's GPUs were seen pausing together (see the module docstring): ``history`` as for
    :func:`lockstep`."""
    return _paused_together([(tuple(epoch), list(epoch.values())) for epoch in history])


def _paused_together(epochs: Sequence[tuple[tuple[str, ...], Sequence[float]]]) -> bool:
    """:func:`paused_together` over epochs kept as :class:`Epochs` keeps them: in the last step, from an epoch
    where the job worked (median utilization at least ``WORKING_UTIL``), at least two GPUs and two thirds of
    them fell by half a big move or more and one of them by a big move, in that step or the one before
    (nodes sampled every minute see one pause in neighbouring epochs). Asked every epoch, so every step
    of the history is asked once while it is the last or the one before."""
    if len(epochs) < 3:
        return False
    (names0, before0), (names1, before1), _ = epochs[-3:]
    steps = _steps(epochs[-3:])
    if max(median(list(before0)), median(list(before1))) < WORKING_UTIL:
        return False
    fell = {u for names, moves in steps for u, d in zip(names, moves) if d <= -BIG_MOVE / 2}
    big = any(d <= -BIG_MOVE for _, moves in steps for d in moves)
    gpus = set(names0) | set(names1)
    return big and len(fell) >= 2 and 3 * len(fell) >= 2 * len(gpus)


def applies(x: list[float]) -> bool:
    """Judged only while the job works (see the module docstring)."""
    return x[FEATURES.index("job_util")] * 100.0 >= WORKING_UTIL


def baseline(x: list[float]) -> bool:
    """The rule an operator writes first: throttled (not at the power cap) for half the window."""
    return x[FEATURES.index("throttle_frac")] >= 0.5


class Epochs:
    """A job's lockstep history: its last :data:`LOCKSTEP_EPOCHS` epochs, each the GPUs' names (one tuple shared
    by the epochs that saw the same GPUs) and their utilizations in that order, every epoch's in one array (an
    array per epoch cost its header per job and epoch: 2.5 kB for a single-GPU job's 20 epochs, now 0.4 kB). The
    utilizations are kept to a tenth of a point, so the array holds 16-bit tenths (2 bytes a value, not 8), each
    reading back as the double it came as; a value that is not a tenth within 16 bits (none from the detector)
    turns the array into doubles. Iterated, it gives each epoch's ``(names, utilizations)``, oldest first."""

    __slots__ = ("names", "values")

    def __init__(self) -> None:
        self.names: list[tuple[str, ...]] = []
        self.values: array = array("h")      # tenths ("h"), or doubles ("d") once a value is not a tenth

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[tuple[tuple[str, ...], Sequence[float]]]:
        return self._from(self.names, 0)

    def last(self, n: int) -> list[tuple[tuple[str, ...], Sequence[float]]]:
        """The last ``n`` epochs (fewer when fewer are kept), as iteration gives them."""
        names = self.names[-n:]
        return list(self._from(names, len(self.values) - sum(map(len, names))))

    def _from(self, names: list[tuple[str, ...]], at: int) -> Iterator[tuple[tuple[str, ...], Sequence[float]]]:
        """The epochs of ``names``, the first of them at ``at`` in the values."""
        values = self.values
        tenths = values.typecode == "h"
        for epoch in names:
            end = at + len(epoch)
            yield epoch, [v / 10 for v in values[at:end]] if tenths else values[at:end]
            at = end

    def append(self, names: tuple[str, ...], utils: Iterable[float]) -> None:
        if self.names and self.names[-1] == names:
            names = self.names[-1]
        self.names.append(names)
        if self.values.typecode == "h":
            utils = list(utils)
            tenths = [round(v * 10) if v == v and abs(v) < _TENTHS_MAX else 0 for v in utils]
            if all(t / 10 == v for t, v in zip(tenths, utils)):
                self.values.extend(tenths)
            else:
                self.values = array("d", [t / 10 for t in self.values])
                self.values.extend(utils)
        else:
            self.values.extend(utils)
        if len(self.names) > LOCKSTEP_EPOCHS:
            del self.values[:len(self.names.pop(0))]

    def clear(self) -> None:
        self.names, self.values = [], array("h")


class Detector:
    """The straggler detector of one job."""

    __slots__ = ("gpus", "where", "epoch", "incidents", "interval", "intervals", "quiet", "history", "paused")

    def __init__(self) -> None:
        self.gpus: dict[str, JobWindow] = {}
        self.where: dict[str, tuple[str, int]] = {}     # uuid -> (node, index)
        self.epoch: int | None = None
        self.interval = 5.0                             # the slowest of its nodes' sampling intervals
        self.intervals: dict[str, float] = {}           # node -> its sampling interval
        self.quiet: dict[str, float] = {}               # node or GPU uuid -> until when it is left out
        # per epoch: the GPUs (one tuple shared by the epochs that saw the same GPUs) and their utilization
        self.history = Epochs()
        self.paused = False                             # its GPUs seen pausing together since the job began
        self.incidents = Incidents()

    def add(self, job: str, ts: float, node: str, sample: dict, tenant, pool, decider: Decider, out: Output,
            recorder: Recorder | None) -> None:
        """One node's job sample (in (ts, node) order); its ``io``/``quiet`` flags come from the node stage."""
        if sample.get("interval"):
            self.intervals[node] = sample["interval"]
        if self.intervals:
            self._pace()
        epoch_s = max(EPOCH_S, self.interval)
        epoch = int(ts // epoch_s)
        if self.epoch is not None and epoch > self.epoch:
            self.evaluate(job, (self.epoch + 1) * epoch_s, tenant, pool, decider, out, recorder)
        self.epoch = epoch
        wait = window_s(self.interval)
        if sample.get("io"):
            self.quiet[node] = ts + wait               # a starved node: the job is not judged meanwhile
        for uuid in sample.get("quiet", ()):
            self.quiet[uuid] = ts + wait
        cutoff = ts - wait
        for g in sample["gpus"]:        # a job sample's GPUs (gpufleet/contracts/jobsample.py)
            uuid = g[UUID]
            w = self.gpus.get(uuid)
            if w is None:
                w = self.gpus[uuid] = JobWindow()
            clock = g[CLOCK] / g[CLOCK_MAX] if g[CLOCK] is not None and g[CLOCK_MAX] else None
            power = g[POWER] / g[POWER_LIMIT] if g[POWER] is not None and g[POWER_LIMIT] else None
            w.append(ts, g[UTIL], clock, power, g[THROTTLE], g[TEMP])
            self.where[uuid] = (node, g[INDEX])
            w.drop_through(cutoff)

    def _pace(self) -> None:
        """The job's epoch and window follow its slowest node: nodes sampled every 5 s and every 60 s in one job
        share one epoch of 60 s and compare windows of 3 minutes. The epoch reached so far is kept, counted in
        the new length (an epoch counted in another length would put an evaluation decades back, which finds no
        samples and so forgets the incidents on the way)."""
        interval = max(self.intervals.values())
        if interval != self.interval:
            if self.epoch is not None:
                self.epoch = int(self.epoch * max(EPOCH_S, self.interval) // max(EPOCH_S, interval))
            self.interval = interval

    def evaluate(self, job: str, at: float, tenant, pool, decider: Decider, out: Output,
                 recorder: Recorder | None) -> None:
        start = at - window_s(self.interval)
        self.quiet = {k: until for k, until in self.quiet.items() if until > start}
        windows: dict[str, list[list[float]]] = {}
        for uuid, w in list(self.gpus.items()):
            samples = w.between(start, at)
            if samples is None:
                if not len(w) or w.last_ts() <= start:
                    del self.gpus[uuid]
                    self.where.pop(uuid, None)
                continue
            windows[uuid] = samples
        present = {n for n, _ in self.where.values()}
        if any(n not in present for n in self.intervals):  # a node that left no longer sets the pace (next sample)
            self.intervals = {n: v for n, v in self.intervals.items() if n in present}
        expected = max(1, round(window_s(self.interval) / self.interval))
        stats = {u: s for u, s in ((u, _stats(w)) for u, w in windows.items()) if s is not None}
        self._remember({u: round(s.util, 1) for u, s in stats.items()})   # as saved: a restore changes nothing
        nodes = sorted({self.where[u][0] for u in stats})
        multi = len(nodes) >= 2
        independent = not _lockstep(self.history)        # independent work: nobody waits, not judged
        self.paused = self.paused or _paused_together(self.history.last(3))
        # nor while a node of the job is starved of input
        held = independent or any(n in self.quiet for n in nodes)
        entries: list[tuple[str, list[float], dict]] = []
        base = {"job": job, "tenant": tenant, "pool": pool, "independent": independent, "paused": self.paused}
        if multi:                    # a whole slow node, against the job's other nodes
            node_stats = {n: _typical([stats[u] for u in stats if self.where[u][0] == n]) for n in nodes}
            node_peers = peer_medians(node_stats)
            for n, x in features(node_stats, expected, True, node_peers).items():
                bits = union(b for u in windows if self.where[u][0] == n for b in _bits(windows[u][W_THROTTLE]))
                entries.append((n, x, {**base, "node": n, "target": n, "level": "node", "peers": len(nodes) - 1,
                                       "gpus": sum(1 for u in stats if self.where[u][0] == n), "bits": bits,
                                       **_numbers(node_stats, n, x, node_peers)}))
        peers = peer_medians(stats)
        for uuid, x in features(stats, expected, multi, peers).items():
            node, index = self.where[uuid]
            entries.append((uuid, x, {**base, "node": node, "gpu_uuid": uuid, "index": index, "target": uuid,
                                      "level": "gpu", "peers": len(stats) - 1,
                                      "bits": union(_bits(windows[uuid][W_THROTTLE])),
                                      "held": held or uuid in self.quiet, **_numbers(stats, uuid, x, peers)}))
        for _, _, info in entries:
            info.setdefault("held", held)
        scores = decider.score_many([x for _, x, _ in entries])
        scored = [(target, x, info, score) for (target, x, info), score in zip(entries, scores)]
        positives = decide(scored, decider)
        seen = set()
        for (target, x, info, score), positive in zip(scored, positives):
            key = f"{KIND}:{target}"
            seen.add(key)
            info["score"] = round(score, 4)
            if recorder is not None:
                recorder(KIND, key, at, x, info)
            self.incidents.observe(key, positive, at, decider, info, out, describe)
        for key in self.incidents.keys(f"{KIND}:"):
            if key not in seen:
                self.incidents.observe(key, False, at, decider, {}, out, describe)

    def _remember(self, utils: dict[str, float]) -> None:
        self.history.append(tuple(utils), utils.values())

    def epochs(self) -> list[dict[str, float]]:
        """The lockstep history, per epoch: each GPU's utilization."""
        return [dict(zip(names, utils)) for names, utils in self.history]

    def end(self, ts: float, out: Output) -> None:
        """The job is gone from every node."""
        self.incidents.close_all(ts, describe, out)
        self.gpus, self.where, self.epoch, self.quiet, self.paused, self.intervals = {}, {}, None, {}, False, {}
        self.history.clear()

    def to_state(self) -> dict:
        return {"gpus": {u: w.to_state() for u, w in self.gpus.items()},
                "where": {u: {"node": n, "index": i} for u, (n, i) in self.where.items()}, "epoch": self.epoch,
                "incidents": self.incidents.to_state(), "interval": self.interval, "intervals": self.intervals,
                "quiet": self.quiet,
                "history": _history_state(self.epochs()), "paused": self.paused}

    @classmethod
    def from_state(cls, state: dict) -> Detector:
        d = cls()
        try:
            d.gpus = {u: JobWindow.from_state(w, "straggler detector") for u, w in state["gpus"].items()}
            d.where = {u: (w["node"], w["index"]) for u, w in state["where"].items()}
            d.epoch, d.interval, d.quiet = state["epoch"], state["interval"], dict(state["quiet"])
            d.incidents = Incidents.from_state(state["incidents"])
            for epoch in _history_from_state(state.get("history")):      # absent: saved before it was kept
                d._remember(epoch)
            d.paused = bool(state.get("paused", False))                  # absent: saved before it was kept
            d.intervals = {str(n): float(v) for n, v in state.get("intervals", {}).items()}   # absent: likewise
        except (KeyError, AttributeError, TypeError):
            raise StateError("straggler detector: saved state lacks gpus, where, epoch, interval, quiet or "
                             "incidents") from None
        return d


def _history_state(history: list[dict[str, float]]) -> dict:
    """The lockstep history saved compactly: each GPU named once, utilization to a tenth of a point."""
    gpus = sorted({u for epoch in history for u in epoch})
    return {"gpus": gpus, "utils": [[None if u not in epoch else round(epoch[u], 1) for u in gpus]
                                    for epoch in history]}


def _history_from_state(saved: dict | None) -> list[dict[str, float]]:
    if not saved:
        return []
    gpus = saved["gpus"]
    return [{u: v for u, v in zip(gpus, utils) if v is not None} for utils in saved["utils"]]


def decide(scored: list[tuple[str, list[float], dict, float]], decider: Decider) -> list[bool]:
    """One epoch of one job: positive windows, where the question applies; a slow node's own alert covers
    its GPUs. Training replays recorded epochs through this same function."""
    def judged_slow(x: list[float], info: dict, score: float) -> bool:
        return not info.get("held") and applies(x) and score >= decider.threshold and x[_SLOWDOWN] >= MIN_SLOWDOWN \
            and (x[_CLOCK_DEFICIT] >= MIN_SLOWDOWN or info.get("paused", True))

    slow_nodes = {info["node"] for _, x, info, score in scored
                  if info.get("level") == "node" and judged_slow(x, info, score)}
    out = []
    for _, x, info, score in scored:
        positive = judged_slow(x, info, score)
        if info.get("level") == "gpu" and info["node"] in slow_nodes:
            positive = False
        out.append(positive)
    return out


def _numbers(stats: dict[str, Stats], name: str, x: list[float], peers: dict[str, Peers]) -> dict:
    s, p = stats[name], peers[name]
    return {"clock": s.clock, "peer_clock": p.clock, "util": s.util, "peer_util": p.util, "power": s.power,
            "peer_power": p.power, "throttled": s.throttled, "slowdown": x[FEATURES.index("slowdown")]}


def _r(v, digits: int = 1) -> float | None:
    return None if v is None or v != v else round(v, digits)


def describe(status: str, info: dict, st: Incident, resolved_at: float | None) -> dict:
    if info["level"] == "node":
        who = f"{info['node']} (all {info['gpus']} GPUs, job {info['job']})"
        peers = f"the job's other {info['peers']} nodes" if info["peers"] != 1 else "the job's other node"
    else:
        who = f"GPU {info['index']} on {info['node']} (job {info['job']})"
        peers = f"its {info['peers']} peers" if info["peers"] != 1 else "its one peer"
    bits = info["bits"] & ~POWER_CAP_BIT
    if info["throttled"] > 0.2 and throttle_text(bits):
        cause = throttle_text(bits)
    elif info["clock"] == info["clock"] and info["peer_clock"] == info["peer_clock"] and \
            info["clock"] < 0.97 * info["peer_clock"]:
        cause = "lower SM clock without a throttle reason"
    else:
        cause = "slower without throttling (its host, link or input)"
    also = [throttle_text(info["bits"] & POWER_CAP_BIT)] if info["bits"] & POWER_CAP_BIT else []
    if status == "firing":
        if info["clock"] == info["clock"] and info["peer_clock"] == info["peer_clock"] and \
                info["clock"] < 0.97 * info["peer_clock"]:
            why = f"SM clock at {info['clock']:.0%} of its maximum vs {info['peer_clock']:.0%} for its peers"
        else:
            why = f"utilization {info['util']:.0f}% vs {info['peer_util']:.0f}%, clocks normal"
        summary = f"{who} runs {info['slowdown']:.0%} behind {peers} for {minutes(st):.0f} min: {why} ({cause})"
    else:
        summary = f"{who} keeps pace with {peers} again (it lagged for {minutes(st, resolved_at):.0f} min)"
    evidence = {"cause": cause, "also_seen": also, "slowdown": round(info["slowdown"], 3),
                "sm_clock_share": _r(info["clock"], 3), "peers_sm_clock_share": _r(info["peer_clock"], 3),
                "util_pct": _r(info["util"]), "peers_util_pct": _r(info["peer_util"]),
                "power_share": _r(info["power"], 3), "peers_power_share": _r(info["peer_power"], 3),
                "throttled_share": round(info["throttled"], 3), "throttle_reasons": info["bits"],
                "peers": info["peers"], "level": info["level"], "score": info["score"]}
    return event(KIND, info["target"], status, st, resolved_at, info, summary, evidence)
