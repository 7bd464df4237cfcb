"""Demand from what the fleet knows and a bare series does not: the rentals running now.

A pool's demand at a time is the GPUs of the rentals running then. At a forecast's origin ``T`` the pipeline
knows each rental that started before ``T`` and whether it is still running at ``T`` (its age), and the lengths
of the rentals that ended before. So the demand ``h`` ahead is expected to be

    sum over the rentals running at T of  gpus * S(age + h) / S(age)          (those still running then)
  + sum over the steps up to T + h of     arrivals(step) * S(T + h - step)    (those that start meanwhile)

- ``S``: the survival of rental lengths (the share of rentals still running after a time), a Kaplan-Meier
  estimate from the rentals of the eight weeks before the fit (those still running count as censored at their
  age; a rental's age counts from the history's start at most), per tenant
  where a tenant has ended at least ``MIN_TENANT_RENTALS`` rentals, else the pool's; where few rentals reach an
  age, the hazard of the ones that do is kept (a constant tail);
- ``arrivals``: GPUs starting per step by hour of the week (of the day with less than a week of history)
  over the last four weeks, scaled by how the last day's arrivals compare with that profile (shrunk, within
  0.5 to 2);
- a per-horizon offset, the median error of this estimate over the fit's own history, takes up what the
  estimate leaves out (a step's demand is the most GPUs rented in it, not the mean).

:class:`Rentals` holds the rentals; :class:`RentalsModel` is the forecaster's candidate (``models/forecast.py``).
Plain numpy; nothing here knows Kafka or ClickHouse.
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass

import numpy as np

from .series import DAY, SeriesError, parse_time

MIN_TENANT_RENTALS = 50      # a tenant with fewer ended rentals than this uses the pool's survival
MIN_AT_RISK = 20             # where fewer rentals reach an age, the tail's pooled hazard is used
MIN_ENDED = 30               # fewer ended rentals than this before the fit: no candidate
HISTORY_S = 8 * 7 * DAY      # the rentals that set the survival: those started within this before the fit
PROFILE_WEEKS = 4            # arrivals by hour of the week over this many weeks
MAX_AGE_S = 120 * DAY        # the survival's grid; beyond it the tail's hazard


@dataclass(frozen=True)
class Rentals:
    """Rentals of one pool: start and end (Unix seconds; ``inf`` while still running), GPUs, tenant."""

    start: np.ndarray
    end: np.ndarray
    gpus: np.ndarray
    tenant: np.ndarray

    def __post_init__(self):
        if not len(self.start) == len(self.end) == len(self.gpus) == len(self.tenant):
            raise ValueError("start, end, gpus and tenant must have one value per rental")

    @classmethod
    def of(cls, rows) -> Rentals:
        """From ``(start, end or None, gpus, tenant)`` rows, sorted by start."""
        rows = sorted(rows, key=lambda r: r[0])
        return cls(np.array([float(r[0]) for r in rows], dtype=float),
                   np.array([math.inf if r[1] is None else float(r[1]) for r in rows], dtype=float),
                   np.array([float(r[2]) for r in rows], dtype=float),
                   np.array([str(r[3] or "") for r in rows], dtype=object))

    def __len__(self) -> int:
        return len(self.start)

    def held(self, times: np.ndarray) -> np.ndarray:
        """GPUs held at each time: the rentals with ``start <= t < end``."""
        t = np.asarray(times, dtype=float)
        changes = np.concatenate([self.start, self.end[np.isfinite(self.end)]])
        delta = np.concatenate([self.gpus, -self.gpus[np.isfinite(self.end)]])
        order = np.argsort(changes, kind="stable")
        cum = np.concatenate([[0.0], np.cumsum(delta[order])])
        return cum[np.searchsorted(changes[order], t, side="right")]


def read_rentals(path: str) -> Rentals:
    """Rentals from a CSV file with the columns ``start``, ``end`` (empty: still running), ``gpus`` and, if it
    has one, ``tenant``; times as Unix seconds or ISO 8601. Errors name the column and the line."""
    if os.path.exists(path) and not os.path.isfile(path):
        raise SeriesError("file", f"{path}: not a regular file")
    try:
        f = open(path, newline="", encoding="utf-8-sig")
    except OSError as err:
        raise SeriesError("file", f"cannot read {path!r}: {err.strerror}") from None
    rows = []
    with f:
        reader = csv.DictReader(f)
        missing = [c for c in ("start", "end", "gpus") if c not in (reader.fieldnames or [])]
        if missing:
            raise SeriesError("file", f"{path} has no column {', '.join(missing)} (columns: "
                                      f"{', '.join(reader.fieldnames or [])}; needed: start, end, gpus[, tenant])")
        for lineno, row in enumerate(reader, 2):
            try:
                start = parse_time(row["start"])
                end = parse_time(row["end"]) if (row["end"] or "").strip() else None
                gpus = float(row["gpus"])
            except (TypeError, ValueError):
                raise SeriesError("file", f"{path}:{lineno}: cannot read a rental from {row!r}") from None
            if gpus <= 0 or (end is not None and end < start):
                raise SeriesError("file", f"{path}:{lineno}: a rental needs gpus > 0 and an end after its start")
            rows.append((start, end, gpus, row.get("tenant") or ""))
    if not rows:
        raise SeriesError("file", f"{path} has no rentals")
    return Rentals.of(rows)


class Survival:
    """Kaplan-Meier survival of rental lengths on a grid of ``step_s``, with a constant-hazard tail."""

    def __init__(self, durations: np.ndarray, ended: np.ndarray, step_s: float):
        self.step = step_s
        n = int(math.ceil(MAX_AGE_S / step_s))
        j = np.minimum(np.ceil(np.maximum(durations, 1e-9) / step_s).astype(int), n + 1)   # the interval it ends in
        deaths = np.bincount(j[ended], minlength=n + 2)[1:n + 1].astype(float)
        leaving = np.bincount(j, minlength=n + 2)[1:].astype(float)
        at_risk = (len(j) - np.concatenate([[0.0], np.cumsum(leaving)[:-1]]))[:n]
        thin = at_risk < MIN_AT_RISK
        hazard = np.divide(deaths, at_risk, out=np.zeros(n), where=at_risk > 0)
        if thin.any():
            tail_n = at_risk[thin].sum()
            tail = deaths[thin].sum() / tail_n if tail_n > 0 else (deaths.sum() / max(at_risk.sum(), 1.0))
            hazard[thin] = tail
            self.tail = float(tail)
        else:
            self.tail = float(hazard[-1])
        hazard = np.clip(hazard, 0.0, 1 - 1e-6)
        self.log_s = np.concatenate([[0.0], np.cumsum(np.log1p(-hazard))])            # log S(j * step)
        self.log_tail = math.log1p(-min(self.tail, 1 - 1e-6))

    def log(self, seconds: np.ndarray) -> np.ndarray:
        """log S at each time (linear in between the grid's points)."""
        x = np.asarray(seconds, dtype=float) / self.step
        n = len(self.log_s) - 1
        inside = np.minimum(x, n)
        lo = np.floor(inside).astype(int)
        hi = np.minimum(lo + 1, n)
        frac = inside - lo
        out = self.log_s[lo] * (1 - frac) + self.log_s[hi] * frac
        return out + np.maximum(x - n, 0.0) * self.log_tail


class RentalsModel:
    """The forecaster's candidate built on the rentals running at each origin (see the module's docstring)."""

    name = "rentals"
    naive = False

    def __init__(self, rentals: Rentals):
        self.rentals = rentals
        self.pool: Survival | None = None
        self.tenants: dict[str, Survival] = {}
        self.profile: np.ndarray | None = None     # arrivals (GPUs per step) by step of the week
        self.offset: np.ndarray | None = None

    def min_origin(self, hist) -> int:
        return hist.per_day

    # -- fitting -------------------------------------------------------------------------
    def _survivals(self, until: float, step: float, lo: float) -> bool:
        r = self.rentals
        sel = (r.start < until) & (r.start >= max(until - HISTORY_S, lo))
        ended = sel & (r.end <= until)
        if int(ended.sum()) < MIN_ENDED:
            return False
        dur = np.where(r.end <= until, r.end, until)[sel] - r.start[sel]
        done = ended[sel]
        self.pool = Survival(dur, done, step)
        self.tenants = {}
        names = r.tenant[sel]
        for name in set(names.tolist()):
            mine = names == name
            if name and int(done[mine].sum()) >= MIN_TENANT_RENTALS:
                self.tenants[name] = Survival(dur[mine], done[mine], step)
        return True

    def _arrivals(self, hist, until: float) -> None:
        step, r = hist.step, self.rentals
        weeks = min(PROFILE_WEEKS, int((until - hist.series.start) // (7 * DAY)))
        period = hist.per_week if weeks >= 1 else hist.per_day
        span = (weeks * 7 * DAY) if weeks >= 1 else min(until - hist.series.start, 7 * DAY)
        span = max(span, step)
        sel = (r.start < until) & (r.start >= until - span)
        slot = (np.floor(r.start[sel] / step).astype(np.int64) % period)
        per_slot = np.bincount(slot, weights=r.gpus[sel], minlength=period)
        visits = np.bincount(np.floor(np.arange(until - span, until, step) / step).astype(np.int64) % period,
                             minlength=period).astype(float)
        rate = np.divide(per_slot, visits, out=np.zeros(period), where=visits > 0)
        # smoothed over the hour around each step (arrivals are few per step)
        w = hist.per_hour
        padded = np.concatenate([rate[-w:], rate, rate[:w]])
        kernel = np.ones(2 * w + 1) / (2 * w + 1)
        self.profile = np.convolve(padded, kernel, mode="same")[w:w + period]

    def fit(self, hist, end: int, horizon: int) -> bool:
        until = hist.series.start + end * hist.step
        if end < self.min_origin(hist) + 1 or not len(self.rentals) or \
                not self._survivals(until, hist.step, hist.series.start):
            return False
        self._arrivals(hist, until)
        self.offset = np.zeros(horizon)
        lo = max(self.min_origin(hist), end - 28 * hist.per_day)
        train = np.arange(lo, end - horizon + 1, hist.per_hour)
        if len(train) >= 20:
            train = train[np.linspace(0, len(train) - 1, min(len(train), 300)).astype(int)]
            raw = self._raw(hist, train, horizon)
            actual = hist.raw[train[:, None] + np.arange(horizon)[None, :]]
            err = actual - raw
            ok = ~np.isnan(err).all(axis=0)
            self.offset[ok] = np.nanmedian(err[:, ok], axis=0)
        return True

    # -- forecasting ----------------------------------------------------------------------
    def _raw(self, hist, origins: np.ndarray, horizon: int) -> np.ndarray:
        assert self.pool is not None and self.profile is not None
        r, step = self.rentals, hist.step
        k = np.arange(horizon)
        out = np.empty((len(origins), horizon))
        period = len(self.profile)
        kernel = np.exp(self.pool.log(np.arange(horizon) * step))           # S(m steps), m = 0 .. horizon - 1
        kernel[0] = 1.0
        per_day = hist.per_day
        for row, o in enumerate(origins):
            t = hist.series.start + o * step
            n_started = int(np.searchsorted(r.start, t, side="left"))       # started before t
            running = np.flatnonzero(r.end[:n_started] > t)                  # and still running at t
            held = np.zeros(horizon)
            if len(running):
                # ages from the series' start at most: what started before it is as old as the history tells
                age = t - np.maximum(r.start[running], hist.series.start)
                gpus = r.gpus[running]
                tenants = r.tenant[running]
                for name, surv in [(None, self.pool), *self.tenants.items()]:
                    mine = ~np.isin(tenants, list(self.tenants)) if name is None else tenants == name
                    if not mine.any():
                        continue
                    a = age[mine][:, None]
                    ratio = np.exp(surv.log(a + k[None, :] * step) - surv.log(a))
                    held += gpus[mine] @ ratio
            # arrivals: the profile from t on, scaled by the last day's against it
            slots = (np.floor(t / step).astype(np.int64) + k) % period
            lam = self.profile[slots]
            past = (np.floor(t / step).astype(np.int64) - per_day + np.arange(per_day)) % period
            expected = float(self.profile[past].sum())
            since = int(np.searchsorted(r.start, t - DAY, side="left"))
            seen = float(r.gpus[since:n_started].sum())
            c = max(expected / 4, 1.0)
            level = min(2.0, max(0.5, (seen + c) / (expected + c)))
            arriving = np.convolve(lam * level, kernel)[:horizon]
            out[row] = held + arriving
        return out

    def predict(self, hist, origins: np.ndarray, horizon: int) -> np.ndarray:
        assert self.offset is not None
        return np.maximum(self._raw(hist, origins, horizon) + self.offset[None, :horizon], 0.0)
