"""The forecast process: each pool's demand from the store, forecasts and scale decisions in event time,
published, then stored.

A forecast is made at every multiple ``T`` of ``forecast.every_s`` once the store holds telemetry up to
``T + forecast.settle_s``, from the demand before ``T`` only (``pool_demand_5m``: the most GPUs rented in
a minute, per step). The model is chosen and fitted on the history before the last multiple of
``forecast.refit_every_s`` (before ``T`` itself during a pool's first day) and kept for the forecasts
that follow. So a forecast depends on the stored rows and ``T`` alone: the embedded mode (at the end of
``replay`` and ``demo``) and ``gpufleet forecast run`` beside the workers make the same ones.

The scale decision at ``T`` follows the pool's policy (``models/scaling.py``) from the forecast, the
demand observed before ``T``, the pool's capacity (``scale.capacity_gpus``, else the most GPUs it has shown in
the history read) and the last decision stored. Per ``T``: the events go out first (the bus
returns once they are acknowledged, retrying meanwhile), then the rows are stored; the stored forecasts
are the process's progress, so a restart makes and publishes again what was not stored (at least once).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpufleet.contracts.output import Table
from gpufleet.models.forecast import Forecaster
from gpufleet.models.rentals import Rentals
from gpufleet.models.scaling import Cadence, Observed, Standing, decide, next_standing
from gpufleet.models.series import DAY, Series, regular

from .forecast_events import FORECASTS, SCALE_EVENTS, forecast_event, forecast_rows, scale_event, scale_row
from .sink import Sink

log = logging.getLogger("gpufleet.forecast")
BUCKET_S = 300


@dataclass
class PoolDemand:
    """One pool's 5-minute demand on a grid from ``start``: the most GPUs rented and present in a minute."""

    start: float
    rented: np.ndarray
    total: np.ndarray

    def index(self, ts: float) -> int:
        return int((ts - self.start) // BUCKET_S)


def read_demand(store, pool: str, since: float, until: float) -> PoolDemand:
    """``pool_demand_5m`` for ``pool`` over ``[since, until)`` (both multiples of 300 s)."""
    rows = store.query(
        "SELECT toUnixTimestamp(bucket), rented_gpus_max, total_gpus_max FROM pool_demand_5m "
        "WHERE pool = %(pool)s AND bucket >= toDateTime(%(lo)s, 'UTC') AND bucket < toDateTime(%(hi)s, 'UTC') "
        "ORDER BY bucket", {"pool": pool, "lo": int(since), "hi": int(until)})
    n = int((until - since) // BUCKET_S)
    rented, total = np.full(n, np.nan), np.full(n, np.nan)
    for ts, r, t in rows:
        i = int((ts - since) // BUCKET_S)
        rented[i], total[i] = r, t
    return PoolDemand(since, rented, total)


RUN_GAP_S = 600      # a GPU's minutes with one tenant are one rental unless telemetry stops for longer than this


def read_rentals(store, pool: str, since: float, until: float, data_until: float) -> Rentals:
    """The rentals of ``pool`` seen over ``[since, until)``: each run of a GPU's minutes with one tenant (telemetry
    gaps up to ``RUN_GAP_S`` kept inside), one GPU each; a run that reaches the end of the telemetry stored
    (``data_until``) is still running. A forecast at ``T`` uses a run's end only to tell whether it was still
    running at ``T``, so what is stored after ``T`` changes nothing it uses."""
    rows = store.query(
        "SELECT tenant, toUnixTimestamp(min(minute)), toUnixTimestamp(max(minute)) + 60 FROM ("
        " SELECT gpu_uuid, tenant, minute, sum(fresh) OVER (PARTITION BY gpu_uuid, tenant ORDER BY minute"
        "  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run FROM ("
        "  SELECT gpu_uuid, tenant, minute, if(toUnixTimestamp(minute) - lagInFrame(toUnixTimestamp(minute), 1, 0)"
        "   OVER (PARTITION BY gpu_uuid, tenant ORDER BY minute ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)"
        "   > %(gap)s, 1, 0) AS fresh"
        "  FROM usage_gpu_1m FINAL WHERE pool = %(pool)s AND tenant != '' AND minute >= toDateTime(%(lo)s, 'UTC')"
        "   AND minute < toDateTime(%(hi)s, 'UTC')))"
        " GROUP BY gpu_uuid, tenant, run ORDER BY 2, 3, 1",
        {"pool": pool, "lo": int(since), "hi": int(until), "gap": RUN_GAP_S})
    return Rentals.of([(float(a), None if b >= data_until else float(b), 1, t) for t, a, b in rows])


@dataclass
class Report:
    forecasts: int = 0
    decisions: int = 0
    published: int = 0
    made_at: list[float] = field(default_factory=list)


class ForecastRunner:
    """Makes what is due; ``publish(events)`` hands events to the bus and returns once they are durable there."""

    def __init__(self, forecast, scale, store, sink: Sink, publish: Callable[[list[dict]], None]):
        self.cfg, self.scale, self.store, self.sink, self.publish = forecast, scale, store, sink, publish
        self._fitted: dict[tuple[str, int, int], Forecaster] = {}

    # -- what the store holds ------------------------------------------------------
    def data_until(self) -> float | None:
        """The end of the telemetry stored: the last minute with any GPU row, plus that minute."""
        last, rows = self.store.query("SELECT toUnixTimestamp(max(minute)), count() FROM usage_gpu_1m")[0]
        return float(last) + 60 if rows else None

    def pools(self) -> dict[str, tuple[float, float]]:
        """Every pool with telemetry: (first minute, end of its last minute)."""
        rows = self.store.query("SELECT pool, toUnixTimestamp(min(minute)), toUnixTimestamp(max(minute)) + 60 "
                                "FROM usage_gpu_1m WHERE pool != '' GROUP BY pool ORDER BY pool")
        return {p: (float(a), float(b)) for p, a, b in rows}

    def last_made(self) -> dict[str, float]:
        return {p: float(t) for p, t in self.store.query(
            "SELECT pool, toUnixTimestamp(max(made_at)) FROM forecasts GROUP BY pool")}

    def standings(self) -> dict[str, Standing]:
        rows = self.store.query("SELECT pool, argMax(target_gpus, at), toUnixTimestamp(maxIf(at, changed = 1)) "
                                "FROM scale_events FINAL GROUP BY pool")
        return {p: Standing(int(target), float(changed) if changed else None) for p, target, changed in rows}

    # -- the plan ---------------------------------------------------------------------
    def due(self) -> dict[float, list[str]]:
        """Forecast times still to make, each with its pools."""
        until = self.data_until()
        if until is None:
            return {}
        every = self.cfg.every_s
        last_t = math.floor((until - self.cfg.settle_s) / every) * every
        made = self.last_made()
        plan: dict[float, list[str]] = {}
        for pool, (first, end) in self.pools().items():
            lo = max(made.get(pool, -math.inf) + every, last_t - self.cfg.backfill_s,
                     math.ceil((first + self.cfg.min_history_s) / every) * every)
            t = lo
            while t <= last_t:
                if end >= t - every and first < t:              # the pool reported in the last interval
                    plan.setdefault(t, []).append(pool)
                t += every
        return dict(sorted(plan.items()))

    # -- one pool at one time -------------------------------------------------------------
    def _series(self, demand: PoolDemand, first: float, start: float, end: float) -> Series:
        """Demand on the forecast step over ``[max(start, first step), end)``: the most rented in each step."""
        step = self.cfg.step_s
        lo = max(start, math.floor(first / step) * step)
        a, b = demand.index(lo), demand.index(end)
        values = demand.rented[a:b]
        times = demand.start + BUCKET_S * np.arange(a, b)
        n = int((end - lo) // step)
        out = np.full(n, np.nan)
        if n and np.isfinite(values).any():
            s = regular(times, values, step, "max")
            off = int(round((s.start - lo) / step))
            out[off:off + len(s.values)] = s.values[:n - off]
        return Series(lo, float(step), out)

    def forecaster(self, pool: str, demand: PoolDemand, first: float, t: float,
                   rentals: Rentals | None = None) -> tuple[Forecaster, float]:
        cfg = self.cfg
        fit_end = math.floor(t / cfg.refit_every_s) * cfg.refit_every_s
        if fit_end - first < DAY:
            fit_end = t                                          # a pool's first day: fitted at every forecast
        start = fit_end - cfg.history_s
        key = (pool, int(fit_end), int(start))
        if key not in self._fitted:
            series = self._series(demand, first, start, fit_end)
            self._fitted = {k: v for k, v in self._fitted.items() if k[0] != pool}   # one per pool is enough
            self._fitted[key] = Forecaster(cfg.step_s, cfg.horizon_s, validation_s=cfg.validation_s,
                                           origin_every_s=cfg.every_s, rentals=rentals).fit(series)
        return self._fitted[key], start

    def observe(self, demand: PoolDemand, t: float, window_s: float) -> Observed | None:
        """What the pool shows before ``t``: the GPUs present and rented in its last bucket, the peak rented over
        ``window_s``, and its capacity as telemetry shows it: the most GPUs present in a minute over the history
        read (``forecast.history_s`` and ``forecast.refit_every_s`` before the first forecast due)."""
        a, b = demand.index(t - window_s), demand.index(t)
        rented = demand.rented[max(a, 0):b]
        seen = np.flatnonzero(~np.isnan(rented))
        recent = seen[seen >= len(rented) - self.cfg.every_s // BUCKET_S]
        if not len(recent):
            return None
        last = max(a, 0) + int(recent[-1])
        present = demand.total[:b]
        capacity = int(np.nanmax(present)) if np.isfinite(present).any() else int(demand.total[last])
        return Observed(int(demand.total[last]), int(demand.rented[last]), float(np.nanmax(rented)),
                        float(len(seen) * BUCKET_S), capacity)

    # -- a run ---------------------------------------------------------------------------
    def run_once(self) -> Report:
        """Make, publish and store every forecast and decision due now."""
        report = Report()
        plan = self.due()
        if not plan:
            return report
        pools = self.pools()
        standing = self.standings()
        cfg = self.cfg
        since = min(plan) - cfg.refit_every_s - cfg.history_s
        since = math.floor(since / BUCKET_S) * BUCKET_S
        names = sorted({p for v in plan.values() for p in v})
        demand = {p: read_demand(self.store, p, since, max(plan)) for p in names}
        until = self.data_until() or max(plan)
        rentals = {p: read_rentals(self.store, p, since, until, until) for p in names} if cfg.rentals else {}
        for t, due_pools in plan.items():
            events: list[dict] = []
            rows: dict[Table, list[tuple]] = {FORECASTS: [], SCALE_EVENTS: []}
            for pool in due_pools:
                first = pools[pool][0]
                f, start = self.forecaster(pool, demand[pool], first, t, rentals.get(pool))
                fc = f.forecast(self._series(demand[pool], first, start, t), rentals.get(pool))
                ev = forecast_event(pool, t, cfg.step_s, fc.mean[0], fc.p10[0], fc.p90[0])
                events.append(ev)
                rows[FORECASTS] += forecast_rows(ev, fc.methods)
                policy = self.scale.policy(pool)
                seen = self.observe(demand[pool], t, policy.scale_in_after_s)
                if seen is None:
                    continue
                points = [(p["ts"], p["p90"]) for p in ev["points"]]
                d = decide(policy, t, seen, standing.get(pool), points, step_s=cfg.step_s,
                           cadence=Cadence(next_decision_s=cfg.every_s, history_s=t - first))
                standing[pool] = next_standing(standing.get(pool), d)
                se = scale_event(pool, d)
                if not d.dry_run:
                    events.append(se)
                rows[SCALE_EVENTS].append(scale_row(se, d.dry_run, policy.lead_time_s, d.changed))
                report.decisions += 1
            self.publish(events)
            report.published += len(events)
            self.sink.add(rows)
            self.sink.flush()
            report.forecasts += len(due_pools)
            report.made_at.append(t)
            log.info("forecasts made at %s for %d pools", t, len(due_pools))
        return report
