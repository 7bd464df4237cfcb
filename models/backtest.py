"""Rolling-origin backtest of the forecaster against the naive baselines on any demand series.

From every origin in the test period (one an hour by default) each method forecasts the next
``horizon`` steps from the values before the origin only; the forecaster is fitted again every
``refit_every_s`` on everything before that point. Errors are scored per horizon: MAE, RMSE, SMAPE
and, for the forecaster, the share of actual values inside its p10-p90 band.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .forecast import HOUR, VALIDATION_S, Forecaster, History, baselines
from .rentals import Rentals
from .series import DAY, Series

MODEL = "gpufleet"
GOAL_1H_VS_LAST_VALUE_PCT = 20.0      # SMAPE 1 h ahead at least this much below the last value's
GOAL_24H_VS_YESTERDAY_PCT = 30.0      # SMAPE 24 h ahead at least this much below same time yesterday's
GOAL_COVERAGE_PCT = (75.0, 85.0)      # share of actuals inside p10-p90


def smape_terms(actual: np.ndarray, forecast: np.ndarray) -> np.ndarray:
    """2|a - f| / (|a| + |f|) per pair (0 where both are 0); NaN where the actual is missing."""
    denom = np.abs(actual) + np.abs(forecast)
    safe = np.where(denom > 0, denom, 1.0)
    return np.where(denom > 0, 2 * np.abs(actual - forecast) / safe, 0.0) + 0 * actual


@dataclass
class Scores:
    """Per horizon step (arrays of ``horizon``), over the origins with an actual value."""

    mae: np.ndarray
    rmse: np.ndarray
    smape_pct: np.ndarray
    coverage_pct: np.ndarray | None
    n: np.ndarray

    @classmethod
    def of(cls, actual: np.ndarray, forecast: np.ndarray, p10=None, p90=None) -> Scores:
        ok = ~np.isnan(actual) & ~np.isnan(forecast)
        n = ok.sum(axis=0)
        err = np.where(ok, forecast - actual, 0.0)
        div = np.maximum(n, 1)
        mae = np.abs(err).sum(axis=0) / div
        rmse = np.sqrt((err ** 2).sum(axis=0) / div)
        sm = np.where(ok, smape_terms(np.nan_to_num(actual), np.nan_to_num(forecast)), 0.0).sum(axis=0) / div * 100
        cov = None
        if p10 is not None and p90 is not None:
            inside = ok & (actual >= p10 - 1e-9) & (actual <= p90 + 1e-9)
            cov = inside.sum(axis=0) / div * 100
        nan = n == 0
        for a in (mae, rmse, sm) + ((cov,) if cov is not None else ()):
            a[nan] = np.nan
        return cls(mae, rmse, sm, cov, n)

    def at(self, cols: slice | int) -> dict:
        """Figures at one horizon step or pooled over a range (weighted by the count of each step)."""
        n = np.atleast_1d(self.n[cols]).astype(float)
        w = n / n.sum() if n.sum() > 0 else n

        def pool(a, squared=False):
            if a is None or n.sum() == 0:
                return None
            v = np.atleast_1d(a[cols])
            v = np.nan_to_num(v ** 2 if squared else v)
            out = float((v * w).sum())
            return round(math.sqrt(out) if squared else out, 4)

        return {"mae": pool(self.mae), "rmse": pool(self.rmse, squared=True), "smape_pct": pool(self.smape_pct),
                "coverage_pct": pool(self.coverage_pct), "n": int(n.sum())}


@dataclass
class Backtest:
    series: Series
    horizon: int
    origins: np.ndarray
    actual: np.ndarray
    forecasts: dict[str, np.ndarray]
    p10: np.ndarray
    p90: np.ndarray
    scores: dict[str, Scores]
    refits: list[tuple[float, str]] = field(default_factory=list)   # (fitted at, the choice by horizon)
    choices: list[list[str]] = field(default_factory=list)          # per fit, the candidate of each horizon step

    @property
    def step_s(self) -> float:
        return self.series.step_s

    def horizons(self) -> list[tuple[str, int]]:
        """The horizons reported: one step, 1 h, 6 h, 12 h, 24 h, 48 h, ... within the horizon (label, step)."""
        out, seen = [], set()
        for seconds in (self.step_s, HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY):
            k = int(round(seconds / self.step_s))
            if 1 <= k <= self.horizon and k not in seen and abs(k * self.step_s - seconds) < 1e-6:
                seen.add(k)
                out.append((_label(k * self.step_s), k))
        if self.horizon not in seen:
            out.append((_label(self.horizon * self.step_s), self.horizon))
        return out

    def report(self) -> dict:
        """Per horizon and method: mae, rmse, smape_pct, coverage_pct (and over every horizon: ``all``)."""
        out: dict = {}
        for label, k in self.horizons():
            out[label] = {m: s.at(k - 1) for m, s in self.scores.items()}
        out["all"] = {m: s.at(slice(0, self.horizon)) for m, s in self.scores.items()}
        return out

    def goals(self) -> list[tuple[str, bool | None, str]]:
        """The issue's goals: (goal, met or None when not measurable, the figures)."""
        rep = self.report()
        out: list[tuple[str, bool | None, str]] = []

        def vs(label, base, pct):
            goal = f"{label} ahead: SMAPE at least {pct:g}% below {base.replace('_', ' ')}"
            row = rep.get(label)
            if row is None or row[MODEL]["smape_pct"] is None or not row[base]["smape_pct"]:
                out.append((goal, None, "not measured (horizon or history too short)"))
                return
            a, b = row[MODEL]["smape_pct"], row[base]["smape_pct"]
            gain = 100 * (1 - a / b)
            out.append((goal, gain >= pct, f"{a:.2f}% vs {b:.2f}%: {gain:.1f}% lower"))

        vs("1h", "last_value", GOAL_1H_VS_LAST_VALUE_PCT)
        vs("24h", "same_time_yesterday", GOAL_24H_VS_YESTERDAY_PCT)
        lo, hi = GOAL_COVERAGE_PCT
        cov = rep["all"][MODEL]["coverage_pct"]
        out.append((f"p10-p90 coverage between {lo:g}% and {hi:g}% (every horizon)",
                    None if cov is None else lo <= cov <= hi, "n/a" if cov is None else f"{cov:.1f}%"))
        for label in ("1h", "6h", "24h"):
            if label in rep and rep[label][MODEL]["coverage_pct"] is not None:
                c = rep[label][MODEL]["coverage_pct"]
                out.append((f"p10-p90 coverage between {lo:g}% and {hi:g}% at {label}", lo <= c <= hi, f"{c:.1f}%"))
        return out

    def chosen(self) -> dict[str, dict[str, int]]:
        """Per reported horizon: how many of the fits chose each candidate there."""
        out: dict[str, dict[str, int]] = {}
        for label, k in self.horizons():
            counts: dict[str, int] = {}
            for names in self.choices:
                counts[names[k - 1]] = counts.get(names[k - 1], 0) + 1
            out[label] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        return out

    def kept_naive(self) -> list[tuple[str, str]]:
        """The reported horizons where every fit kept one naive baseline (nothing beat it on the fits' own
        backtests by the margin): (horizon, baseline)."""
        naive = {m.name for m in baselines()}
        return [(label, next(iter(c))) for label, c in self.chosen().items() if len(c) == 1 and next(iter(c)) in naive]

    def not_worse_than_naive(self) -> list[str]:
        """Reported horizons where the forecaster's MAE is above the best naive baseline's."""
        rep, worse = self.report(), []
        for label, row in rep.items():
            naive = [row[m]["mae"] for m in row if m != MODEL and row[m]["mae"] is not None]
            if naive and row[MODEL]["mae"] is not None and row[MODEL]["mae"] > min(naive) + 1e-9:
                worse.append(label)
        return worse


def _label(seconds: float) -> str:
    if seconds % HOUR == 0:
        return f"{int(seconds // HOUR)}h"
    return f"{seconds / 60:g}min"


@dataclass
class Rolling:
    """The forecaster's forecasts from origins every ``every`` steps, refitted every ``refit`` steps."""

    origins: np.ndarray
    mean: np.ndarray
    p10: np.ndarray
    p90: np.ndarray
    refits: list[tuple[float, str]]
    choices: list[list[str]] = field(default_factory=list)


@dataclass(frozen=True)
class Schedule:
    """When a backtest forecasts and refits: a forecast every ``every_s``, the forecaster fitted again every
    ``refit_every_s`` on everything before, its model chosen on the last ``validation_s`` of that."""

    every_s: float = HOUR
    refit_every_s: float = 7 * DAY
    validation_s: float = VALIDATION_S


def rolling(series: Series, start: int, horizon: int, schedule: Schedule = Schedule(), *, progress=None,
            rentals: Rentals | None = None) -> Rolling:
    """Forecasts from origins ``start, start + every, ...``, each from the values before it only; the
    forecaster is fitted at ``start`` and again every ``refit_every_s`` on everything before that point."""
    every_s, refit_every_s, validation_s = schedule.every_s, schedule.refit_every_s, schedule.validation_s
    every = max(1, int(round(every_s / series.step_s)))
    origins = np.arange(start, len(series), every)
    mean, p10, p90 = (np.full((len(origins), horizon), np.nan) for _ in range(3))
    refit = max(every, int(round(refit_every_s / series.step_s)))
    refits, choices = [], []
    for lo in range(start, len(series), refit):
        sel = (origins >= lo) & (origins < lo + refit)
        if not sel.any():
            continue
        f = Forecaster(series.step_s, horizon * series.step_s, validation_s=validation_s, origin_every_s=every_s,
                       rentals=rentals)
        f.fit(series, end=lo)
        fc = f.predict(series, origins[sel])
        mean[sel], p10[sel], p90[sel] = fc.mean, fc.p10, fc.p90
        refits.append((series.start + lo * series.step_s, f.describe()))
        choices.append(fc.methods)
        if progress is not None:
            progress(f"fitted on the {lo:,} steps before {_iso(series.start + lo * series.step_s)}: {f.describe()}")
    return Rolling(origins, mean, p10, p90, refits, choices)


def _iso(ts: float) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M")


def run(series: Series, horizon_s: float, test_from: float, schedule: Schedule = Schedule(), *, progress=None,
        rentals: Rentals | None = None) -> Backtest:
    """Backtest the forecaster and the naive baselines from origins in ``[test_from, end)``."""
    hist = History(series)
    H = int(round(horizon_s / series.step_s))
    start = series.index(test_from)
    if start < 1 or start >= len(series) - 1:
        raise ValueError("the test period must start after the first step and before the last")
    r = rolling(series, start, H, schedule, progress=progress, rentals=rentals)
    origins = r.origins
    at = origins[:, None] + np.arange(H)[None, :]
    actual = np.where(at < len(series), hist.raw[np.minimum(at, len(series) - 1)], np.nan)
    forecasts = {MODEL: r.mean}
    scores = {MODEL: Scores.of(actual, r.mean, r.p10, r.p90)}
    for m in baselines():
        pred = np.full((len(origins), H), np.nan)
        ok = origins >= m.min_origin(hist)
        if ok.any():
            pred[ok] = m.predict(hist, origins[ok], H)
        forecasts[m.name] = pred
        scores[m.name] = Scores.of(actual, pred)
    return Backtest(series, H, origins, actual, forecasts, r.p10, r.p90, scores, r.refits, r.choices)


def chart(bt: Backtest, path: str, title: str = "") -> None:
    """Actuals against the forecast made a day before (or at the longest horizon under a day), with the
    band; below, SMAPE by horizon for every method."""
    import matplotlib
    matplotlib.use("Agg")
    import datetime as dt

    import matplotlib.pyplot as plt

    k = min(bt.horizon, max(1, int(round(DAY / bt.step_s))))
    times = bt.series.times()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 7.5), gridspec_kw={"height_ratios": [3, 2]})
    first = int(bt.origins[0])
    when = [dt.datetime.fromtimestamp(t, dt.UTC) for t in times[first:]]
    top.plot(when, bt.series.values[first:], color="black", lw=0.8, label="actual")
    # the forecast for each time, made k steps before it (from the origins that reach it)
    target = bt.origins + k - 1
    ok = target < len(times)
    tw = [dt.datetime.fromtimestamp(t, dt.UTC) for t in times[target[ok]]]
    top.plot(tw, bt.forecasts[MODEL][ok, k - 1], color="tab:blue", lw=1.0,
             label=f"forecast made {_label(k * bt.step_s)} before")
    top.fill_between(tw, bt.p10[ok, k - 1], bt.p90[ok, k - 1], color="tab:blue", alpha=0.2, label="p10-p90")
    top.set_ylabel("demand")
    top.legend(loc="upper left", fontsize=8)
    top.set_title(title or "forecast against actuals (test period)")
    hours = np.arange(1, bt.horizon + 1) * bt.step_s / HOUR
    for name, s in bt.scores.items():
        bottom.plot(hours, s.smape_pct, lw=1.5 if name == MODEL else 1.0, label=name.replace("_", " "))
    bottom.set_xlabel("horizon (hours ahead)")
    bottom.set_ylabel("SMAPE %")
    bottom.legend(fontsize=8)
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
