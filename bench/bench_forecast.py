"""What forecasting costs per pool: the forecaster's fit and forecast against the last-value baseline, and the
forecast process over a store against reading the demand it needs.

    .venv/bin/python bench/bench_forecast.py

1. Model: 8 weeks of a simulated pool's demand at 10 min (the default history); a forecast of 48 h from one
   origin by the last value (baseline), by the fitted forecaster, and the fit itself (28 days of rolling-origin
   validation over every candidate); then a simulated pool of tenants (8 weeks, 50 rentals an hour) with and
   without its rentals (the rentals candidate).
2. Process: one pool of 16 GPUs with 14 days of per-GPU minutes in the embedded store; `run_once` making a
   day of hourly forecasts and decisions (fits included, nothing published), with the pool's rentals read
   from the store (the default) and without, against the query that reads the pool's demand (baseline).
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_of, machine  # noqa: E402

from gpufleet.collectors.simulator.demand import pool_demand, tenant_pool  # noqa: E402
from gpufleet.models.forecast import Forecaster, History, LastValue  # noqa: E402
from gpufleet.models.rentals import Rentals  # noqa: E402
from gpufleet.models.series import DAY, Series  # noqa: E402

START = 1767571200.0


def model() -> None:
    times, gpus = pool_demand(8, seed=1, rentals_per_hour=50, start=START)
    series = Series(times[0], 600.0, np.asarray(gpus))
    last = LastValue()
    hist = History(series)
    base = best_of(lambda: last.predict(History(series), np.array([len(series)]), 288))
    fitted = Forecaster(600, 2 * DAY).fit(series)

    def first():
        fitted._recent = (None, {})
        fitted.forecast(series)
    cold = best_of(first)
    forecast = best_of(lambda: fitted.forecast(series))
    fit = best_of(lambda: Forecaster(600, 2 * DAY).fit(series))
    del hist
    print(f"model: 8 weeks at 10 min ({len(series):,} steps), 48 h ahead; {machine()}")
    print("| step | ms | vs baseline |\n|---|---:|---:|")
    for name, t in (("forecast by the last value (baseline)", base),
                    ("the first forecast after a fit (the last week's forecasts for the band made)", cold),
                    ("forecast by the fitted forecaster (those kept)", forecast),
                    ("fit (choice by rolling-origin backtest, band)", fit)):
        print(f"| {name} | {t * 1000:,.1f} | {t / base:,.0f}x |")
    print(f"chosen: {fitted.describe()}")

    times, gpus, held = tenant_pool(8, seed=1, rentals_per_hour=50, start=START)
    series = Series(times[0], 600.0, np.asarray(gpus))
    rentals = Rentals.of(held)
    base = best_of(lambda: last.predict(History(series), np.array([len(series)]), 288))
    bare = best_of(lambda: Forecaster(600, 2 * DAY).fit(series))
    fitted = Forecaster(600, 2 * DAY, rentals=rentals).fit(series)

    def first():
        fitted._recent = (None, {})           # as after a fit: the last week's forecasts are made again
        fitted.forecast(series)
    cold = best_of(first)
    forecast = best_of(lambda: fitted.forecast(series))
    fit = best_of(lambda: Forecaster(600, 2 * DAY, rentals=rentals).fit(series))
    print(f"\nmodel with rentals: a pool of tenants, 8 weeks at 10 min, {len(rentals):,} rentals; {machine()}")
    print("| step | ms | vs baseline |\n|---|---:|---:|")
    for name, t in (("forecast by the last value (baseline)", base),
                    ("the first forecast after a fit (the last week's forecasts for the band made)", cold),
                    ("forecast by the fitted forecaster (those kept)", forecast),
                    ("fit without the rentals", bare), ("fit with the rentals", fit)):
        print(f"| {name} | {t * 1000:,.1f} | {t / base:,.0f}x |")
    print(f"chosen: {fitted.describe()}; the fit with rentals takes {fit / bare:.2f}x the fit without")


def process() -> None:
    from gpufleet.settings import ForecastSettings, ScaleSettings
    from gpufleet.sql.store import Store
    from gpufleet.streams.forecasting import ForecastRunner, read_demand
    from gpufleet.streams.sink import Sink

    days, gpus = 14, 16
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.connect(f"chdb://{tmp}", "bench", create=True)
        store.migrate()
        times, demand = pool_demand(days / 7, seed=2, rentals_per_hour=3, start=START, step_s=60)
        rows = [(int(t), "p1", "t" if k < min(gpus, int(d)) else "", f"GPU-{k}", 50.0, 60.0, 300.0, 1e9)
                for t, d in zip(times, demand) for k in range(gpus)]
        cols = ("minute", "pool", "tenant", "gpu_uuid", "util", "util_max", "power", "mem_used")
        for lo in range(0, len(rows), 200_000):
            store.insert(store.prepare("usage_gpu_1m", cols, rows[lo:lo + 200_000], dedup=False))
        end = START + days * DAY
        read = best_of(lambda: read_demand(store, "p1", end - 57 * DAY, end))

        def run(rentals: bool = True):
            store.command("TRUNCATE TABLE forecasts")
            store.command("TRUNCATE TABLE scale_events")
            runner = ForecastRunner(ForecastSettings(rentals=rentals), ScaleSettings(), store, Sink(store),
                                    lambda events: None)
            report = runner.run_once()
            assert report.forecasts == 25, report
        made = best_of(run)
        bare = best_of(lambda: run(False))
        print(f"\nprocess: 1 pool, {gpus} GPUs, {days} days of per-GPU minutes ({len(rows):,} rows) in chdb; "
              "a day of hourly forecasts (25) with their decisions and fits")
        print("| step | s | vs baseline |\n|---|---:|---:|")
        for name, t in (("read the pool's demand, 57 days of pool_demand_5m (baseline)", read),
                        ("run_once without the rentals (forecast.rentals false)", bare),
                        ("run_once: 25 forecasts and decisions, stored (rentals read from the store)", made)):
            print(f"| {name} | {t:,.2f} | {t / read:,.1f}x |")
        print(f"{made / 25 * 1000:,.0f} ms per pool and forecast, the day's fit included")
        store.close()


if __name__ == "__main__":
    model()
    process()
