"""Demand series on a regular time grid: read from CSV, resampled, gaps kept as NaN.

A :class:`Series` is a start time (Unix seconds UTC, a multiple of the step), a step in seconds and
one value per step; a step with no observation is NaN, never made up. Nothing here knows Kafka or
ClickHouse.
"""
from __future__ import annotations

import csv
import datetime as dt
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DAY = 86400
WEEK = 7 * DAY
AGGREGATES = ("mean", "max", "min", "sum", "last")
_UNITS = {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "d": DAY, "w": WEEK}


class SeriesError(ValueError):
    """Bad input: names the argument (``column``, ``file``, ...) and what is wrong, in one line."""

    def __init__(self, argument: str, message: str):
        super().__init__(f"{argument}: {message}")
        self.argument, self.message = argument, message


@dataclass(frozen=True)
class Series:
    """Values at ``start + i * step_s``; NaN where nothing was observed."""

    start: float
    step_s: float
    values: np.ndarray

    def __post_init__(self):
        if self.step_s <= 0:
            raise ValueError("step_s must be positive")

    def __len__(self) -> int:
        return len(self.values)

    @property
    def end(self) -> float:
        """The time just after the last step."""
        return self.start + len(self.values) * self.step_s

    def times(self) -> np.ndarray:
        return self.start + self.step_s * np.arange(len(self.values), dtype=float)

    def index(self, ts: float) -> int:
        """The step that holds ``ts`` (may lie outside the series)."""
        return int(math.floor((ts - self.start) / self.step_s + 1e-9))

    def head(self, end: int) -> Series:
        """The first ``end`` steps."""
        return Series(self.start, self.step_s, self.values[:max(end, 0)])


def parse_duration(text: str) -> float:
    """``600``, ``600s``, ``10min``, ``1h``, ``2d``, ``1w`` as seconds (> 0)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", text.lower())
    if not m or m.group(2) not in ("", *_UNITS):
        raise ValueError(f"{text!r} is not a duration such as 600s, 10min, 1h, 2d or 1w")
    seconds = float(m.group(1)) * _UNITS.get(m.group(2), 1)
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return seconds


def parse_time(text: str) -> float:
    """Unix seconds, or ISO 8601 (``2020-05-01T00:10:00+08:00``; no offset means UTC)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def read_csv(path: str, time_col: str | None, value_col: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Times (Unix seconds) and values of two columns of a CSV file with a header line.

    ``time_col`` defaults to ``ts``; ``value_col`` to the only other column. An empty value is a gap
    (NaN); a value or time that cannot be read raises :class:`SeriesError` naming its line.
    """
    if os.path.exists(path) and not os.path.isfile(path):     # a directory, a FIFO (opening it would block)
        raise SeriesError("file", f"{path}: not a regular file")
    try:
        f = open(path, newline="", encoding="utf-8-sig")
    except OSError as err:
        raise SeriesError("file", f"cannot read {path!r}: {err.strerror}") from None
    try:
        with f:
            return _read_rows(path, f, time_col, value_col)
    except UnicodeDecodeError as err:
        raise SeriesError("file", f"{path}: not UTF-8 text (byte {err.start})") from None
    except csv.Error as err:
        raise SeriesError("file", f"{path}: not CSV gpufleet reads: {err}") from None


def _read_rows(path: str, f, time_col: str | None, value_col: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The rows of an open CSV file (see :func:`read_csv`)."""
    reader = csv.reader(f)
    header = next(reader, None)
    if not header:
        raise SeriesError("file", f"{path} is empty")
    header = [h.strip() for h in header]
    time_col = time_col or "ts"
    if time_col not in header:
        raise SeriesError("time column", f"no column {time_col!r} in {path} (columns: {', '.join(header)})")
    if value_col is None:
        others = [h for h in header if h != time_col]
        if len(others) != 1:
            raise SeriesError("value column", f"{path} has columns {', '.join(header)}: name the one to use")
        value_col = others[0]
    if value_col not in header:
        raise SeriesError("value column", f"no column {value_col!r} in {path} (columns: {', '.join(header)})")
    ti, vi = header.index(time_col), header.index(value_col)
    times, values = [], []
    for lineno, row in enumerate(reader, 2):
        if not row or all(not c.strip() for c in row):
            continue
        try:
            times.append(parse_time(row[ti]))
        except (ValueError, IndexError):
            raise SeriesError("time column", f"{path}:{lineno}: cannot read a time from "
                                             f"{row[ti] if ti < len(row) else ''!r}") from None
        cell = row[vi].strip() if vi < len(row) else ""
        try:
            values.append(float(cell) if cell else math.nan)
        except ValueError:
            raise SeriesError("value column", f"{path}:{lineno}: {cell!r} is not a number") from None
    if not times:
        raise SeriesError("file", f"{path} has no rows")
    return np.asarray(times, dtype=float), np.asarray(values, dtype=float)


def typical_step(times: Sequence[float] | np.ndarray) -> float:
    """The most common spacing of sorted, distinct times (the series' own step)."""
    t = np.unique(np.asarray(times, dtype=float))
    if len(t) < 2:
        raise SeriesError("file", "fewer than two distinct times")
    gaps, counts = np.unique(np.round(np.diff(t), 3), return_counts=True)
    return float(gaps[np.argmax(counts)])


def regular(times: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray, step_s: float,
            agg: str = "mean") -> Series:
    """Bucket ``(time, value)`` pairs into steps of ``step_s`` aligned to the epoch, aggregated with ``agg``.

    A step with no value (or only NaN) is NaN.
    """
    if agg not in AGGREGATES:
        raise ValueError(f"aggregate {agg!r} is not one of {', '.join(AGGREGATES)}")
    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)
    keep = ~np.isnan(v) & ~np.isnan(t)
    if not keep.any():
        raise SeriesError("value column", "no values")
    order = np.argsort(t[keep], kind="stable")
    t, v = t[keep][order], v[keep][order]
    slot = np.floor(t / step_s + 1e-9).astype(np.int64)
    first = int(slot[0])
    idx = slot - first
    n = int(idx[-1]) + 1
    out = np.full(n, np.nan)
    if agg == "mean":
        sums = np.bincount(idx, weights=v, minlength=n)
        counts = np.bincount(idx, minlength=n)
        np.divide(sums, counts, out=out, where=counts > 0)
    elif agg == "sum":
        counts = np.bincount(idx, minlength=n)
        out = np.where(counts > 0, np.bincount(idx, weights=v, minlength=n), np.nan)
    elif agg == "last":
        out[idx] = v                       # later times overwrite earlier ones
    else:
        fill = -np.inf if agg == "max" else np.inf
        acc = np.full(n, fill)
        (np.maximum if agg == "max" else np.minimum).at(acc, idx, v)
        out = np.where(np.isfinite(acc), acc, np.nan)
    return Series(first * step_s, float(step_s), out)
