"""``gpufleet forecast backtest|run``, ``gpufleet scale simulate`` and ``gpufleet serve``.

numpy and scikit-learn (the forecast install) are imported by the commands that need them only:
``serve`` runs on the store install.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.errors import UsageError
from gpufleet.settings import load_settings

from . import COMMANDS
from .common import (
    Parser,
    kafka_overrides,
    series_options,
    store_options,
    writable_store,
)

if TYPE_CHECKING:
    from gpufleet.models.series import Series

DAY = 86400


class ArgumentError(ValueError):
    """A bad argument: ``argument`` names it."""

    def __init__(self, argument: str, message: str):
        super().__init__(f"argument {argument}: {message}")


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M")


def _duration(text: str | None, argument: str, default: float) -> float:
    from gpufleet.models.series import parse_duration
    if text is None:
        return default
    try:
        return parse_duration(text)
    except ValueError as err:
        raise ArgumentError(argument, str(err)) from None


def read_series(args) -> Series:
    """The demand series the arguments name (--series, --time-col, --value-col, --resample, --agg)."""
    from gpufleet.models.series import SeriesError, read_csv, regular, typical_step

    names = {"file": "--series", "time column": "--time-col", "value column": "--value-col"}
    try:
        times, values = read_csv(args.series, args.time_col, args.value_col)
        step = _duration(args.resample, "--resample", 0.0) or typical_step(times)
    except SeriesError as err:
        raise ArgumentError(names.get(err.argument, "--series"), err.message) from None
    if step > DAY or DAY % step > 1e-9:
        raise ArgumentError("--resample", f"a step of {step:g} s does not divide a day: resample, e.g. 10min")
    try:
        return regular(times, values, step, args.agg)
    except SeriesError as err:
        raise ArgumentError(names.get(err.argument, "--series"), err.message) from None


def read_rentals_arg(args):
    """The rentals of --rentals (None without it)."""
    if not getattr(args, "rentals", None):
        return None
    from gpufleet.models.rentals import read_rentals
    from gpufleet.models.series import SeriesError
    try:
        return read_rentals(args.rentals)
    except SeriesError as err:
        raise ArgumentError("--rentals", err.message) from None


def _test_from(args, series: Series, horizon_s: float) -> float:
    from gpufleet.models.series import parse_time
    if args.test_from is not None:
        try:
            t = parse_time(args.test_from)
        except ValueError:
            raise ArgumentError("--test-from", f"{args.test_from!r} is neither YYYY-MM-DD[THH:MM] nor Unix seconds")\
                from None
    else:   # the last third, from a midnight (UTC)
        t = math.floor((series.start + (len(series) * 2 // 3) * series.step_s) / DAY) * DAY
    if t - series.start < 2 * DAY:
        raise ArgumentError("--test-from", f"{_iso(t)} leaves less than two days of history before it "
                                           f"(the series starts {_iso(series.start)})")
    if t >= series.end - series.step_s:
        raise ArgumentError("--test-from", f"{_iso(t)} is not before the end of the series ({_iso(series.end)})")
    return t


def _describe_series(args, series: Series) -> str:
    gaps = int(sum(1 for v in series.values if v != v))
    return (f"series: {args.series}, {len(series):,} steps of {_label(series.step_s)} from {_iso(series.start)} to "
            f"{_iso(series.end)} UTC ({gaps:,} without a value)")


def _label(seconds: float) -> str:
    if seconds % DAY == 0:
        return f"{seconds / DAY:g} d"
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds % 60 == 0 else f"{seconds:g} s"


# -- forecast backtest -----------------------------------------------------------------------
def backtest_command(args) -> int:
    from gpufleet.models import backtest
    from gpufleet.summary import table

    series = read_series(args)
    horizon_s = _duration(args.horizon, "--horizon", 2 * DAY)
    if horizon_s < series.step_s or horizon_s > 14 * DAY:
        raise ArgumentError("--horizon", f"{args.horizon} is not between one step ({_label(series.step_s)}) and 14 d")
    every_s = _duration(args.every, "--every", 3600.0)
    refit_s = _duration(args.refit_every, "--refit-every", 7 * DAY)
    if every_s < series.step_s:
        raise ArgumentError("--every", f"{args.every} is shorter than the series' step ({_label(series.step_s)})")
    test_from = _test_from(args, series, horizon_s)
    rentals = read_rentals_arg(args)
    log = (lambda text: print(text, file=sys.stderr)) if not args.json else None
    started = time.monotonic()
    bt = backtest.run(series, horizon_s, test_from, backtest.Schedule(every_s, refit_s), progress=log,
                      rentals=rentals)
    seconds = time.monotonic() - started
    rep = bt.report()
    goals = bt.goals()
    train_steps = series.index(test_from)
    summary = {
        "series": {"file": args.series, "value_col": args.value_col, "step_s": series.step_s,
                   "start": series.start, "end": series.end, "steps": len(series),
                   "missing": int(sum(1 for v in series.values if v != v))},
        "split": {"train_until": test_from, "train_steps": train_steps, "test_steps": len(series) - train_steps,
                  "origins": len(bt.origins), "every_s": every_s, "refit_every_s": refit_s,
                  "horizon_s": bt.horizon * series.step_s},
        "horizons": rep,
        "goals": [{"goal": g, "met": ok, "value": v} for g, ok, v in goals],
        "worse_than_best_naive": bt.not_worse_than_naive(),
        "rentals": None if rentals is None else {"file": args.rentals, "rentals": len(rentals)},
        "chosen": bt.chosen(),
        "kept_naive": [{"horizon": h, "baseline": b} for h, b in bt.kept_naive()],
        "refits": [{"at": t, "methods": m} for t, m in bt.refits],
        "seconds": round(seconds, 1),
    }
    if args.chart:
        backtest.chart(bt, args.chart, title=f"{args.series}: forecast against actuals")
        summary["chart"] = args.chart
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    print(_describe_series(args, series))
    print(f"split: train on everything before {_iso(test_from)} UTC ({train_steps:,} steps), test from there "
          f"({len(series) - train_steps:,} steps): {len(bt.origins):,} origins every {_label(every_s)}, "
          f"horizon {_label(bt.horizon * series.step_s)}, refitted every {_label(refit_s)} "
          f"({len(bt.refits)} fits; backtest in {seconds:.0f} s)")
    rows = []
    for label, row in rep.items():
        for method, r in row.items():
            rows.append((label, method, _f(r["mae"]), _f(r["rmse"]), _f(r["smape_pct"]), _f(r["coverage_pct"], 1),
                         r["n"]))
    print(table(["horizon", "method", "MAE", "RMSE", "SMAPE_%", "p10-p90_coverage_%", "n"], rows))
    print("\ngoals\n" + table(["goal", "met", "value"],
                              [(g, "n/a" if ok is None else "yes" if ok else "NO", v) for g, ok, v in goals]))
    worse = bt.not_worse_than_naive()
    print("\nbetter than or equal to the best naive baseline (MAE) at every horizon shown" if not worse else
          f"\nworse than the best naive baseline (MAE) at: {', '.join(worse)}")
    print("chosen per horizon over the fits: " + "; ".join(
        f"{label} " + ", ".join(f"{m} {n}" for m, n in c.items()) for label, c in bt.chosen().items()))
    for label, base in bt.kept_naive():
        print(f"{label} ahead: {base.replace('_', ' ')} at every fit: nothing beat it on the fits' own backtests"
              + ("" if rentals is not None else " (no rentals given: --rentals adds what the fleet knows)"))
    if args.chart:
        print(f"chart: {args.chart}")
    return 0


def _f(v, digits: int = 3):
    return "-" if v is None else round(v, digits)


# -- scale simulate ----------------------------------------------------------------------------
def read_policy(path: str, pool: str | None):
    """The policy in a TOML file: the keys of the ``[scale]`` settings section, at the top or under
    ``[scale]``, with ``[pools.<pool>]`` over them for ``pool``."""
    from pydantic import ValidationError

    from gpufleet.contracts.files import FileError, read_toml
    from gpufleet.settings import ScaleSettings
    try:
        data = read_toml(path)
    except FileError as err:
        raise ArgumentError("--policy", str(err)) from None
    data = data.get("scale", data)
    try:
        scale = ScaleSettings.model_validate(data)
    except ValidationError as err:
        e = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in e["loc"])
        raise ArgumentError("--policy", f"{path}: {where + ': ' if where else ''}"
                                        f"{e['msg'].removeprefix('Value error, ')}") from None
    if pool is not None and pool not in scale.pools:
        raise ArgumentError("--pool", f"{path} has no [pools.{pool}] (it has: {', '.join(scale.pools) or 'none'})")
    return scale.policy(pool or "")


GOAL_GPU_HOURS_VS_REACTIVE_PCT = 10.0     # the forecast policy provisions at most this much more than reactive


def simulate_command(args) -> int:
    import numpy as np

    from gpufleet.models import backtest, scaling

    policy = read_policy(args.policy, args.pool)
    series = read_series(args)
    if args.capacity is not None:
        if args.capacity <= 0:
            raise ArgumentError("--capacity", f"{args.capacity} is not a positive number of GPUs")
        policy = policy.model_copy(update={"capacity_gpus": args.capacity})
    every_s = _duration(args.every, "--every", 3600.0)
    if every_s < series.step_s or every_s % series.step_s:
        raise ArgumentError("--every", f"{args.every} is not a multiple of the series' step ({_label(series.step_s)})")
    refit_s = _duration(args.refit_every, "--refit-every", 7 * DAY)
    test_from = _test_from(args, series, 2 * DAY)
    rentals = read_rentals_arg(args)
    start = series.index(test_from)
    horizon = int(round(2 * DAY / series.step_s))
    log = (lambda text: print(text, file=sys.stderr)) if not args.json else None
    started = time.monotonic()
    r = backtest.rolling(series, start, horizon, backtest.Schedule(every_s, refit_s), progress=log,
                         rentals=rentals)

    def forecast_at(i: int):
        j = int(np.searchsorted(r.origins, i, side="right")) - 1
        return None if j < 0 else r.p90[j, i - int(r.origins[j]):]

    decide_every = int(round(every_s / series.step_s))
    demand = np.asarray(series.values, dtype=float)
    capacity = scaling.pool_capacity(policy, demand)
    bounded = policy.model_copy(update={"capacity_gpus": capacity})
    outcomes = [scaling.simulate("forecast policy", demand, start, bounded, series.step_s, forecast_at, decide_every),
                scaling.simulate("reactive policy", demand, start, bounded, series.step_s, None, decide_every),
                scaling.static_peak(demand[start:], bounded, series.step_s, capacity),
                scaling.oracle(demand[start:], bounded, series.step_s, capacity)]
    where = ("--capacity" if args.capacity is not None else "the policy's capacity_gpus"
             if policy.capacity_gpus is not None else "the series' peak")
    run = _Simulated(policy, bounded, series, start, test_from, every_s, refit_s, rentals, capacity, where, outcomes,
                     time.monotonic() - started)
    print(_simulated_json(args, run) if args.json else _simulated_text(args, run))
    return 0


@dataclass(frozen=True)
class _Simulated:
    """What ``scale simulate`` ran and found."""

    policy: Any
    bounded: Any                  # the policy with the pool's capacity
    series: Any
    start: int                    # the first step replayed
    test_from: float
    every_s: float
    refit_s: float
    rentals: Any
    capacity: int
    capacity_from: str
    outcomes: list
    seconds: float

    def goals(self) -> list[tuple[str, bool, str]]:
        ours, reactive, static, _ = self.outcomes
        limit = reactive.provisioned_gpu_h * (1 + GOAL_GPU_HOURS_VS_REACTIVE_PCT / 100)
        more = 100 * (ours.provisioned_gpu_h / reactive.provisioned_gpu_h - 1) if reactive.provisioned_gpu_h else 0.0
        return [("provisions fewer GPU-hours than static peak capacity",
                 ours.provisioned_gpu_h < static.provisioned_gpu_h,
                 f"{ours.provisioned_gpu_h:,.0f} vs {static.provisioned_gpu_h:,.0f}"),
                ("shortfall no worse than the reactive policy (GPU-hours and times)",
                 ours.shortfall_gpu_h <= reactive.shortfall_gpu_h + 1e-9 and
                 ours.shortfall_count <= reactive.shortfall_count,
                 f"{ours.shortfall_gpu_h:,.1f} GPU-h in {ours.shortfall_count} times vs "
                 f"{reactive.shortfall_gpu_h:,.1f} GPU-h in {reactive.shortfall_count} times"),
                (f"provisions at most {GOAL_GPU_HOURS_VS_REACTIVE_PCT:g}% more GPU-hours than the reactive policy",
                 ours.provisioned_gpu_h <= limit + 1e-9,
                 f"{ours.provisioned_gpu_h:,.0f} vs {reactive.provisioned_gpu_h:,.0f} ({more:+.1f}%)")]


def _simulated_json(args, run: _Simulated) -> str:
    return json.dumps({"policy": run.bounded.model_dump(), "series": args.series, "from": run.test_from,
                       "steps": len(run.series) - run.start, "step_s": run.series.step_s, "every_s": run.every_s,
                       "capacity_gpus": run.capacity, "capacity_from": run.capacity_from,
                       "rentals": None if run.rentals is None else {"file": args.rentals, "rentals": len(run.rentals)},
                       "outcomes": {o.name: o.to_dict() for o in run.outcomes},
                       "goals": [{"goal": g, "met": ok, "value": v} for g, ok, v in run.goals()],
                       "seconds": round(run.seconds, 1)}, indent=1)


def _simulated_text(args, run: _Simulated) -> str:
    from gpufleet.summary import table
    p, rentals = run.policy, run.rentals
    fh = "" if p.forecast_headroom_pct is None else f" ({p.forecast_headroom_pct:g}% over the forecast's p90)"
    return "\n".join([
        _describe_series(args, run.series),
        f"policy: headroom {p.headroom_pct:g}%{fh}, min {p.min_gpus}, max {p.max_gpus or 'none'}, "
        f"step {p.step_gpus}, cooldown {_label(p.cooldown_s)}, lead time {_label(p.lead_time_s)}, scale-in once "
        f"the forecast and the demand of the last {_label(p.scale_in_after_s)} agree",
        f"pool: {run.capacity:,} GPUs ({run.capacity_from}); no policy goes above it, and demand beyond it is a "
        "shortfall of all",
        f"replayed from {_iso(run.test_from)} UTC ({len(run.series) - run.start:,} steps); decisions and forecasts "
        f"every {_label(run.every_s)}, the forecaster refitted every {_label(run.refit_s)} on the history before"
        f"{'' if rentals is None else f', with {len(rentals):,} rentals'} ({run.seconds:.0f} s)",
        table(["policy", "GPU_hours", "idle_GPU_hours", "shortfall_GPU_hours", "shortfall_times", "changes",
               "peak_GPUs"],
              [(o.name, round(o.provisioned_gpu_h, 1), round(o.idle_gpu_h, 1), round(o.shortfall_gpu_h, 1),
                o.shortfall_count, o.changes, o.peak_capacity) for o in run.outcomes]),
        "oracle: perfect foresight, exactly the demand at every step (in whole steps of the policy), within the "
        "pool: the least any policy could provision",
        "\ngoals\n" + table(["goal", "met", "value"], [(g, "yes" if ok else "NO", v) for g, ok, v in run.goals()])])


# -- forecast run, and the same at the end of replay and demo ------------------------------------
def embedded_forecasts(settings, store, events) -> object:
    """Forecasts and scale decisions due over what the embedded pipeline stored; events to ``events``."""
    from gpufleet.streams.forecasting import ForecastRunner
    from gpufleet.streams.sink import Sink

    sink = Sink(store, settings.store.batch_rows, settings.store.batch_seconds)
    runner = ForecastRunner(settings.forecast, settings.scale, store, sink, events.write)
    return runner.run_once()


def run_command(args, settings, store) -> int:
    from gpufleet.streams.forecast_events import topic_names
    from gpufleet.streams.forecasting import ForecastRunner
    from gpufleet.streams.kafka import EventPublisher, KafkaUnavailable, ensure_topics
    from gpufleet.streams.sink import Sink

    topics = topic_names(settings)
    stop = threading.Event()
    if not args.once:               # SIGTERM and ^C end the loop after the forecast time in progress
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    try:
        ensure_topics(settings.kafka.bootstrap, {t: settings.kafka.partitions for t in topics.values()})
    except (KafkaUnavailable, ValueError) as err:
        print(f"gpufleet forecast run: kafka: {err}", file=sys.stderr)
        return 1
    bus = EventPublisher(settings.kafka.bootstrap, {"gpufleet.forecast.v1": topics["forecast"],
                                                    "gpufleet.scale.v1": topics["scale"]}, stop=stop)
    sink = Sink(store, settings.store.batch_rows, settings.store.batch_seconds)
    runner = ForecastRunner(settings.forecast, settings.scale, store, sink, bus)
    while True:
        report = runner.run_once()
        if report.made_at:
            print(f"made {report.forecasts} forecasts and {report.decisions} scale decisions at "
                  f"{len(report.made_at)} times ({_iso(report.made_at[0])} to {_iso(report.made_at[-1])} UTC); "
                  f"published {report.published} events to {topics['forecast']} and {topics['scale']}", flush=True)
        elif args.once:
            print("nothing due: no pool has new telemetry past the next forecast time (forecast.every_s, "
                  "forecast.settle_s)")
        if args.once or stop.wait(settings.forecast.poll_s):
            if stop.is_set():
                print("stopped", flush=True)
            return 0


# -- serve -------------------------------------------------------------------------------------------
def serve_command(args, settings, store) -> int:
    from gpufleet import feed, web
    from gpufleet.view import routes as view
    router = web.Router()
    registry = feed.mount(router, store)
    view.mount(router, store, view.ViewConfig(settings.serve, settings.billing.currency, settings.stream.silent_after_s,
                                              settings.billing.underuse_pct, settings.billing.default_price_note()),
               registry)
    router.add_prefix("/manual/", web.static_files(
        settings.serve.manual_dir, "/manual/", f"the manual is not built in {settings.serve.manual_dir!r} (setting "
        "serve.manual_dir): run make docs"), "the manual and its runbooks")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def ready(host: str, port: int) -> None:
        local = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
        store.announce(f"http://{local}:{port}")       # report and top read through this server meanwhile
        print(f"serving on http://{host}:{port}: " + ", ".join(
            f"{path} ({what})" for path, what in sorted(router.descriptions.items())), flush=True)
    try:
        web.serve(router, settings.serve.host, settings.serve.port, stop, ready)
    except OSError as err:
        print(f"gpufleet serve: cannot listen on {settings.serve.host}:{settings.serve.port}: {err.strerror}",
              file=sys.stderr)
        return 1
    return 0


# -- the command line --------------------------------------------------------------------------------



def cmd_forecast(args) -> int:
    try:
        if args.forecast_command == "backtest":
            return backtest_command(args)
        overrides: dict = {"store": {k: v for k, v in (("dsn", args.dsn), ("database", args.database)) if v}}
        if args.dry_run:
            overrides["scale"] = {"dry_run": True}
        settings = load_settings(args.config, **{k: v for k, v in overrides.items() if v}, **kafka_overrides(args))
        if args.dry_run:    # every pool, whatever its own policy says
            settings = settings.model_copy(update={"scale": settings.scale.model_copy(update={
                "pools": {p: {**v, "dry_run": True} for p, v in settings.scale.pools.items()}})})
        store = writable_store(settings)
        try:
            return run_command(args, settings, store)
        finally:
            store.close()
    except ArgumentError as err:
        raise UsageError(f"{args.prog} {args.forecast_command}: {err}") from None


def cmd_scale(args) -> int:
    try:
        return simulate_command(args)
    except ArgumentError as err:
        raise UsageError(f"{args.prog} simulate: {err}") from None


def _rentals_option(m) -> None:
    m.add_argument("--rentals", metavar="CSV",
                   help="the pool's rentals (columns start, end, gpus[, tenant]; an empty end: still running): the "
                        "forecaster adds a candidate built on the rentals running at each origin")


def add_forecast(sub) -> None:
    s = sub.add_parser("forecast", help=COMMANDS["forecast"].summary,
                       description="Forecast each pool's demand 48 hours ahead with a p10-p90 band: backtest the "
                                   "forecaster on any demand series against naive baselines, or run the forecast "
                                   "process that makes forecasts and scale decisions from the store.")
    fsub = s.add_subparsers(dest="forecast_command", metavar="ACTION", parser_class=Parser)
    fsub.required = True
    m = fsub.add_parser("backtest", help="rolling-origin backtest against last value, yesterday and last week",
                        description="From every origin of the test period (one an hour), forecast the next "
                                    "--horizon from the values before it only, refitting the forecaster every "
                                    "--refit-every on everything before; print MAE, RMSE, SMAPE and p10-p90 "
                                    "coverage per horizon for the forecaster and the naive baselines, and the goals.")
    series_options(m)
    _rentals_option(m)
    m.add_argument("--horizon", default="48h", metavar="H", help="how far ahead, e.g. 48h (default 48h)")
    m.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    m.add_argument("--chart", metavar="PNG", help="draw forecast against actuals with the band, and SMAPE by horizon")
    m = fsub.add_parser("run", help="make forecasts and scale decisions from the store, publish them to Kafka",
                        description="Read each pool's demand from the store, make the forecasts and scale decisions "
                                    "due (every forecast.every_s of event time), publish them to "
                                    "<prefix>.forecast and <prefix>.scale and store them; then look again every "
                                    "forecast.poll_s seconds.")
    m.add_argument("--once", action="store_true", help="make what is due now, then exit")
    m.add_argument("--dry-run", action="store_true",
                   help="every pool's scale decisions are recorded only (setting scale.dry_run)")
    m.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    store_options(m)
    s.set_defaults(fn=cmd_forecast)


def add_scale(sub) -> None:
    s = sub.add_parser("scale", help=COMMANDS["scale"].summary,
                       description="Scale policies: replay a demand series through one.")
    ssub = s.add_subparsers(dest="scale_command", metavar="ACTION", parser_class=Parser)
    ssub.required = True
    m = ssub.add_parser("simulate", help="GPU-hours, idle and shortfall of a policy against static peak and reactive",
                        description="Replay a demand series through a scale policy fed by the forecaster (fitted on "
                                    "the history before the test period, refitted as it goes) and print GPU-hours "
                                    "provisioned, idle GPU-hours and shortfall, against a static capacity at the "
                                    "series' peak, a purely reactive policy and an oracle with perfect foresight, "
                                    "all within the pool's capacity.")
    series_options(m)
    m.add_argument("--policy", required=True, metavar="FILE",
                   help="TOML policy: the keys of the [scale] settings section (docs/forecasting.md)")
    m.add_argument("--pool", help="use the policy's [pools.POOL] values")
    m.add_argument("--capacity", type=int, metavar="GPUS",
                   help="GPUs the pool has: no policy goes above it (default: the policy's capacity_gpus, else the "
                        "series' peak)")
    _rentals_option(m)
    m.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    s.set_defaults(fn=cmd_scale)
