"""The demand forecaster: a pool's demand over the next hours, with a p10-p90 band.

Candidates, all fitted on the same regular series (``models/series.py``):

- naive baselines: the last value, the same time yesterday, the same time last week;
- seasonal profiles with level adjustment (``daily_profile``, ``weekly_profile``): the mean shape of
  the last days (weeks) by time of day (of week), lifted to the current level; how fast the level of
  the last hour gives way to the level of the last period is fitted per horizon;
- ``ridge``: a scikit-learn ridge regression over calendar features (hour of day, day of week) and lag
  features (the last value against the means of the last hour, six hours, day and week, and against the
  same time yesterday and last week), one output per horizon step, predicting the change from the last
  value;
- ``blend``: the mean of those three model candidates (of the ones the history allows).

:meth:`Forecaster.fit` runs a rolling-origin backtest over the most recent part of the history
(``validation_s``, 28 days, at most half of it; the candidates fitted on what lies before, origins every
``origin_every_s``) and keeps, for each block of horizons (an hour), the candidate with the lowest mean
absolute error, the naive baselines included (a model must beat the best of them by 2% to replace it):
on that backtest the forecast is never worse than the best naive baseline at any horizon. The band comes
from the chosen candidates' backtest residuals (split-conformal): p10 and p90 are the forecast plus the
10th and 90th percentile of the residuals at that horizon, scaled by the factor that makes the band of the
backtest's first half of origins hold 80% of its second half (the errors' drift from one period to the next).

Plain numpy and scikit-learn; nothing here knows Kafka or ClickHouse.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from .series import DAY, Series

HOUR = 3600
MIN_BLOCK_ERRORS = 5          # fewer validation errors than this in a block of horizons: not enough to choose
MARGIN = 0.02                 # a model replaces the best naive baseline of a block only when 2% better there
VALIDATION_S = 28 * DAY       # the most recent history that chooses the candidates and sets the band (at most half)


def forward_filled(values: np.ndarray) -> np.ndarray:
    """Gaps filled with the value before them (leading gaps with the first value); all-NaN gives zeros."""
    v = np.asarray(values, dtype=float)
    ok = ~np.isnan(v)
    if not ok.any():
        return np.zeros_like(v)
    idx = np.where(ok, np.arange(len(v)), 0)
    np.maximum.accumulate(idx, out=idx)
    out = v[idx]
    out[:int(np.argmax(ok))] = v[int(np.argmax(ok))]
    return out


class History:
    """A series as the methods read it: ``y`` with gaps filled (inputs only), ``raw`` for errors."""

    def __init__(self, series: Series):
        self.series = series
        self.raw = np.asarray(series.values, dtype=float)
        self.y = forward_filled(self.raw)
        self.step = series.step_s
        per_day = DAY / series.step_s
        if abs(per_day - round(per_day)) > 1e-9:
            raise ValueError(f"a step of {series.step_s:g} s does not divide a day")
        self.per_day = int(round(per_day))
        self.per_week = 7 * self.per_day
        self.per_hour = max(1, int(round(HOUR / series.step_s)))
        self._cum = np.concatenate([[0.0], np.cumsum(self.y)])

    def mean(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Mean of ``y[lo:hi]`` for arrays of bounds (``lo < hi``)."""
        return (self._cum[hi] - self._cum[lo]) / (hi - lo)

    def first_times(self, origins: np.ndarray) -> np.ndarray:
        """The time of the first step forecast from each origin."""
        return self.series.start + origins * self.step


# -- the candidates ------------------------------------------------------------
class Method(ABC):
    """A candidate: fitted on ``y[:end]``, then forecasts ``horizon`` steps from any origin ``o`` using
    ``y[:o]`` only (``o`` at least :meth:`min_origin`)."""

    name = ""
    naive = False

    def min_origin(self, hist: History) -> int:
        return 1

    def fit(self, hist: History, end: int, horizon: int) -> bool:
        """Fit on the first ``end`` steps; False when there is too little history for this candidate."""
        return end >= self.min_origin(hist)

    @abstractmethod
    def predict(self, hist: History, origins: np.ndarray, horizon: int) -> np.ndarray:
        """Forecasts, one row per origin, ``horizon`` columns."""


class LastValue(Method):
    name, naive = "last_value", True

    def predict(self, hist, origins, horizon):
        return np.repeat(hist.y[origins - 1][:, None], horizon, axis=1)


class SameTime(Method):
    """The value one period (a day, a week) before the time forecast, from the last period observed."""

    naive = True

    def __init__(self, name: str, days: int):
        self.name, self.days = name, days

    def period(self, hist: History) -> int:
        return self.days * hist.per_day

    def min_origin(self, hist):
        return self.period(hist)

    def predict(self, hist, origins, horizon):
        p = self.period(hist)
        k = np.arange(horizon)
        back = p * (k // p + 1)                      # whole periods back, to land before the origin
        return hist.y[origins[:, None] + k[None, :] - back[None, :]]


class Profile(Method):
    """Seasonal profile over the last ``n`` periods, lifted to the level: ``P(t+h) + L + a_h (S - L)``.

    ``P``: the mean by phase of the periods' values less each period's mean; ``L``: the mean of the last
    period; ``S``: the mean over the last hour of the values less ``P``; ``a_h`` in [0, 1] fitted per
    horizon by least squares over the history (1 without enough of it).
    """

    def __init__(self, name: str, days: int, n_max: int, n_min: int):
        self.name, self.days, self.n_max, self.n_min = name, days, n_max, n_min
        self.n = n_min
        self.damping: np.ndarray | None = None

    def period(self, hist: History) -> int:
        return self.days * hist.per_day

    def min_origin(self, hist):
        return self.n * self.period(hist)

    def _parts(self, hist: History, origins: np.ndarray, horizon: int):
        p, n, s = self.period(hist), self.n, hist.per_hour
        prof = np.empty((len(origins), horizon))
        level = np.empty(len(origins))
        short = np.empty(len(origins))
        k = np.arange(horizon) % p
        for lo in range(0, len(origins), 256):          # chunks bound the memory of the windows
            o = origins[lo:lo + 256]
            win = hist.y[o[:, None] - n * p + np.arange(n * p)[None, :]].reshape(len(o), n, p)
            means = win.mean(axis=2, keepdims=True)
            shape = (win - means).mean(axis=1)           # phase j is that of index o + j (mod p)
            level[lo:lo + 256] = means[:, -1, 0]
            recent = hist.y[o[:, None] - s + np.arange(s)[None, :]]
            short[lo:lo + 256] = (recent - shape[:, p - s:]).mean(axis=1)
            prof[lo:lo + 256] = shape[:, k]
        return prof, level, short

    def fit(self, hist, end, horizon):
        p = self.period(hist)
        self.n = min(self.n_max, end // p)
        if self.n < self.n_min or hist.per_hour > p:
            return False
        self.damping = np.ones(horizon)
        train = np.arange(self.min_origin(hist), end - horizon + 1)
        if len(train) >= 50:
            train = train[np.linspace(0, len(train) - 1, min(len(train), 400)).astype(int)]
            prof, level, short = self._parts(hist, train, horizon)
            target = hist.y[train[:, None] + np.arange(horizon)[None, :]] - prof - level[:, None]
            d = short - level
            if float(d @ d) > 0:
                self.damping = np.clip((d @ target) / float(d @ d), 0.0, 1.0)
        return True

    def predict(self, hist, origins, horizon):
        prof, level, short = self._parts(hist, origins, horizon)
        assert self.damping is not None
        return prof + level[:, None] + self.damping[None, :horizon] * (short - level)[:, None]


class RidgeModel(Method):
    """Ridge regression (scikit-learn), one output per horizon step, on calendar and lag features."""

    name = "ridge"
    MAX_TRAIN = 3000
    MIN_TRAIN = 100

    def __init__(self, alpha: float = 10.0):
        self.alpha = alpha
        self.weekly = True
        self.model = None

    def min_origin(self, hist):
        return (hist.per_week if self.weekly else hist.per_day) + 1

    def features(self, hist: History, origins: np.ndarray) -> np.ndarray:
        t = hist.first_times(origins)
        hour = ((t % DAY) // HOUR).astype(int)
        weekday = ((t // DAY + 3) % 7).astype(int)         # 1970-01-01 was a Thursday; Monday = 0
        calendar = np.zeros((len(origins), 31))
        calendar[np.arange(len(origins)), hour] = 1.0
        calendar[np.arange(len(origins)), 24 + weekday] = 1.0
        last = hist.y[origins - 1]
        lags = [last - hist.mean(origins - w, origins) for w in (hist.per_hour, 6 * hist.per_hour, hist.per_day)]
        lags += [last - hist.y[origins - 1 - hist.per_day], hist.y[origins - 1 - hist.per_hour] - last]
        if self.weekly:
            lags += [last - hist.mean(origins - hist.per_week, origins), last - hist.y[origins - 1 - hist.per_week]]
        return np.column_stack([calendar, *lags])

    def fit(self, hist, end, horizon):
        from sklearn.linear_model import Ridge

        for weekly in (True, False):
            self.weekly = weekly
            train = np.arange(self.min_origin(hist), end - horizon + 1)
            if len(train) >= self.MIN_TRAIN:
                break
        else:
            return False
        train = train[np.linspace(0, len(train) - 1, min(len(train), self.MAX_TRAIN)).astype(int)]
        target = hist.y[train[:, None] + np.arange(horizon)[None, :]] - hist.y[train - 1][:, None]
        self.model = Ridge(alpha=self.alpha).fit(self.features(hist, train), target)
        return True

    def predict(self, hist, origins, horizon):
        assert self.model is not None
        return hist.y[origins - 1][:, None] + self.model.predict(self.features(hist, origins))[:, :horizon]


class Blend(Method):
    """The mean of the other model candidates that could be fitted (ridge and the profiles)."""

    name = "blend"

    def __init__(self):
        self.parts: list[Method] = []

    def min_origin(self, hist):
        return max((m.min_origin(hist) for m in self.parts), default=1)

    def fit(self, hist, end, horizon):
        self.parts = [m for m in (Profile("daily_profile", 1, n_max=14, n_min=3),
                                  Profile("weekly_profile", 7, n_max=4, n_min=2), RidgeModel())
                      if m.fit(hist, end, horizon)]
        return len(self.parts) >= 2

    def predict(self, hist, origins, horizon):
        return np.mean([m.predict(hist, origins, horizon) for m in self.parts], axis=0)


def candidates() -> list[Method]:
    """Fresh candidates, the naive baselines first (a tie goes to them)."""
    return [LastValue(), SameTime("same_time_yesterday", 1), SameTime("same_time_last_week", 7),
            Profile("daily_profile", 1, n_max=14, n_min=3), Profile("weekly_profile", 7, n_max=4, n_min=2),
            RidgeModel(), Blend()]


def baselines() -> list[Method]:
    return [m for m in candidates() if m.naive]


# -- the forecaster ------------------------------------------------------------------
@dataclass
class Forecast:
    """Forecasts from one or more origins: ``(origins, horizon)`` arrays, and the method per horizon."""

    mean: np.ndarray
    p10: np.ndarray
    p90: np.ndarray
    methods: list[str]


class Forecaster:
    """Chooses among the candidates per horizon block by rolling-origin backtest, with conformal bands.

    ``step_s`` must divide a day; ``horizon_s`` is how far ahead (48 h by default).
    """

    def __init__(self, step_s: float, horizon_s: float = 2 * DAY, *, validation_s: float = VALIDATION_S,
                 origin_every_s: float = HOUR, margin: float = MARGIN):
        if step_s <= 0 or horizon_s < step_s:
            raise ValueError("step_s must be positive and horizon_s at least one step")
        self.step_s, self.horizon = step_s, int(round(horizon_s / step_s))
        self.validation = max(1, int(round(validation_s / step_s)))
        self.every = max(1, int(round(origin_every_s / step_s)))
        self.margin = margin
        self.naive = [m.naive for m in candidates()]
        self.methods: list[Method] = []
        self.choice = np.zeros(self.horizon, dtype=int)
        self.q10 = np.zeros(self.horizon)
        self.q90 = np.zeros(self.horizon)
        self.validation_mae: dict[str, np.ndarray] = {}
        self.fitted_end = 0

    def fit(self, series: Series, end: int | None = None) -> Forecaster:
        """Choose and fit on the first ``end`` steps of ``series`` (all of it by default)."""
        if series.step_s != self.step_s:
            raise ValueError(f"series step {series.step_s:g} s, forecaster step {self.step_s:g} s")
        hist = History(series)
        end = len(series) if end is None else end
        if end < 1:
            raise ValueError("nothing to fit on")
        H = self.horizon
        cut = end - min(self.validation, end // 2)
        origins = np.arange(max(cut, 1), end, self.every)
        k = np.arange(H)
        at = origins[:, None] + k[None, :]
        actual = np.where(at < end, hist.raw[np.minimum(at, len(hist.raw) - 1)], np.nan)

        forecasts, errors = [], []
        for m in candidates():
            pred = np.full((len(origins), H), np.nan)
            if m.fit(hist, cut, H):
                ok = origins >= m.min_origin(hist)
                if ok.any():
                    pred[ok] = m.predict(hist, origins[ok], H)
            forecasts.append(pred)
            errors.append(np.abs(actual - pred))
            self.validation_mae[m.name] = _nanmean0(errors[-1])
        self.choice, self.q10, self.q90 = self._choose(origins, actual, forecasts, errors)

        chosen = sorted(set(self.choice.tolist()))
        self.methods = candidates()
        for i in chosen:
            if not self.methods[i].fit(hist, end, H):     # cannot happen with more history; be safe
                self.choice[self.choice == i] = 0
        if (self.choice == 0).any():
            self.methods[0].fit(hist, end, H)
        self.fitted_end = end
        return self

    def _choose(self, origins, actual, forecasts, errors):
        H = self.horizon
        block = max(1, int(round(HOUR / self.step_s)))
        choice = np.zeros(H, dtype=int)
        has_data = np.zeros(H, dtype=bool)
        for lo in range(0, H, block):
            cols = slice(lo, min(lo + block, H))
            best, best_mae = 0, np.inf
            for i, err in enumerate(errors):
                e = err[:, cols]
                n = int(np.count_nonzero(~np.isnan(e)))
                # a candidate that could not forecast from every validation origin is not compared
                if n < MIN_BLOCK_ERRORS or np.isnan(forecasts[i][:, cols]).all(axis=1).any():
                    continue
                mae = float(np.nanmean(e))
                # a model must beat the best naive baseline by a margin to replace it: a gain smaller than
                # that on the validation is as likely noise as skill
                if mae < best_mae * (1 - (self.margin if self.naive[i] is False and self.naive[best] else 0))\
                        - 1e-12:
                    best, best_mae = i, mae
            choice[cols] = best
            has_data[cols] = np.isfinite(best_mae)
        # the last block with data decides for horizons beyond the validation's reach
        if has_data.any() and not has_data.all():
            last = int(np.flatnonzero(has_data)[-1])
            choice[last + 1:] = choice[last]
        residual = np.full_like(actual, np.nan)
        for i in set(choice.tolist()):
            cols = choice == i
            residual[:, cols] = actual[:, cols] - forecasts[i][:, cols]
        q10, q90, known = _band(residual, block)
        scale = _band_scale(residual, block)
        q10, q90 = q10 * scale, q90 * scale
        if known.any():
            last = int(np.flatnonzero(known)[-1])
            grow = np.sqrt((np.arange(H) + 1) / (last + 1))   # beyond the validation: widen like a random walk
            q10[last + 1:] = q10[last] * grow[last + 1:]
            q90[last + 1:] = q90[last] * grow[last + 1:]
            first = int(np.flatnonzero(known)[0])
            q10[:first], q90[:first] = q10[first], q90[first]
        return choice, q10, q90

    def predict(self, series: Series, origins: np.ndarray | list[int]) -> Forecast:
        """Forecasts from each origin (an index into ``series``: the first step forecast), using the values
        before it only. Origins must be at least the end the forecaster was fitted on minus the validation."""
        hist = History(series)
        origins = np.asarray(origins, dtype=int)
        H = self.horizon
        mean = np.empty((len(origins), H))
        for i in set(self.choice.tolist()):
            m = self.methods[i]
            cols = self.choice == i
            ok = origins >= m.min_origin(hist)
            pred = np.empty((len(origins), H))
            if (~ok).any():                                  # too early for this one: the last value
                pred[~ok] = self.methods[0].predict(hist, origins[~ok], H) if self.methods[0].naive else 0
            if ok.any():
                pred[ok] = m.predict(hist, origins[ok], H)
            mean[:, cols] = pred[:, cols]
        mean = np.maximum(mean, 0.0)
        p10 = np.minimum(np.maximum(mean + self.q10, 0.0), mean)
        p90 = np.maximum(mean + self.q90, mean)
        return Forecast(mean, p10, p90, [self.methods[i].name for i in self.choice])

    def forecast(self, series: Series) -> Forecast:
        """The forecast from the end of ``series``: one row."""
        if len(series) == 0:
            raise ValueError("an empty series")
        return self.predict(series, [len(series)])

    def describe(self) -> str:
        """Which candidate serves which horizons, e.g. ``ridge 0-6h, weekly_profile 6-48h``."""
        parts, start = [], 0
        names = [self.methods[i].name if self.methods else str(i) for i in self.choice]
        for j in range(1, len(names) + 1):
            if j == len(names) or names[j] != names[start]:
                parts.append(f"{names[start]} {_hours(start * self.step_s)}-{_hours(j * self.step_s)}")
                start = j
        return ", ".join(parts)


def _band(residual: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 10th and 90th percentiles of the residuals at each horizon (over a block of horizons around it),
    and where there were enough of them."""
    H = residual.shape[1]
    q10, q90, known = np.zeros(H), np.zeros(H), np.zeros(H, dtype=bool)
    half = block // 2
    for j in range(H):
        r = residual[:, max(0, j - half):j + half + 1]
        r = r[~np.isnan(r)]
        if len(r) >= MIN_BLOCK_ERRORS:
            q10[j], q90[j] = np.quantile(r, [0.1, 0.9])
            known[j] = True
    return q10, q90, known


def _band_scale(residual: np.ndarray, block: int) -> float:
    """How much wider (or narrower) the band must be for the next period to hold 80%: the band of the first
    half of the validation origins, scaled, against the residuals of the second half."""
    n = residual.shape[0] // 2
    if n < MIN_BLOCK_ERRORS:
        return 1.0
    q10, q90, known = _band(residual[:n], block)
    later = residual[n:, known]
    ok = ~np.isnan(later)
    if ok.sum() < 100:
        return 1.0
    scales = np.linspace(0.7, 2.0, 27)
    cover = [float(np.mean(((later >= s * q10[known]) & (later <= s * q90[known]))[ok])) for s in scales]
    return float(scales[int(np.argmin(np.abs(np.array(cover) - 0.8)))])


def _hours(seconds: float) -> str:
    h = seconds / HOUR
    return f"{h:g}h" if h >= 1 or h == 0 else f"{seconds / 60:g}min"


def _nanmean0(a: np.ndarray) -> np.ndarray:
    """Column means ignoring NaN; NaN where a column has none."""
    n = np.count_nonzero(~np.isnan(a), axis=0)
    s = np.nansum(a, axis=0)
    return np.divide(s, n, out=np.full(a.shape[1], np.nan), where=n > 0)
