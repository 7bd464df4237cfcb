"""The IO starvation detector of one node: its messages in, an epoch judged per job, incidents out."""
from __future__ import annotations

import math

from gpufleet.contracts.output import Output

from ..base import (
    EPOCH_S,
    Decider,
    Incidents,
    Judge,
    NodeContext,
    Seen,
    StateError,
    mean,
    not_nan,
    window_s,
)
from .constants import KIND, PERCENT, SECONDS_PER_MINUTE, USUAL_TAU_S
from .features import FEATURES, features
from .rules import decide, held_back
from .seen import StarvedSeen
from .window import GpuWindow, HostWindow
from .wording import cause, describe


class Detector:
    """The IO starvation detector of one node."""

    __slots__ = ("gpus", "host", "epoch", "interval", "incidents", "held")

    def __init__(self) -> None:
        self.gpus: dict[str, GpuWindow] = {}     # each with its GPU's usual utilization
        self.held: set[str] = set()              # jobs judged starved at the last epoch but held back
        self.host = HostWindow()
        self.epoch: int | None = None
        self.interval = 5.0
        self.incidents = Incidents()

    def add(self, msg, decider: Decider, ctx) -> None:
        """One node message (in ts order); GPUs in ``ctx.flags.quiet`` (just restarted) are left out, and
        the jobs starved of input go into ``ctx.flags.starved``."""
        self._add(msg, decider, ctx)
        ctx.flags.starved |= self.starved_jobs()

    def _add(self, msg, decider: Decider, ctx: NodeContext) -> None:
        ts = msg.ts
        self.interval = msg.interval_s or self.interval
        epoch_s = max(EPOCH_S, self.interval)
        epoch = int(ts // epoch_s)
        if self.epoch is not None and epoch > self.epoch:
            self._evaluate(msg.node, msg.pool, (self.epoch + 1) * epoch_s, decider, ctx)
        self.epoch = epoch
        host = msg.host
        if host is not None:
            self.host.append(ts, host.iowait_pct, host.disk_read_bytes_per_s, host.net_rx_bytes_per_s,
                             host.cpu_util_pct)
        else:
            self.host.append(ts, None, None, None, None)
        cutoff = ts - window_s(self.interval)
        self.host.drop_through(cutoff)
        for g in msg.gpus:
            w = self.gpus.get(g.uuid)
            if w is None:
                w = self.gpus[g.uuid] = GpuWindow()
            w.add(ts, g.util_pct, 1.0 if g.processes else 0.0, g.job, g.index, cutoff)
        for uuid in [u for u, w in self.gpus.items() if not w.data or w.last_ts() <= cutoff]:
            del self.gpus[uuid]

    def _evaluate(self, node: str, pool, at: float, decider: Decider, ctx: NodeContext) -> None:
        out, tenant_of, quiet, recorder = ctx.out, ctx.tenant_of, ctx.flags.quiet, ctx.recorder
        start = at - window_s(self.interval)
        by_job: dict[str, tuple[list[float], list[float], set[float]]] = {}   # utils, has_process, GPU indices
        job_usual: dict[str, list[float]] = {}
        for uuid, w in self.gpus.items():
            i, j = w.span(start, at)
            if j > i:                    # a GPU handed to another job in the window: only the new job's samples
                i = w.since_job(i, j)
            _, util, has_process, index = w.columns(i, j)
            u = not_nan(util)
            now = sum(u) / len(u) if u else None
            if recorder is not None and now is not None:     # per GPU, for the idle baselines of the evaluation
                last_job = w.last_job()
                recorder("idle", f"idle:{uuid}", at, [now / PERCENT, max(u) / PERCENT,
                                                       1.0 if last_job is not None else 0.0],
                         Seen(node=node, gpu_uuid=uuid, job=last_job))
            job = w.job_of(j - 1) if j > i else None
            if job is None:
                continue
            before = w.usual
            if before is not None and w.usual_job != job:
                before = None            # the usual work of another job says nothing of this one's
            if before is not None and uuid not in quiet:
                job_usual.setdefault(job, []).append(before)
            if now is not None:          # the usual level moves towards this window's, by the time passed
                w.usual = now if before is None else \
                    before + (now - before) * (1.0 - math.exp(-(at - w.usual_at) / USUAL_TAU_S))
                w.usual_at, w.usual_job = at, job
            if uuid not in quiet:
                utils, processes, indices = by_job.setdefault(job, ([], [], set()))
                utils.extend(util)
                processes.extend(has_process)
                indices.update(index)
        host = self.host.between(start, at)
        seen, held = set(), set()
        judged = [(job, len(indices), features(utils, has_process, host,
                                               mean(job_usual[job]) if job in job_usual else None))
                  for job, (utils, has_process, indices) in sorted(by_job.items())]
        scores = decider.score_many([x for _, _, x in judged])
        epoch = []
        for (job, gpus, x), score in zip(judged, scores):
            target = f"{node}/{job}"
            path, also = cause(x)
            f = dict(zip(FEATURES, x))
            info = StarvedSeen(node=node, job=job, tenant=tenant_of.get(job), pool=pool, score=round(score, 4),
                               gpus=gpus, util=f["util_mean"] * PERCENT,
                               iowait=f["iowait"] * PERCENT, disk=f["disk_read_gbps"], net=f["net_rx_gbps"],
                               cpu=f["host_cpu"] * PERCENT, cause=path, also_seen=also, target=target,
                               window_min=window_s(self.interval) / SECONDS_PER_MINUTE)
            epoch.append((f"{KIND}:{target}", x, info, score))
        for (key, x, info, _), positive in zip(epoch, decide(epoch, decider)):
            seen.add(key)
            if recorder is not None:
                recorder(KIND, key, at, x, info)
            if positive and held_back(key, info, self.incidents):
                positive = False
                held.add(str(info.job))  # not paged, but starved with the node's input path: not a straggler
            self.incidents.observe(key, positive, at, info, Judge(decider, out, describe))
        self.held = held
        for key in self.incidents.keys(f"{KIND}:"):
            if key not in seen:
                self.incidents.observe(key, False, at, None, Judge(decider, out, describe))

    @property
    def usual(self) -> dict[str, tuple[float, float, str]]:
        """Each GPU's usual utilization, when it was last moved and the job it is of, by uuid (where known)."""
        return {u: (w.usual, w.usual_at, w.usual_job) for u, w in self.gpus.items() if w.usual is not None}

    def starved_jobs(self) -> set[str]:
        """Jobs with an IO starvation incident open (or under way) on this node, and those judged starved at the
        last epoch but held back (:func:`held_back`): the other detectors leave them all out alike."""
        return {k.split("/", 1)[1] for k in self.incidents.keys(f"{KIND}:")} | self.held

    def silence(self, ts: float, out: Output, node: str | None = None) -> None:
        """The node stopped reporting at ``ts``: its incidents resolve, "no telemetry since"."""
        self.incidents.close_all(ts, describe, out, "no_telemetry")

    def end(self, ts: float, out: Output) -> None:
        """A node's detector never ends: the node goes silent instead."""

    def to_state(self) -> dict:
        return {"gpus": {u: w.to_state() for u, w in self.gpus.items()},
                "host": self.host.to_state(), "epoch": self.epoch, "interval": self.interval,
                "incidents": self.incidents.to_state(), "usual": {u: list(p) for u, p in self.usual.items()},
                "held": sorted(self.held)}

    @classmethod
    def from_state(cls, state: dict) -> Detector:
        d = cls()
        try:
            d.gpus = {u: GpuWindow.from_state(w, "IO starvation detector") for u, w in state["gpus"].items()}
            d.host = HostWindow.from_state(state["host"], "IO starvation detector")
            d.epoch, d.interval = state["epoch"], state["interval"]
            d.incidents = Incidents.from_state(state["incidents"], StarvedSeen)
            d.held = {str(job) for job in state.get("held", ())}          # absent: saved before it was kept
            for u, (v, at, job) in state.get("usual", {}).items():
                w = d.gpus.get(u)        # a GPU's usual level goes with its window
                if w is not None:
                    w.usual, w.usual_at, w.usual_job = float(v), float(at), str(job)
        except (KeyError, AttributeError, TypeError, ValueError):
            raise StateError("IO starvation detector: saved state lacks gpus, host, epoch, interval or "
                             "incidents") from None
        return d
