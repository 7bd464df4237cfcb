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
- ``blend``: the mean of those three model candidates (of the ones the history allows);
- ``rentals`` (with the pool's rentals only): the GPUs of the rentals running at the origin expected to be
  still running, by their ages against their tenant's typical rental length, plus the arrivals of the hour of
  the week (``models/rentals.py``).

:meth:`Forecaster.fit` runs a rolling-origin backtest over the most recent part of the history
(``validation_s``, 28 days, at most half of it; the candidates fitted on what lies before, origins every
``origin_every_s``) and keeps, for each block of horizons (an hour), the candidate with the lowest mean
absolute error, the naive baselines included: a model must beat the best of them by 2% to replace it, over the
validation and over each half of it. On that backtest the forecast is never worse than the best naive baseline
at any horizon. With the pool's rentals (``models/rentals.py``) a candidate built on the rentals running at each
origin joins them. Choice and band are always fitted over at least 48 hours of horizon, so a horizon's forecast
and band do not depend on how far ahead is asked for.

The band is split-conformal: p10 and p90 are the forecast plus the 10th and 90th percentile of the chosen
candidates' backtest residuals at that horizon, times a scale fitted per bucket of horizons (up to 1 h, 1-6 h,
6-24 h, beyond): the one that makes the band of the backtest's first half of origins hold 80% of its second
half there (the errors' drift from one period to the next). At each forecast, the band widens further where the
forecasts of the last seven days (from the same fit, whose actual values are known by then) needed it to hold
80%, per bucket, weighed by how many there are (never narrower: a fit's recent forecasts partly saw the values
they forecast).

Plain numpy and scikit-learn; nothing here knows Kafka or ClickHouse.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from .rentals import Rentals, RentalsModel
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


def candidates(rentals: Rentals | None = None) -> list[Method]:
    """Fresh candidates, the naive baselines first (a tie goes to them); with the pool's rentals, the candidate
    built on the rentals running at each origin last (``models/rentals.py``)."""
    out: list[Method] = [LastValue(), SameTime("same_time_yesterday", 1), SameTime("same_time_last_week", 7),
                         Profile("daily_profile", 1, n_max=14, n_min=3),
                         Profile("weekly_profile", 7, n_max=4, n_min=2), RidgeModel(), Blend()]
    if rentals is not None and len(rentals):
        out.append(RentalsModel(rentals))   # type: ignore[arg-type]
    return out


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


FIT_HORIZON_S = 2 * DAY       # candidates are always fitted and chosen over at least this, so that a horizon's
                              # choice and band do not depend on how far ahead is asked for
BUCKETS_H = (1, 6, 24)        # the band's scale is fitted per bucket of horizons: up to 1 h, 1-6 h, 6-24 h, beyond
RECENT_S = 7 * DAY            # the band widens where the forecasts whose times fell in this before the origin
RECENT_PRIOR = 50             # ... needed it (their count weighed against this many of the fit's own)
RECENT_MIN = 20               # ... and known at least this many times in the bucket
RECENT_MAX_SCALE = 4.0        # ... by at most this much


class Forecaster:
    """Chooses among the candidates per horizon block by rolling-origin backtest, with conformal bands.

    ``step_s`` must divide a day; ``horizon_s`` is how far ahead (48 h by default).
    """

    def __init__(self, step_s: float, horizon_s: float = 2 * DAY, *, validation_s: float = VALIDATION_S,
                 origin_every_s: float = HOUR, margin: float = MARGIN, rentals: Rentals | None = None):
        if step_s <= 0 or horizon_s < step_s:
            raise ValueError("step_s must be positive and horizon_s at least one step")
        self.step_s, self.horizon = step_s, int(round(horizon_s / step_s))
        self.fit_horizon = max(self.horizon, int(round(FIT_HORIZON_S / step_s)))
        self.validation = max(1, int(round(validation_s / step_s)))
        self.every = max(1, int(round(origin_every_s / step_s)))
        self.margin = margin
        self.rentals = rentals
        self.naive = [m.naive for m in candidates(rentals)]
        self.methods: list[Method] = []
        self.choice = np.zeros(self.fit_horizon, dtype=int)
        self.q10 = np.zeros(self.fit_horizon)
        self.q90 = np.zeros(self.fit_horizon)
        self.band_scale = np.ones(len(BUCKETS_H) + 1)
        self.validation_mae: dict[str, np.ndarray] = {}
        self.fitted_end = 0
        self._recent: tuple[tuple | None, dict[int, np.ndarray]] = (None, {})   # past origins' forecasts

    def buckets(self) -> np.ndarray:
        """The band bucket of each horizon step (0: up to 1 h, 1: 1-6 h, 2: 6-24 h, 3: beyond)."""
        hours = (np.arange(self.fit_horizon) + 1) * self.step_s / HOUR
        return np.searchsorted(np.array(BUCKETS_H, dtype=float), hours - 1e-9)

    def fit(self, series: Series, end: int | None = None) -> Forecaster:
        """Choose and fit on the first ``end`` steps of ``series`` (all of it by default)."""
        if series.step_s != self.step_s:
            raise ValueError(f"series step {series.step_s:g} s, forecaster step {self.step_s:g} s")
        hist = History(series)
        end = len(series) if end is None else end
        if end < 1:
            raise ValueError("nothing to fit on")
        H = self.fit_horizon
        cut = end - min(self.validation, end // 2)
        origins = np.arange(max(cut, 1), end, self.every)
        k = np.arange(H)
        at = origins[:, None] + k[None, :]
        actual = np.where(at < end, hist.raw[np.minimum(at, len(hist.raw) - 1)], np.nan)

        forecasts, errors = [], []
        for m in candidates(self.rentals):
            pred = np.full((len(origins), H), np.nan)
            if m.fit(hist, cut, H):
                ok = origins >= m.min_origin(hist)
                if ok.any():
                    pred[ok] = m.predict(hist, origins[ok], H)
            forecasts.append(pred)
            errors.append(np.abs(actual - pred))
            self.validation_mae[m.name] = _nanmean0(errors[-1])
        self.choice, self.q10, self.q90 = self._choose(hist, origins, actual, forecasts, errors)

        chosen = sorted(set(self.choice.tolist()))
        self.methods = candidates(self.rentals)
        for i in chosen:
            if not self.methods[i].fit(hist, end, H):     # cannot happen with more history; be safe
                self.choice[self.choice == i] = 0
        if (self.choice == 0).any():
            self.methods[0].fit(hist, end, H)
        self.fitted_end = end
        self._recent = (None, {})
        return self

    def _choose(self, hist, origins, actual, forecasts, errors):
        H = self.fit_horizon
        block = max(1, int(round(HOUR / self.step_s)))
        choice = np.zeros(H, dtype=int)
        has_data = np.zeros(H, dtype=bool)
        for lo in range(0, H, block):
            cols = slice(lo, min(lo + block, H))
            best, best_mae, best_halves = 0, np.inf, (np.inf, np.inf)
            half = len(origins) // 2
            for i, err in enumerate(errors):
                e = err[:, cols]
                n = int(np.count_nonzero(~np.isnan(e)))
                # a candidate that could not forecast from every validation origin is not compared
                if n < MIN_BLOCK_ERRORS or np.isnan(forecasts[i][:, cols]).all(axis=1).any():
                    continue
                mae = float(np.nanmean(e))
                halves = (_mean_or_inf(e[:half]), _mean_or_inf(e[half:]))
                # a model must beat the best naive baseline by a margin to replace it, over the validation and
                # over each half of it: a gain smaller than that, or in one period only, is as likely noise as skill
                model_vs_naive = self.naive[i] is False and self.naive[best]
                m = self.margin if model_vs_naive else 0
                if mae < best_mae * (1 - m) - 1e-12 and (
                        not model_vs_naive or all(h < b * (1 - m) for h, b in zip(halves, best_halves))):
                    best, best_mae, best_halves = i, mae, halves
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
        buckets = self.buckets()
        self.band_scale = np.array([_band_scale(residual, block, buckets == b) for b in range(len(BUCKETS_H) + 1)])
        q10, q90 = q10 * self.band_scale[buckets], q90 * self.band_scale[buckets]
        if known.any():
            last = int(np.flatnonzero(known)[-1])
            grow = np.sqrt((np.arange(H) + 1) / (last + 1))   # beyond the validation: widen like a random walk
            q10[last + 1:] = q10[last] * grow[last + 1:]
            q90[last + 1:] = q90[last] * grow[last + 1:]
            first = int(np.flatnonzero(known)[0])
            q10[:first], q90[:first] = q10[first], q90[first]
        return choice, q10, q90

    def _means(self, hist: History, origins: np.ndarray, early: bool = True) -> np.ndarray:
        """The chosen candidates' forecasts; where an origin is too early for one, the last value (``early``)
        or NaN."""
        H = self.fit_horizon
        mean = np.empty((len(origins), H))
        for i in set(self.choice.tolist()):
            m = self.methods[i]
            cols = self.choice == i
            ok = origins >= m.min_origin(hist)
            pred = np.empty((len(origins), H))
            if (~ok).any():                                  # too early for this one: the last value
                pred[~ok] = (self.methods[0].predict(hist, origins[~ok], H) if self.methods[0].naive else 0) \
                    if early else np.nan
            if ok.any():
                pred[ok] = m.predict(hist, origins[ok], H)
            mean[:, cols] = pred[:, cols]
        return np.where(np.isnan(mean), np.nan, np.maximum(mean, 0.0))

    def use_rentals(self, rentals: Rentals | None) -> None:
        """Forecast with these rentals from now on (the same pool's, read later: what the fit learnt stays)."""
        if rentals is None:
            return
        self.rentals = rentals
        for m in self.methods:
            if isinstance(m, RentalsModel):
                m.rentals = rentals

    def predict(self, series: Series, origins: np.ndarray | list[int], rentals: Rentals | None = None) -> Forecast:
        """Forecasts from each origin (an index into ``series``: the first step forecast), using the values
        before it only (and, with ``rentals``, the rentals running at it). Origins must be at least the end the
        forecaster was fitted on minus the validation."""
        self.use_rentals(rentals)
        hist = History(series)
        origins = np.asarray(origins, dtype=int)
        mean = self._means(hist, origins)
        q10, q90 = np.repeat(self.q10[None, :], len(origins), 0), np.repeat(self.q90[None, :], len(origins), 0)
        if len(origins):
            scale = self.recent_scale(hist, origins)
            q10, q90 = q10 * scale, q90 * scale
        mean, q10, q90 = mean[:, :self.horizon], q10[:, :self.horizon], q90[:, :self.horizon]
        p10 = np.minimum(np.maximum(mean + q10, 0.0), mean)
        p90 = np.maximum(mean + q90, mean)
        return Forecast(mean, p10, p90, [self.methods[i].name for i in self.choice[:self.horizon]])

    def _past_means(self, hist: History, grid: np.ndarray) -> np.ndarray:
        """The forecasts from earlier origins, kept between calls while what they were made from stays the same
        (the values before them and the rentals seen by then): the forecast process asks for nearly the same
        ones every hour."""
        key, kept = self._recent
        if key is not None and not self._same_inputs(hist, key):
            kept = {}
        missing = np.array([g for g in grid.tolist() if g not in kept], dtype=int)
        if len(missing):
            for g, row in zip(missing.tolist(), self._means(hist, missing, early=False)):
                kept[g] = row
        lo, hi = int(grid.min()), int(grid.max())
        self._recent = (self._inputs(hist, hi), {g: row for g, row in kept.items() if lo <= g <= hi})
        return np.array([kept[g] for g in grid.tolist()])

    def _inputs(self, hist: History, upto: int) -> tuple:
        """What the forecasts from origins up to ``upto`` were made from."""
        t = hist.series.start + upto * hist.step
        r = self.rentals
        seen = None if r is None else r.start < t
        return (hist.series.start, upto, hist.raw[:upto].copy(),
                None if r is None else (r.start[seen].copy(), np.minimum(r.end[seen], t), r.gpus[seen].copy(),
                                        r.tenant[seen].copy()))

    def _same_inputs(self, hist: History, key: tuple) -> bool:
        start, upto, raw, rentals = key
        now = self._inputs(hist, upto)
        if now[0] != start or len(now[2]) != len(raw) or not np.array_equal(now[2], raw, equal_nan=True):
            return False
        if (rentals is None) != (now[3] is None):
            return False
        return rentals is None or all(len(a) == len(b) and np.array_equal(a, b) for a, b in zip(rentals, now[3]))

    def recent_scale(self, hist: History, origins: np.ndarray) -> np.ndarray:
        """Per origin and horizon step: how much wider the band must be to have held 80% of the actual values of
        the forecasts from earlier origins (every ``every`` steps) whose times fell in the ``RECENT_S`` before the
        origin, per bucket of horizons; weighed against the fit's own band by their count, at least 1 (a fit's
        recent forecasts partly saw the values they forecast, so a band is never narrowed on them), at most
        ``RECENT_MAX_SCALE``."""
        H, every = self.fit_horizon, self.every
        window = int(round(RECENT_S / self.step_s))
        out = np.ones((len(origins), H))
        lo = max(1, int(origins.min()) - window - H)
        grid = np.arange(int(origins.min()) - every, lo - 1, -every)[::-1]
        if len(grid) == 0:
            return out
        at = grid[:, None] + np.arange(H)[None, :]
        n = len(hist.raw)
        r = np.where(at < n, hist.raw[np.minimum(at, n - 1)], np.nan) - self._past_means(hist, grid)
        # the scale each residual needs to fall inside the band (inf where the band has no width that side)
        with np.errstate(divide="ignore", invalid="ignore"):
            need = np.where(r > 0, r / self.q90[None, :], np.where(r < 0, r / self.q10[None, :], 0.0))
        need = np.where(np.isnan(r), np.nan, np.where(np.isfinite(need) & (need >= 0), need, np.inf))
        edges = np.concatenate([[0.0], np.geomspace(0.05, 20, 121), [np.inf]])
        bins = np.minimum(np.searchsorted(edges, need, side="left"), len(edges) - 1)
        t0 = int(grid[0])
        span = int(at.max()) - t0 + 1
        rel = np.clip(origins - t0, 0, span)
        first = np.clip(origins - window - t0, 0, span)
        buckets = self.buckets()
        for b in range(len(BUCKETS_H) + 1):
            cols = buckets == b
            known = ~np.isnan(need[:, cols])
            if not known.any():
                continue
            counts = np.zeros((span + 1, len(edges)))          # by the time forecast (+1) and the scale needed
            np.add.at(counts, ((at[:, cols] - t0)[known] + 1, bins[:, cols][known]), 1)
            cum = np.cumsum(counts, axis=0)                      # cum[t]: forecasts of times before t0 + t
            got = cum[rel] - cum[first]
            total = got.sum(axis=1)
            idx = np.argmax(np.cumsum(got, axis=1) >= 0.8 * total[:, None], axis=1)
            needed = np.clip(edges[np.clip(idx, 1, len(edges) - 2)], 1.0, RECENT_MAX_SCALE)
            w = total / (total + RECENT_PRIOR)
            out[:, cols] = np.where(total >= RECENT_MIN, w * needed + (1 - w), 1.0)[:, None]
        return out

    def forecast(self, series: Series, rentals: Rentals | None = None) -> Forecast:
        """The forecast from the end of ``series``: one row."""
        if len(series) == 0:
            raise ValueError("an empty series")
        return self.predict(series, [len(series)], rentals)

    def describe(self) -> str:
        """Which candidate serves which horizons, e.g. ``ridge 0-6h, weekly_profile 6-48h``."""
        parts, start = [], 0
        names = [self.methods[i].name if self.methods else str(i) for i in self.choice[:self.horizon]]
        for j in range(1, len(names) + 1):
            if j == len(names) or names[j] != names[start]:
                parts.append(f"{names[start]} {_hours(start * self.step_s)}-{_hours(j * self.step_s)}")
                start = j
        return ", ".join(parts)


def _mean_or_inf(a: np.ndarray) -> float:
    return float(np.nanmean(a)) if np.isfinite(a).any() else np.inf


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


def _band_scale(residual: np.ndarray, block: int, cols: np.ndarray | None = None) -> float:
    """How much wider (or narrower) the band must be for the next period to hold 80%: the band of the first
    half of the validation origins, scaled, against the residuals of the second half (over ``cols``, the
    horizons of one bucket; all of them by default)."""
    if cols is not None:
        residual = residual[:, cols]
    n = residual.shape[0] // 2
    if n < MIN_BLOCK_ERRORS or residual.shape[1] == 0:
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
