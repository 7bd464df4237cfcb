"""Idle windows and idle alerts, exactly as the idle rule defines them (docs/detectors/idle.md).

A rented GPU is idle while its ``util_pct`` is strictly below the threshold in
every sample. A run lasts from its first such sample to its latest one plus
one interval; a change of tenant, a sample at or above the threshold (or
without utilization), or a telemetry gap longer than three intervals ends it.
Once a run reaches the idle window it is an idle window that started at its
first sample: the alert fires on the sample that completed it and resolves
when the run ends. Samples arrive here in ts order (see eventtime.py).
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from gpufleet.contracts import tables
from gpufleet.contracts.events import UPDATE_EVERY_S, Facts, Told, Where, alert
from gpufleet.contracts.output import Output
from gpufleet.contracts.state import StateError, load_fields, save_fields
from gpufleet.contracts.telemetry import Telemetry

from .billing.prices import Tariff
from .config import StreamConfig

IDLE_WINDOWS = tables.IDLE_WINDOWS


@dataclass(slots=True)
class Run:
    """One GPU's run of idle samples."""

    start: float                  # ts of its first sample
    last: float                   # ts of its latest sample
    interval: float               # sampling interval of the latest sample
    tenant: str
    job: str | None
    index: int
    pool: str | None
    price: str                    # what one hour of this GPU costs its tenant (billing.prices), a decimal string
    samples: int = 0
    max_util: float = 0.0
    detected: float | None = None  # ts of the sample that completed the window
    told_at: float | None = None   # ts of its last firing event (an update every UPDATE_EVERY_S after the first)
    revision: int = 0              # firing events after the first

    def to_state(self) -> dict:
        return save_fields(self)

    @classmethod
    def from_state(cls, state: dict) -> Run:
        # told_at and revision came with updates: a run saved before counts as told when it was detected
        return load_fields(cls, {"told_at": state.get("detected"), "revision": 0, **state}, "idle run")

    @property
    def end(self) -> float:
        return self.last + self.interval

    @property
    def duration(self) -> float:
        return self.last + self.interval - self.start


def _money(amount: str | Decimal) -> str:
    """Money as a decimal string with 6 decimals, never a float."""
    return str(Decimal(amount).quantize(Decimal("0.000001")))


def _cost(run: Run) -> str:
    return _money(Decimal(run.price) * Decimal(str(round(run.duration, 3))) / Decimal(3600))


# an idle run's end, as a resolve's evidence ``resolution`` names it for every kind (models/detectors/base.py)
RESOLUTION = {"busy": "cleared", "rental ended": "rental_ended", "tenant changed": "rental_ended",
              "telemetry gap": "no_telemetry", "no utilization": "no_telemetry", "no telemetry": "no_telemetry"}


def _clock(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M")


def _label(node: str, run: Run) -> str:
    who = f"tenant {run.tenant}" + (f", job {run.job}" if run.job else "")
    return f"GPU {run.index} on {node} ({who})"


class IdleTracker:
    """Open idle runs of one node's GPUs, by GPU uuid."""

    __slots__ = ("runs",)

    def __init__(self):
        self.runs: dict[str, Run] = {}

    def add(self, msg: Telemetry, cfg: StreamConfig, out: Output, tariff: Tariff) -> None:
        """One message; ``tariff`` prices the idle time."""
        currency = tariff.config.currency
        ts, runs, threshold = msg.ts, self.runs, cfg.idle_threshold_pct
        interval = msg.interval_s or cfg.default_interval_s
        for g in msg.gpus:
            util, tenant = g.util_pct, g.tenant
            idle = tenant is not None and util is not None and util < threshold
            run = runs.get(g.uuid)
            if run is not None:
                if ts - run.last > 3 * run.interval:
                    reason = "telemetry gap"
                elif tenant != run.tenant:
                    reason = "rental ended" if tenant is None else "tenant changed"
                elif not idle:
                    reason = "busy" if util is not None else "no utilization"
                else:
                    reason = None
                if reason is not None:
                    self._end(msg.node, g.uuid, run, reason, util, out)
                    del runs[g.uuid]
                    run = None
            if not idle:
                continue
            assert tenant is not None and util is not None      # idle implies both
            if run is None:
                run = runs[g.uuid] = Run(start=ts, last=ts, interval=interval, tenant=tenant, job=g.job,
                                         index=g.index, pool=msg.pool,
                                         price=tariff.hourly(tenant, msg.pool, g.model, g.mig_profile, ts))
            run.last, run.interval = ts, interval
            run.samples += 1
            if util > run.max_util:
                run.max_util = util
            if run.detected is None:
                if run.duration >= cfg.idle_window_s:
                    run.detected = ts
                    self._firing(msg.node, g.uuid, run, cfg, currency, out)
            elif ts - (run.told_at or run.detected) >= UPDATE_EVERY_S:        # still idle: its numbers now
                run.revision += 1
                self._firing(msg.node, g.uuid, run, cfg, currency, out)

    def _firing(self, node: str, uuid: str, run: Run, cfg: StreamConfig, currency: str, out: Output) -> None:
        """The run's firing event: when it reached the window, and every ``UPDATE_EVERY_S`` after (an update)."""
        run.told_at = run.last
        out.event(alert("idle", uuid, Facts(
            status="firing", severity="warning", where=_where(node, uuid, run), started_at=run.start,
            detected_at=run.detected or run.last, resolved_at=None, score=run.duration / cfg.idle_window_s,
            told=Told(f"{_label(node, run)} idle for {run.duration / 60:.0f} min: utilization below "
                      f"{cfg.idle_threshold_pct:g}% in all {run.samples} samples, {_cost(run)} {currency} wasted so "
                      f"far", self._evidence(run, cfg, currency)),
            revision=run.revision, change="updated" if run.revision else None)))

    def _evidence(self, run: Run, cfg: StreamConfig, currency: str) -> dict:
        return {"idle_s": round(run.duration, 3), "samples": run.samples, "max_util_pct": run.max_util,
                "threshold_pct": cfg.idle_threshold_pct, "window_s": cfg.idle_window_s,
                "cost_so_far": _cost(run), "price_per_gpu_hour": _money(run.price), "currency": currency}

    def _end(self, node: str, uuid: str, run: Run, reason: str, util, out: Output, open_: bool = False) -> None:
        if run.detected is None:
            return
        out.row(IDLE_WINDOWS, (uuid, round(run.start * 1000), round(run.end * 1000), node, run.pool or "", run.index,
                               run.tenant, run.job or "", round(run.duration, 3), run.samples, run.max_util, reason,
                               int(open_)))
        if open_:
            return   # still idle when the input ended: the incident stays open
        why = f"utilization back to {util:g}%" if reason == "busy" else \
            f"no telemetry since {_clock(run.end)} UTC" if reason == "no telemetry" else reason
        out.event(alert("idle", uuid, Facts(
            status="resolved", severity="warning", where=_where(node, uuid, run), started_at=run.start,
            detected_at=run.detected, resolved_at=run.end, score=0.0, revision=run.revision, told=Told(
                f"{_label(node, run)} was idle for {run.duration / 60:.0f} min; ended: {why}",
                {"idle_s": round(run.duration, 3), "samples": run.samples, "max_util_pct": run.max_util,
                 "end_reason": reason, "resolution": RESOLUTION[reason], "cost": _cost(run),
                 "price_per_gpu_hour": _money(run.price)}))))

    def silence(self, node: str, out: Output) -> None:
        """The node stopped reporting: every idle run ends, its alert resolved at its last sample, "no telemetry"."""
        for uuid, run in self.runs.items():
            self._end(node, uuid, run, "no telemetry", None, out)
        self.runs = {}

    def flush(self, node: str, out: Output) -> None:
        """End of input: record idle windows still open, without resolving their alerts."""
        for uuid, run in self.runs.items():
            self._end(node, uuid, run, "end of input", None, out, open_=True)
        self.runs = {}

    def to_state(self) -> dict:
        return {u: r.to_state() for u, r in self.runs.items()}

    @classmethod
    def from_state(cls, state: dict) -> IdleTracker:
        if not isinstance(state, dict):
            raise StateError("idle runs: saved state is not a mapping of GPU uuid to run")
        t = cls()
        t.runs = {u: Run.from_state(r) for u, r in state.items()}
        return t


def _where(node: str, uuid: str, run: Run) -> Where:
    return Where(node=node, gpu_uuid=uuid, job=run.job, tenant=run.tenant, pool=run.pool)
