"""The memory leak detector of one node: a minute's peak per GPU, judged once a minute."""
from __future__ import annotations

from array import array
from dataclasses import replace

from gpufleet.contracts.output import Output

from ..base import (
    Decider,
    Incidents,
    Judge,
    Recorder,
    StateError,
)
from .constants import (
    BYTES_PER_GB,
    CRITICAL_MIN,
    HISTORY_MINUTES,
    KIND,
    LOAD_MINUTES,
    RELEASED_SHARE,
    RESTART_QUIET_S,
    SECONDS_PER_MINUTE,
)
from .features import features_many, oom_estimate, runaway
from .rules import at_limit, decide, ending, held_back, restart, shared, urgent
from .seen import LeakSeen
from .storage import MemoryTrack, Peaks
from .wording import describe


class Detector:
    """The leak detector of one node's GPUs."""

    __slots__ = ("tracks", "incidents")

    def __init__(self) -> None:
        self.tracks: dict[str, MemoryTrack] = {}
        self.incidents = Incidents()

    def add(self, msg, decider: Decider, ctx) -> None:
        """One node message (in ts order); the GPUs whose process just restarted go into ``ctx.flags.quiet``.
        The GPUs whose minute closed with it are judged together (their windows scored in one batch)."""
        due: list[tuple] = []
        gone: list[tuple] = []      # GPUs whose leaking process ended: (gpu now, its track, its ending or None)
        for g in msg.gpus:
            self._sample(msg, g, due, gone)
        for g, m, released in gone:                     # a leak lives and dies with its process
            key = f"{KIND}:{g.uuid}"
            st = self.incidents.by_key.get(key)
            if st is not None:
                assert isinstance(st.info, LeakSeen)
                st.info = replace(st.info, used_gb=m.last / BYTES_PER_GB, total_gb=m.total / BYTES_PER_GB)
                self.incidents.close(key, msg.ts, describe, ctx.out, released or ending(m, g.tenant, g.job, st.info))
        if due:
            items = [None if m is None else (m.minutes.doubles(), m.total, age, m.loads) for _, m, age, *_ in due]
            xs = features_many(items)
            runs = [None if item is None else runaway(*item[:3]) for item in items]
            self._evaluate(msg, [(g, x, pid, used, total, run)
                                 for (g, _, _, pid, used, total), x, run in zip(due, xs, runs)],
                           decider, ctx.out, ctx.recorder)
        ctx.flags.quiet |= self.restarted(msg.ts)

    def _sample(self, msg, g, due: list[tuple], gone: list[tuple]) -> None:
        used = g.mem_used_bytes
        if used is None or not g.mem_total_bytes:
            return
        ts, minute = msg.ts, int(msg.ts // SECONDS_PER_MINUTE)
        pid = g.processes[0].pid if g.processes else None
        m = self.tracks.get(g.uuid)
        # the same process letting go of much of its memory at the limit: the out-of-memory, caught
        released = m is not None and m.pid == pid is not None and at_limit(m.last, m.total) and \
            m.last - used >= RELEASED_SHARE * m.total
        if m is None or m.pid != pid or released:     # a new process (or one that OOMed): its history starts again
            if m is not None and m.pid is not None:
                gone.append((g, m, "out_of_memory" if released else None))
            restarted = ts if m is not None and not released and restart(m, pid, ts) else None
            m = self.tracks[g.uuid] = MemoryTrack(minute, used, Peaks(), array("d"), 0.0, 0, pid, ts,
                                                  g.mem_total_bytes, restarted)
        elif minute > m.minute:
            closed = m.peak
            m.minutes.append(closed)
            m.loads.append(m.util_sum / m.util_n if m.util_n else 0.0)
            m.minutes.keep(HISTORY_MINUTES)
            del m.loads[:-LOAD_MINUTES]
            m.minute, m.peak, m.util_sum, m.util_n = minute, g.mem_used_bytes, 0.0, 0
            # judged below with the other GPUs whose minute closed: (gpu, track or None, age in minutes, ...)
            due.append((g, m if m.pid is not None else None, (msg.ts - m.since) / SECONDS_PER_MINUTE, m.pid, closed,
                        m.total))
        m.peak = max(m.peak, used)
        m.last, m.job = used, g.job
        if g.util_pct is not None:
            m.util_sum += g.util_pct
            m.util_n += 1

    def restarted(self, ts: float) -> set[str]:
        """GPUs whose process restarted within ``RESTART_QUIET_S`` before ``ts``."""
        return {u for u, m in self.tracks.items()
                if m.restarted_at is not None and ts - m.restarted_at < RESTART_QUIET_S}

    def _evaluate(self, msg, due: list[tuple], decider: Decider, out: Output, recorder: Recorder | None) -> None:
        """The closed minutes of one message's GPUs, in the message's GPU order: ``(gpu, features or None,
        pid, the minute's peak, the GPU's memory, its :func:`runaway` or None)``."""
        judged = [(x, g.job) for g, x, *_ in due if x is not None]
        scores, flags = iter(decider.score_many([x for x, _ in judged])), iter(shared(judged))
        for g, x, pid, used, total, run in due:
            key = f"{KIND}:{g.uuid}"
            if x is None:
                if key in self.incidents.by_key:
                    self.incidents.observe(key, False, msg.ts, None, Judge(decider, out, describe))
                continue
            score = next(scores)
            oom, rate, over = oom_estimate(x)
            if run is not None and run[0] < oom:          # the nearest estimate: a runaway's own minutes
                oom, rate, over = run
            info = LeakSeen(node=msg.node, gpu_uuid=g.uuid, job=g.job, tenant=g.tenant, pool=msg.pool,
                            index=g.index, pid=pid, score=round(score, 4),
                            rate_gb_h=rate * total / BYTES_PER_GB, used_gb=used / BYTES_PER_GB,
                            total_gb=total / BYTES_PER_GB, to_oom_min=oom, rate_over_min=over,
                            severity="critical" if oom <= CRITICAL_MIN else "warning", shared=next(flags),
                            runaway=run is not None)
            if recorder is not None:
                recorder(KIND, key, msg.ts, x, info)
            positive, now = decide(x, score, decider, info), urgent(x, score, decider, info)
            if positive and not now and held_back(key, info, self.incidents):
                positive = False
            if not positive and at_limit(used, total) and self.incidents.is_open(key):
                continue            # stopped growing at the limit: not cleared (it runs out, or lets go, next)
            self.incidents.observe(key, positive, msg.ts, info, Judge(decider, out, describe), urgent=now)

    def silence(self, ts: float, out: Output, node: str | None = None) -> None:
        """The node stopped reporting at ``ts``: its incidents resolve, "no telemetry since"."""
        self.incidents.close_all(ts, describe, out, "no_telemetry")

    def end(self, ts: float, out: Output) -> None:
        """A node's detector never ends: the node goes silent instead."""

    def to_state(self) -> dict:
        return {"tracks": {u: m.to_state() for u, m in self.tracks.items()}, "incidents": self.incidents.to_state()}

    @classmethod
    def from_state(cls, state: dict) -> Detector:
        d = cls()
        try:
            d.tracks = {u: MemoryTrack.from_state(m) for u, m in state["tracks"].items()}
            d.incidents = Incidents.from_state(state["incidents"], LeakSeen)
        except (KeyError, AttributeError):
            raise StateError("memory leak detector: saved state lacks tracks or incidents") from None
        return d
