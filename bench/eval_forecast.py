"""The forecast and scale-policy evaluation behind QUALITY.md ("Demand forecast"): simulated fleets and, where
given, real cluster demand traces, each through the very commands a user runs.

    python bench/eval_forecast.py [--traces DIR] [--out DIR] [--dev] [--seeds 1,2,3] [--weeks 12]

For every series: `gpufleet forecast backtest --json --chart` and `gpufleet scale simulate --json` with
bench/scale-policy.toml (and the cluster's `--capacity` from DIR/capacity.csv); writes the JSON, the charts and
report.md (a forecast table, a row per series and horizon: SMAPE at 1 h, 6 h and 24 h for the forecaster and
each naive baseline, the ratio to the best of them (and the same in MAE, what the forecaster chooses by), p10-p90
coverage, the goals; and a scale table, a row per series) to --out, and prints the report. --report-only writes
the report from the JSON there.

Simulated fleets (`collectors/simulator/demand.py`, `tenant_pool`): 50 rentals an hour at the tide's peak,
three tenants renting for an hour, four or sixteen (median), 12 weeks at 10 min, each step the most GPUs held
in it; their rentals go to `--rentals`, and the same series is backtested bare (without them) beside.
Traces are read from DIR as `bench/forecast_traces.py` writes them (not part of the repository).

The evaluation set (default) and the development set (--dev, the one to choose and tune on) share no series:

- development: simulated seeds 11, 12, 13; the first two thirds of Venus and of Philly (their test periods end
  where the evaluation's test thirds begin); Earth's virtual clusters DEV_VCS;
- evaluation: simulated seeds 1, 2, 3; Venus, Earth (all its clusters) and Philly whole (test: their last
  thirds); Earth's virtual clusters EVAL_VCS.

Earth's virtual clusters with demand are split by name: sorted, every other one from the first is development.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "bench" / "scale-policy.toml"
TRACES = (("helios-venus-demand", "gpus", None), ("helios-earth-demand", "gpus", None),
          ("philly-nodes-demand", "nodes", "nodes"))
VCS = ("vc3sl", "vc6YE", "vc8Sj", "vcJLV", "vcLJZ", "vcMod", "vcSoL", "vcTJs", "vccaA", "vcdI0", "vcgkz", "vchbv",
       "vcpDC", "vcvlY")
DEV_VCS, EVAL_VCS = VCS[0::2], VCS[1::2]
HORIZONS = ("1h", "6h", "24h")
NAIVE = ("last_value", "same_time_yesterday", "same_time_last_week")
COVERAGE = (75.0, 85.0)
GOAL_1H_WITH_RENTALS = 0.9        # simulated fleets: 1 h SMAPE at most this times the last value's


def gpufleet(*args: str) -> dict:
    cmd = [sys.executable, "-m", "gpufleet", *args]
    print("$ gpufleet " + " ".join(args), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout)


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def simulated(out: Path, seed: int, weeks: float) -> tuple[Path, Path]:
    """The series and the rentals of a simulated pool of tenants."""
    from gpufleet.collectors.simulator.demand import tenant_pool
    times, gpus, held = tenant_pool(weeks, seed=seed, rentals_per_hour=50)
    path, rentals = out / f"simulated-fleet-{seed}.csv", out / f"simulated-fleet-{seed}-rentals.csv"
    with open(path, "w", encoding="utf-8") as f:
        f.write("ts,gpus\n" + "".join(f"{_iso(t)},{g:g}\n" for t, g in zip(times, gpus)))
    end = times[-1] + 600
    with open(rentals, "w", encoding="utf-8") as f:     # what is known at the series' end: later ends unknown
        f.write("start,end,gpus,tenant\n" + "".join(
            f"{_iso(a)},{_iso(b) if b <= end else ''},{g},{name}\n" for a, b, g, name in held if a < end))
    return path, rentals


def first_two_thirds(path: Path, out: Path) -> Path:
    """The trace's first two thirds of rows (the header kept), for the development set."""
    lines = path.read_text(encoding="utf-8").splitlines()
    cut = out / f"{path.stem}-dev.csv"
    cut.write_text("\n".join(lines[:1 + (len(lines) - 1) * 2 // 3]) + "\n", encoding="utf-8")
    return cut


def capacities(traces: Path) -> dict[str, int]:
    path = traces / "capacity.csv"
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        return {r["series"]: int(r["gpus"]) for r in csv.DictReader(f)}


def evaluate(name: str, path: Path, value_col: str, pool: str | None, out: Path, capacity: int | None,
             rentals: Path | None) -> dict:
    series = ["--series", str(path), "--value-col", value_col]
    known = ["--rentals", str(rentals)] if rentals else []
    bt = gpufleet("forecast", "backtest", *series, *known, "--horizon", "48h", "--json", "--chart",
                  str(out / f"{name}.png"))
    bare = gpufleet("forecast", "backtest", *series, "--horizon", "48h", "--json") if rentals else None
    sim = gpufleet("scale", "simulate", *series, *known, "--policy", str(POLICY), *(["--pool", pool] if pool else []),
                   *(["--capacity", str(capacity)] if capacity else []), "--json")
    result = {"backtest": bt, "bare": bare, "simulate": sim}
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    return result


def _pct(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def _goals(checks: list[tuple[str, bool]]) -> str:
    missed = [g for g, ok in checks if not ok]
    return "MISSED: " + ", ".join(missed) if missed else "met"


def forecast_rows(name: str, result: dict) -> list[str]:
    """One row per horizon: SMAPE of ours (and of ours on the bare series, where the rentals are known) and of each
    naive baseline, ours over the best of them, the same in MAE (what the forecaster chooses by), p10-p90 coverage,
    what the fits chose, the goals."""
    h = result["backtest"]["horizons"]
    rentals = result["backtest"].get("rentals") is not None
    bare = result.get("bare")
    chosen = result["backtest"].get("chosen", {})
    rows = []
    for label in HORIZONS:
        if label not in h:
            continue
        r = h[label]
        naive = {m: r[m]["smape_pct"] for m in NAIVE if r[m]["smape_pct"] is not None}
        best = min(naive.values()) if naive else None
        ours = r["gpufleet"]["smape_pct"]
        ratio = ours / best if best else None
        cov = r["gpufleet"]["coverage_pct"]
        maes = [r[m]["mae"] for m in NAIVE if r[m]["mae"] is not None]
        mae_ratio = r["gpufleet"]["mae"] / min(maes) if maes and min(maes) else None
        checks = [("coverage", COVERAGE[0] <= cov <= COVERAGE[1])]
        if ratio is not None:
            checks.append(("worse than naive", ratio <= 1.0 + 1e-9))
        if rentals and label == "1h":
            checks.append((f"{GOAL_1H_WITH_RENTALS} x last value",
                           ours <= GOAL_1H_WITH_RENTALS * r["last_value"]["smape_pct"] + 1e-9))
        kept = ", ".join(f"{m} {n}" for m, n in chosen.get(label, {}).items())
        alone = _pct(bare["horizons"][label]["gpufleet"]["smape_pct"]) if bare else "-"
        row = [name, label, _pct(ours), alone] + [_pct(r[m]["smape_pct"]) for m in NAIVE] + \
            ["-" if ratio is None else f"{ratio:.3f}", "-" if mae_ratio is None else f"{mae_ratio:.3f}", f"{cov:.1f}",
             kept, _goals(checks)]
        rows.append("| " + " | ".join(row) + " |")
    return rows


FORECAST_HEAD = ["series", "horizon", "ours", "ours, series alone", "last value", "same time yesterday",
                 "same time last week", "ratio to best naive", "MAE ratio", "coverage %", "chosen by the fits",
                 "goals"]
SCALE_HEAD = ["series", "pool", "forecast policy GPU-h", "reactive GPU-h", "vs reactive", "static peak GPU-h",
              "oracle GPU-h", "idle GPU-h, policy / reactive", "shortfall GPU-h (times), policy / reactive", "goals"]


def scale_row(name: str, result: dict) -> str:
    sim = result["simulate"]
    o = {k: sim["outcomes"][k] for k in ("forecast policy", "reactive policy", "static peak", "oracle")}
    pol, rea = o["forecast policy"], o["reactive policy"]
    more = (pol["provisioned_gpu_hours"] / rea["provisioned_gpu_hours"] - 1) * 100 \
        if rea["provisioned_gpu_hours"] else 0.0
    checks = [(g["goal"].replace("provisions ", "").replace(" the reactive policy", " reactive")
               .replace(" (GPU-hours and times)", ""), g["met"]) for g in sim["goals"]]
    row = [name, f"{sim['capacity_gpus']:,} ({'peak' if 'peak' in sim['capacity_from'] else 'installed'})",
           f"{pol['provisioned_gpu_hours']:,.0f}", f"{rea['provisioned_gpu_hours']:,.0f}", f"{more:+.1f} %",
           f"{o['static peak']['provisioned_gpu_hours']:,.0f}", f"{o['oracle']['provisioned_gpu_hours']:,.0f}",
           f"{pol['idle_gpu_hours']:,.0f} / {rea['idle_gpu_hours']:,.0f}",
           f"{pol['shortfall_gpu_hours']:,.1f} ({pol['shortfall_count']}) / "
           f"{rea['shortfall_gpu_hours']:,.1f} ({rea['shortfall_count']})", _goals(checks)]
    return "| " + " | ".join(row) + " |"


def _table(head: list[str], rows: list[str]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + rows + [""]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", help="folder holding the trace CSVs (bench/forecast_traces.py)")
    p.add_argument("--out", default=str(ROOT / "out" / "forecast-eval"), help="where JSON, charts and report go")
    p.add_argument("--seeds", help="simulated fleets (default 1,2,3; with --dev 11,12,13)")
    p.add_argument("--weeks", type=float, default=12, help="weeks of each simulated fleet (default 12)")
    p.add_argument("--dev", action="store_true", help="the development set, to choose and tune on (see above)")
    p.add_argument("--report-only", action="store_true", help="write report.md from the JSON a run left in --out")
    args = p.parse_args()
    out = Path(args.out) / ("development" if args.dev else "evaluation")
    out.mkdir(parents=True, exist_ok=True)
    seeds = args.seeds or ("11,12,13" if args.dev else "1,2,3")
    if args.report_only:
        results = {path.stem: json.loads(path.read_text()) for path in sorted(out.glob("*.json"), key=_order)}
        return _report(args, out, results)
    series: list[tuple[str, Path, str, str | None, int | None, Path | None]] = []
    for s in seeds.split(","):
        path, rentals = simulated(out, int(s), args.weeks)
        series.append((path.stem, path, "gpus", None, None, rentals))
    if args.traces:
        traces = Path(args.traces)
        cap = capacities(traces)
        names = [t for t in TRACES if not (args.dev and t[0] == "helios-earth-demand")]
        names += [(f"earth-vc-{v}", "gpus", None) for v in (DEV_VCS if args.dev else EVAL_VCS)]
        for stem, col, pool in names:
            path = traces / f"{stem}.csv"
            if not os.path.isfile(path):
                print(f"not found, left out: {path}", file=sys.stderr)
                continue
            if args.dev and not stem.startswith("earth-vc-"):
                path = first_two_thirds(path, out)
            series.append((path.stem, path, col, pool, cap.get(stem), None))
    results = {name: evaluate(name, path, col, pool, out, capacity, rentals)
               for name, path, col, pool, capacity, rentals in series}
    return _report(args, out, results)


def _order(path: Path) -> tuple[int, str]:
    """Simulated fleets, then the clusters, then the virtual clusters."""
    name = path.stem
    return (0 if name.startswith("simulated") else 2 if name.startswith("earth-vc") else 1, name)


def _report(args, out: Path, results: dict) -> int:
    """Two tables: the forecast (a row per series and horizon) and the scale policy (a row per series)."""
    title = "Development" if args.dev else "Evaluation"
    lines = [f"### {title} set: forecast (SMAPE %)", ""]
    lines += _table(FORECAST_HEAD, [row for name, result in results.items() for row in forecast_rows(name, result)])
    lines += [f"### {title} set: scale policy", ""]
    lines += _table(SCALE_HEAD, [scale_row(name, result) for name, result in results.items()])
    report = "\n".join(lines)
    (out / "report.md").write_text(report + "\n", encoding="utf-8")
    print(report)
    print(f"\nJSON, charts and report.md in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
