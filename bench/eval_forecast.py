"""The forecast and scale-policy evaluation behind QUALITY.md ("Demand forecast"): simulated fleets and, where
given, real cluster demand traces, each through the very commands a user runs.

    python bench/eval_forecast.py [--traces DIR] [--out DIR] [--seeds 1,2,3] [--weeks 12] [--dev]

For every series: `gpufleet forecast backtest --json --chart` and `gpufleet scale simulate --json` with
bench/scale-policy.toml; prints one table of the goals' figures and writes the JSON and charts to --out.
Traces are read from DIR when present: helios-venus-demand.csv, helios-earth-demand.csv (column gpus) and
philly-nodes-demand.csv (column nodes), as README "Demand forecast" describes; they are not part of the
repository.

--dev runs the development set instead, the one to choose and tune on: simulated seeds 11, 12 and 13 and the
first two thirds of Venus and Philly (their own test periods end where the evaluation's test thirds begin;
Earth's month is too short to cut). The evaluation's series are for figures only, run once per change chosen.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "bench" / "scale-policy.toml"
TRACES = (("helios-venus-demand.csv", "gpus", None), ("helios-earth-demand.csv", "gpus", None),
          ("philly-nodes-demand.csv", "nodes", "nodes"))


def gpufleet(*args: str) -> dict:
    cmd = [sys.executable, "-m", "gpufleet", *args]
    print("$ gpufleet " + " ".join(args), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout)


def simulated(out: Path, seed: int, weeks: float) -> Path:
    from gpufleet.collectors.simulator.demand import pool_demand
    path = out / f"simulated-fleet-{seed}.csv"
    times, gpus = pool_demand(weeks, seed=seed, rentals_per_hour=50)
    with open(path, "w", encoding="utf-8") as f:
        f.write("ts,gpus\n")
        for t, g in zip(times, gpus):
            f.write(f"{dt.datetime.fromtimestamp(t, dt.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')},{g:g}\n")
    return path


def first_two_thirds(path: Path, out: Path) -> Path:
    """The trace's first two thirds of rows (the header kept), for the development set."""
    lines = path.read_text(encoding="utf-8").splitlines()
    cut = out / f"{path.stem}-dev.csv"
    cut.write_text("\n".join(lines[:1 + (len(lines) - 1) * 2 // 3]) + "\n", encoding="utf-8")
    return cut


def evaluate(path: Path, value_col: str, pool: str | None, out: Path) -> dict:
    name = path.stem
    series = ["--series", str(path), "--value-col", value_col]
    bt = gpufleet("forecast", "backtest", *series, "--horizon", "48h", "--json", "--chart", str(out / f"{name}.png"))
    sim = gpufleet("scale", "simulate", *series, "--policy", str(POLICY), *(["--pool", pool] if pool else []),
                   "--json")
    (out / f"{name}.json").write_text(json.dumps({"backtest": bt, "simulate": sim}, indent=1))
    return {"backtest": bt, "simulate": sim}


def row(name: str, result: dict) -> list[str]:
    h = result["backtest"]["horizons"]
    goals = result["backtest"]["goals"][:3] + result["simulate"]["goals"]     # 1h, 24h, coverage; GPU-h, shortfall
    o = result["simulate"]["outcomes"]
    ours, reactive, static = o["forecast policy"], o["reactive policy"], o["static peak"]

    def gain(label, base):
        a, b = h[label]["gpufleet"]["smape_pct"], h[label][base]["smape_pct"]
        return f"{a:.2f} vs {b:.2f} ({100 * (1 - a / b):+.1f}%)"

    cov = h["all"]["gpufleet"]["coverage_pct"]
    return [name, gain("1h", "last_value"), gain("24h", "same_time_yesterday"),
            f"{cov:.1f} (1h {h['1h']['gpufleet']['coverage_pct']:.1f}, 24h {h['24h']['gpufleet']['coverage_pct']:.1f})",
            f"{ours['provisioned_gpu_hours']:,.0f} / {static['provisioned_gpu_hours']:,.0f}",
            f"{ours['shortfall_gpu_hours']:,.1f} in {ours['shortfall_count']} / "
            f"{reactive['shortfall_gpu_hours']:,.1f} in {reactive['shortfall_count']}",
            " ".join("yes" if g["met"] else "NO" for g in goals)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", help="folder holding the trace CSVs")
    p.add_argument("--out", default=str(ROOT / "out" / "forecast-eval"), help="where JSON and charts go")
    p.add_argument("--seeds", help="simulated fleets (default 1,2,3; with --dev 11,12,13)")
    p.add_argument("--weeks", type=float, default=12, help="weeks of each simulated fleet (default 12)")
    p.add_argument("--dev", action="store_true", help="the development set, to choose and tune on (see above)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = args.seeds or ("11,12,13" if args.dev else "1,2,3")
    series = [(simulated(out, int(s), args.weeks), "gpus", None) for s in seeds.split(",")]
    if args.traces:
        found = [(Path(args.traces) / f, col, pool) for f, col, pool in TRACES if os.path.isfile(Path(args.traces) / f)]
        if args.dev:
            found = [(first_two_thirds(path, out), col, pool) for path, col, pool in found
                     if not path.name.startswith("helios-earth")]
        series += found
    rows = [row(path.stem, evaluate(path, col, pool, out)) for path, col, pool in series]
    head = ["series", "SMAPE % 1h: ours vs last value", "SMAPE % 24h: ours vs yesterday", "p10-p90 coverage %",
            "GPU-h: policy / static peak", "shortfall GPU-h in times: policy / reactive",
            "goals met: 1h, 24h, coverage, GPU-h, shortfall"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(f"\nJSON and charts in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
