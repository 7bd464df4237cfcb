"""A simulated pool's demand over weeks: rentals that arrive with the tide and hold GPUs for a while.

Rentals arrive as a Poisson process whose rate follows the time of day (busiest at ``peak_hour`` UTC) and
the day of the week (weekends quieter), on a level that wanders slowly; each takes 1, 2, 4 or 8 GPUs
(or a 16-64 GPU training job, now and then) for a log-normal time (a few hours, with a long tail). The
demand at a time is the GPUs held by the rentals active then. With tenants (:func:`tenant_pool`), each
rental belongs to a tenant whose rentals have a typical length of their own (an hour, four, sixteen), and
each step's demand is the most GPUs held in it. Deterministic for a seed; the standard library only, so
that it runs on any install.

    times, gpus = pool_demand(weeks=12, seed=1)                 # GPUs held at each step's start
    times, gpus, held = tenant_pool(weeks=12, seed=1)           # the most in each step, and the rentals
"""
from __future__ import annotations

import math
import random

DAY = 86400.0
WEEK = 7 * DAY
WEEKDAY_FACTOR = (1.0, 1.05, 1.1, 1.1, 1.0, 0.7, 0.6)       # Monday .. Sunday


def _tide(t: float, peak_hour: float) -> float:
    hour = (t % DAY) / 3600.0
    weekday = int((t // DAY + 3) % 7)                      # 1970-01-01 was a Thursday; Monday = 0
    return (1.0 + 0.6 * math.cos(2 * math.pi * (hour - peak_hour) / 24.0)) * WEEKDAY_FACTOR[weekday]


# tenants of a simulated pool with rentals of their own typical length: (name, share of rentals, median hours)
TENANTS = (("interactive", 0.55, 1.0), ("batch", 0.35, 4.0), ("training", 0.10, 16.0))


def _rentals(begin: float, end: float, *, seed: int, rentals_per_hour: float, median_hours: float,
             peak_hour: float, tenants) -> list[tuple[float, float, int, str]]:
    rng = random.Random(seed)
    base = rentals_per_hour / 3600.0
    peak = base * 1.6 * max(WEEKDAY_FACTOR) * 1.3          # the highest rate the level allows
    out: list[tuple[float, float, int, str]] = []
    level, level_at, t = 1.0, begin, begin
    while True:
        t += rng.expovariate(peak)                          # thinning: candidates at the peak rate...
        if t >= end:
            return out
        while level_at + 6 * 3600 <= t:                     # the level wanders a little every six hours
            level_at += 6 * 3600
            level = min(1.3, max(0.7, level * math.exp(rng.gauss(0, 0.05))))
        if rng.random() * peak > base * level * _tide(t, peak_hour):
            continue                                        # ...kept in proportion to the rate now
        name, median = "", median_hours
        if tenants:
            pick, acc = rng.random() * sum(w for _, w, _ in tenants), 0.0
            for tenant, w, hours in tenants:
                name, median = tenant, hours
                acc += w
                if pick < acc:
                    break
        gpus = rng.choice((1, 1, 2, 2, 4, 8)) if rng.random() > 0.03 else rng.choice((16, 32, 64))
        hours = math.exp(rng.gauss(math.log(median), 1.0))
        out.append((t, t + hours * 3600.0, gpus, name))


def rentals(begin: float, end: float, *, seed: int = 1, rentals_per_hour: float = 6.0, median_hours: float = 3.0,
            peak_hour: float = 14.0) -> list[tuple[float, float, int]]:
    """``(start, end, GPUs)`` of every rental that starts in ``[begin, end)``."""
    return [(a, b, g) for a, b, g, _ in _rentals(begin, end, seed=seed, rentals_per_hour=rentals_per_hour,
                                                  median_hours=median_hours, peak_hour=peak_hour, tenants=None)]


def tenant_rentals(begin: float, end: float, *, seed: int = 1, rentals_per_hour: float = 6.0,
                   peak_hour: float = 14.0, tenants=TENANTS) -> list[tuple[float, float, int, str]]:
    """``(start, end, GPUs, tenant)`` of every rental that starts in ``[begin, end)``: each rental's tenant is
    drawn by its share, and its length around that tenant's median (``tenants``: name, share, median hours)."""
    return _rentals(begin, end, seed=seed, rentals_per_hour=rentals_per_hour, median_hours=3.0,
                    peak_hour=peak_hour, tenants=tenants)


def pool_demand(weeks: float = 12, *, step_s: float = 600.0, seed: int = 1, start: float = 1767571200.0,
                **shape) -> tuple[list[float], list[float]]:
    """Times (every ``step_s`` from ``start``) and the GPUs held at each; rentals begin three days earlier,
    so the series starts in a steady state. ``shape``: see :func:`rentals`."""
    n = int(weeks * WEEK // step_s)
    changes = []
    for a, b, g in rentals(start - 3 * DAY, start + n * step_s, seed=seed, **shape):
        changes += [(a, g), (b, -g)]
    changes.sort()
    times = [start + i * step_s for i in range(n)]
    held, j, out = 0, 0, []
    for t in times:
        while j < len(changes) and changes[j][0] <= t:
            held += changes[j][1]
            j += 1
        out.append(float(held))
    return times, out


def tenant_pool(weeks: float = 12, *, step_s: float = 600.0, seed: int = 1, start: float = 1767571200.0,
                **shape) -> tuple[list[float], list[float], list[tuple[float, float, int, str]]]:
    """A pool whose tenants rent for lengths of their own (:func:`tenant_rentals`): times (every ``step_s``
    from ``start``), the most GPUs held in each step (as ``pool_demand_5m.rented_gpus_max`` counts them), and
    the rentals, from three days before ``start``."""
    n = int(weeks * WEEK // step_s)
    held = tenant_rentals(start - 3 * DAY, start + n * step_s, seed=seed, **shape)
    changes = sorted([(a, g) for a, _, g, _ in held] + [(b, -g) for _, b, g, _ in held])
    times = [start + i * step_s for i in range(n)]
    out, level, j = [], 0, 0
    for t in times:
        while j < len(changes) and changes[j][0] <= t:
            level += changes[j][1]
            j += 1
        top, now, k = level, level, j
        while k < len(changes) and changes[k][0] < t + step_s:
            now += changes[k][1]
            top = max(top, now)
            k += 1
        out.append(float(top))
    return times, out, held
