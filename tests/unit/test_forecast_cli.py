"""`gpufleet forecast backtest` and `gpufleet scale simulate` on any demand CSV: figures per horizon and method,
goals, JSON, chart; bad arguments and policies give one line naming them and exit 2."""
import datetime as dt
import json

import numpy as np
import pytest

from gpufleet.cli import main

DAY, WEEK = 86400, 7 * 86400


@pytest.fixture(scope="module")
def demand_csv(tmp_path_factory):
    """Five weeks of a tidal pool demand at 10 min, times with an offset as the Helios traces write them."""
    path = tmp_path_factory.mktemp("series") / "demand.csv"
    n = 5 * WEEK // 600
    t = 1735516800 + 600 * np.arange(n)
    rng = np.random.default_rng(11)
    gpus = np.round(400 + 120 * np.sin(2 * np.pi * t / DAY) + 60 * np.sin(2 * np.pi * t / WEEK)
                    + rng.normal(0, 15, n), 1)
    tz = dt.timezone(dt.timedelta(hours=8))
    lines = ["ts,gpus,note"] + [f"{dt.datetime.fromtimestamp(a, tz).isoformat()},{b}," for a, b in zip(t, gpus)]
    lines[100] = lines[100].rsplit(",", 2)[0] + ",,gap"          # a step without a value
    path.write_text("\n".join(lines) + "\n")
    return path


def test_backtest_prints_every_method_at_every_horizon_and_the_goals(demand_csv, tmp_path, capsys):
    chart = tmp_path / "bt.png"
    assert main(["forecast", "backtest", "--series", str(demand_csv), "--time-col", "ts", "--value-col", "gpus",
                 "--horizon", "48h", "--chart", str(chart)]) == 0
    out = capsys.readouterr().out
    assert "5,040 steps of 10 min" in out and "(1 without a value)" in out
    for horizon in ("10min", "1h", "6h", "12h", "24h", "48h", "all"):
        for method in ("gpufleet", "last_value", "same_time_yesterday", "same_time_last_week"):
            assert any(line.split()[:2] == [horizon, method] for line in out.splitlines()), (horizon, method)
    assert "1h ahead: SMAPE at least 20% below last value" in out
    assert chart.stat().st_size > 20_000 and chart.read_bytes()[:4] == b"\x89PNG"


def test_backtest_json_holds_the_same_figures(demand_csv, capsys):
    assert main(["forecast", "backtest", "--series", str(demand_csv), "--value-col", "gpus", "--resample", "20min",
                 "--agg", "max", "--horizon", "24h", "--test-from", "2025-01-27", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["series"]["step_s"] == 1200 and doc["split"]["train_until"] == 1737936000
    assert set(doc["horizons"]) == {"20min", "1h", "6h", "12h", "24h", "all"}
    for row in doc["horizons"].values():
        assert set(row) == {"gpufleet", "last_value", "same_time_yesterday", "same_time_last_week"}
        assert set(row["gpufleet"]) == {"mae", "rmse", "smape_pct", "coverage_pct", "n"}
        assert row["gpufleet"]["coverage_pct"] is not None and row["last_value"]["coverage_pct"] is None
    h24 = doc["horizons"]["24h"]
    assert h24["gpufleet"]["smape_pct"] < 0.7 * h24["same_time_yesterday"]["smape_pct"]
    assert {g["goal"]: g["met"] for g in doc["goals"]}["24h ahead: SMAPE at least 30% below same time yesterday"]


def test_scale_simulate_against_static_peak_and_reactive(demand_csv, tmp_path, capsys):
    policy = tmp_path / "policy.toml"
    policy.write_text("headroom_pct = 5\nstep_gpus = 8\ncooldown_s = 1800\nlead_time_s = 1800\n"
                      "[pools.big]\nmin_gpus = 600\n")
    assert main(["scale", "simulate", "--series", str(demand_csv), "--value-col", "gpus", "--policy", str(policy),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ours, reactive, static, oracle = (doc["outcomes"][k] for k in ("forecast policy", "reactive policy",
                                                                   "static peak", "oracle"))
    assert static["shortfall_gpu_hours"] == 0 and oracle["shortfall_gpu_hours"] == 0
    assert oracle["provisioned_gpu_hours"] < min(ours["provisioned_gpu_hours"], reactive["provisioned_gpu_hours"])
    assert ours["provisioned_gpu_hours"] < static["provisioned_gpu_hours"]
    assert ours["shortfall_gpu_hours"] <= reactive["shortfall_gpu_hours"]
    assert reactive["shortfall_count"] > 0
    assert [g["goal"] for g in doc["goals"]][2] == "provisions at most 10% more GPU-hours than the reactive policy"
    assert all(g["met"] for g in doc["goals"][:2]), doc["goals"]
    assert doc["policy"]["lead_time_s"] == 1800 and doc["policy"]["min_gpus"] == 0
    # the pool is the series' peak unless told: no policy goes above it
    assert doc["capacity_from"] == "the series' peak" and doc["capacity_gpus"] >= ours["peak_capacity"]
    assert main(["scale", "simulate", "--series", str(demand_csv), "--value-col", "gpus", "--policy", str(policy),
                 "--pool", "big"]) == 0
    out = capsys.readouterr().out
    assert "policy: headroom 5%, min 600" in out and "static peak" in out and "shortfall no worse" in out
    assert "oracle: perfect foresight" in out


def test_scale_simulate_keeps_every_policy_within_the_pool_it_is_given(demand_csv, tmp_path, capsys):
    policy = tmp_path / "policy.toml"
    policy.write_text("headroom_pct = 10\nstep_gpus = 8\n")
    assert main(["scale", "simulate", "--series", str(demand_csv), "--value-col", "gpus", "--policy", str(policy),
                 "--capacity", "500", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["capacity_gpus"] == 500 and doc["capacity_from"] == "--capacity"
    for name, o in doc["outcomes"].items():
        assert o["peak_capacity"] <= 500, name
    # demand beyond the pool is a shortfall of every policy, the oracle's included
    assert doc["outcomes"]["oracle"]["shortfall_gpu_hours"] > 0
    assert doc["outcomes"]["static peak"]["shortfall_gpu_hours"] == doc["outcomes"]["oracle"]["shortfall_gpu_hours"]


def test_backtest_says_where_the_last_value_was_kept_and_takes_the_pool_s_rentals(tmp_path, capsys):
    from gpufleet.collectors.simulator.demand import tenant_pool
    times, gpus, held = tenant_pool(6, seed=5, rentals_per_hour=40)
    series, rentals = tmp_path / "pool.csv", tmp_path / "rentals.csv"
    series.write_text("ts,gpus\n" + "".join(f"{t:.0f},{g:g}\n" for t, g in zip(times, gpus)))
    end = times[-1] + 600
    rentals.write_text("start,end,gpus,tenant\n" + "".join(f"{a:.0f},{b:.0f},{g},{n}\n" if b <= end else
                                                             f"{a:.0f},,{g},{n}\n" for a, b, g, n in held if a < end))
    # a random walk has nothing to learn: the last value stays at every horizon up to a few hours, and it says so
    walk = tmp_path / "walk.csv"
    steps = np.random.default_rng(2).normal(0, 3, len(times))
    walk.write_text("ts,gpus\n" + "".join(f"{t:.0f},{500 + v:.2f}\n" for t, v in zip(times, np.cumsum(steps))))
    assert main(["forecast", "backtest", "--series", str(walk), "--horizon", "6h"]) == 0
    out = capsys.readouterr().out
    assert "1h ahead: last value at every fit: nothing beat it on the fits' own backtests (no rentals given" in out
    assert main(["forecast", "backtest", "--series", str(series), "--rentals", str(rentals), "--horizon", "6h",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rentals"]["rentals"] == sum(1 for a, *_ in held if a < end)
    assert doc["chosen"]["1h"].get("rentals", 0) >= 1 and doc["kept_naive"] == []
    h = doc["horizons"]["1h"]
    assert h["gpufleet"]["smape_pct"] <= 0.9 * h["last_value"]["smape_pct"]


@pytest.mark.parametrize("args, names", [
    (["forecast", "backtest"], "--series"),
    (["forecast", "backtest", "--series", "/no/such.csv"], "--series"),
    (["forecast", "backtest", "--series", "CSV", "--value-col", "nodes"], "--value-col"),
    (["forecast", "backtest", "--series", "CSV", "--time-col", "when"], "--time-col"),
    (["forecast", "backtest", "--series", "CSV"], "--value-col"),                 # two columns besides ts
    (["forecast", "backtest", "--series", "CSV", "--value-col", "gpus", "--horizon", "2 fortnights"], "--horizon"),
    (["forecast", "backtest", "--series", "CSV", "--value-col", "gpus", "--horizon", "30d"], "--horizon"),
    (["forecast", "backtest", "--series", "CSV", "--value-col", "gpus", "--resample", "7min"], "--resample"),
    (["forecast", "backtest", "--series", "CSV", "--value-col", "gpus", "--agg", "median"], "--agg"),
    (["forecast", "backtest", "--series", "CSV", "--value-col", "gpus", "--test-from", "2024-01-01"], "--test-from"),
    (["forecast", "backtest", "--series", "CSV", "--value-col", "gpus", "--test-from", "2031-01-01"], "--test-from"),
    (["forecast", "backtest", "--series", "CSV", "--value-col", "gpus", "--test-from", "soon"], "--test-from"),
    (["scale", "simulate", "--series", "CSV", "--value-col", "gpus"], "--policy"),
    (["scale", "simulate", "--series", "CSV", "--value-col", "gpus", "--policy", "POLICY"], "headroom"),
    (["scale", "simulate", "--series", "CSV", "--value-col", "gpus", "--policy", "/no/policy.toml"], "--policy"),
    (["scale", "simulate", "--series", "CSV", "--value-col", "gpus", "--policy", "GOOD", "--pool", "x"], "--pool"),
    (["scale", "simulate", "--series", "CSV", "--value-col", "gpus", "--policy", "GOOD", "--every", "25min"],
     "--every"),
    (["scale", "simulate", "--series", "CSV", "--value-col", "gpus", "--policy", "GOOD", "--capacity", "0"],
     "--capacity"),
    (["scale", "simulate", "--series", "CSV", "--value-col", "gpus", "--policy", "GOOD", "--capacity", "many"],
     "--capacity"),
    (["forecast", "backtest", "--series", "CSV", "--value-col", "gpus", "--rentals", "/no/rentals.csv"], "--rentals"),
    (["forecast", "backtest", "--series", "CSV", "--value-col", "gpus", "--rentals", "CSV"], "--rentals"),
])
def test_bad_arguments_give_one_line_naming_them_and_exit_2(args, names, demand_csv, tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("headroom = 10\n")                    # a misspelt key is refused, not ignored
    good = tmp_path / "good.toml"
    good.write_text("step_gpus = 8\n")
    args = [{"CSV": str(demand_csv), "POLICY": str(bad), "GOOD": str(good)}.get(a, a) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and names in err and "Traceback" not in err, err
