"""The straggler detector of one job: its samples in, an epoch judged, incidents out."""
from __future__ import annotations

from dataclasses import replace

from gpufleet.contracts.jobsample import CLOCK, CLOCK_MAX, INDEX, POWER, POWER_LIMIT, TEMP, THROTTLE, UTIL, UUID
from gpufleet.contracts.output import Output

from ..base import (
    EPOCH_S,
    Decider,
    Incidents,
    JobContext,
    JobItem,
    Judge,
    StateError,
    median,
    union,
    window_s,
)
from .constants import KIND
from .features import bits_of, features, peer_medians, stats_of, typical
from .rules import decide, lockstep_of, paused_together_of, urgent
from .seen import StragglerSeen
from .window import W_THROTTLE, Epochs, JobWindow, history_from_state, history_state
from .wording import describe, numbers


class Detector:
    """The straggler detector of one job."""

    __slots__ = ("gpus", "where", "epoch", "incidents", "interval", "intervals", "quiet", "history", "paused",
                 "limits")

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
        self.limits: dict[str, float] = {}              # uuid -> its latest power limit, W (where reported)
        self.incidents = Incidents()

    def add(self, item: JobItem, decider: Decider, ctx: JobContext) -> None:
        """One node's job sample (in (ts, node) order); its ``io``/``quiet`` flags come from the node stage."""
        ts, node, sample = item.ts, item.node, item.sample
        if sample.get("interval"):
            self.intervals[node] = sample["interval"]
        if self.intervals:
            self._pace()
        epoch_s = max(EPOCH_S, self.interval)
        epoch = int(ts // epoch_s)
        if self.epoch is not None and epoch > self.epoch:
            self.evaluate((self.epoch + 1) * epoch_s, decider, ctx)
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
            if g[POWER_LIMIT]:
                self.limits[uuid] = g[POWER_LIMIT]
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

    def evaluate(self, at: float, decider: Decider, ctx: JobContext) -> None:
        out, recorder = ctx.out, ctx.recorder
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
        stats = {u: s for u, s in ((u, stats_of(w)) for u, w in windows.items()) if s is not None}
        self._remember({u: round(s.util, 1) for u, s in stats.items()})   # as saved: a restore changes nothing
        nodes = sorted({self.where[u][0] for u in stats})
        multi = len(nodes) >= 2
        independent = not lockstep_of(self.history)        # independent work: nobody waits, not judged
        self.paused = self.paused or paused_together_of(self.history.last(3))
        # nor while a node of the job is starved of input
        held = independent or any(n in self.quiet for n in nodes)
        entries: list[tuple[str, list[float], StragglerSeen]] = []
        job = StragglerSeen(job=ctx.job, tenant=ctx.tenant, pool=ctx.pool, independent=independent,
                            paused=self.paused, window_s=at - start, held=held)   # what every entry shares
        if multi:                    # a whole slow node, against the job's other nodes
            node_stats = {n: typical([stats[u] for u in stats if self.where[u][0] == n]) for n in nodes}
            node_peers = peer_medians(node_stats)
            for n, x in features(node_stats, expected, True, node_peers).items():
                bits = union(b for u in windows if self.where[u][0] == n for b in bits_of(windows[u][W_THROTTLE]))
                entries.append((n, x, replace(
                    job, node=n, target=n, level="node", peers=len(nodes) - 1,
                    gpus=sum(1 for u in stats if self.where[u][0] == n), bits=bits,
                    **numbers(node_stats, n, x, node_peers),
                    **self._limits([u for u in stats if self.where[u][0] == n],
                                   [u for u in stats if self.where[u][0] != n]))))
        peers = peer_medians(stats)
        for uuid, x in features(stats, expected, multi, peers).items():
            node, index = self.where[uuid]
            entries.append((uuid, x, replace(
                job, node=node, gpu_uuid=uuid, index=index, target=uuid, level="gpu", peers=len(stats) - 1,
                bits=union(bits_of(windows[uuid][W_THROTTLE])), held=held or uuid in self.quiet,
                **numbers(stats, uuid, x, peers), **self._limits([uuid], [u for u in stats if u != uuid]))))
        scores = decider.score_many([x for _, x, _ in entries])
        scored = [(target, x, info, score) for (target, x, info), score in zip(entries, scores)]
        positives = decide(scored, decider)
        seen = set()
        for (target, x, info, score), positive in zip(scored, positives):
            key = f"{KIND}:{target}"
            seen.add(key)
            info.score = round(score, 4)
            if recorder is not None:
                recorder(KIND, key, at, x, info)
            self.incidents.observe(key, positive, at, info, Judge(decider, out, describe),
                                   urgent=positive and urgent(x, score, decider, info))
        for key in self.incidents.keys(f"{KIND}:"):
            if key not in seen:
                self.incidents.observe(key, False, at, None, Judge(decider, out, describe))

    def _limits(self, mine: list[str], others: list[str]) -> dict:
        """The power limit of a GPU (a node: its typical GPU's) and its peers' median, W (None where unknown)."""
        def typical_limit(uuids: list[str]) -> float | None:
            known = [self.limits[u] for u in uuids if u in self.limits]
            return median(known) if known else None
        return {"limit": typical_limit(mine), "peer_limit": typical_limit(others)}

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

    def silence(self, ts: float, out: Output, node: str | None = None) -> None:
        """A node of the job stopped reporting at ``ts``: the incidents on it (the node, its GPUs) resolve, "no
        telemetry since", and its GPUs leave the comparison (without ``node``: every node of the job)."""
        if node is None:
            for n in sorted({n for n, _ in self.where.values()} | set(self.intervals)):
                self.silence(ts, out, n)
            return
        gone = [u for u, (n, _) in self.where.items() if n == node]
        keys = [k for k in self.incidents.keys(f"{KIND}:") if k.split(":", 1)[1] in (node, *gone)]
        self.incidents.close_all(ts, describe, out, "no_telemetry", keys=keys)
        for u in gone:
            self.gpus.pop(u, None)
            self.where.pop(u, None)
            self.limits.pop(u, None)
        self.intervals.pop(node, None)

    def to_state(self) -> dict:
        return {"gpus": {u: w.to_state() for u, w in self.gpus.items()},
                "where": {u: {"node": n, "index": i} for u, (n, i) in self.where.items()}, "epoch": self.epoch,
                "incidents": self.incidents.to_state(), "interval": self.interval, "intervals": self.intervals,
                "quiet": self.quiet,
                "history": history_state(self.epochs()), "paused": self.paused, "limits": self.limits}

    @classmethod
    def from_state(cls, state: dict) -> Detector:
        d = cls()
        try:
            d.gpus = {u: JobWindow.from_state(w, "straggler detector") for u, w in state["gpus"].items()}
            d.where = {u: (w["node"], w["index"]) for u, w in state["where"].items()}
            d.epoch, d.interval, d.quiet = state["epoch"], state["interval"], dict(state["quiet"])
            d.incidents = Incidents.from_state(state["incidents"], StragglerSeen)
            for epoch in history_from_state(state.get("history")):      # absent: saved before it was kept
                d._remember(epoch)
            d.paused = bool(state.get("paused", False))                  # absent: saved before it was kept
            d.intervals = {str(n): float(v) for n, v in state.get("intervals", {}).items()}   # absent: likewise
            d.limits = {str(u): float(v) for u, v in state.get("limits", {}).items()}          # absent: likewise
        except (KeyError, AttributeError, TypeError):
            raise StateError("straggler detector: saved state lacks gpus, where, epoch, interval, quiet or "
                             "incidents") from None
        return d
