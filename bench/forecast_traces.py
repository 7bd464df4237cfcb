"""The real demand traces of QUALITY.md ("Demand forecast"), derived from the public files they come from.

    python bench/forecast_traces.py --lucid PATH --helios PATH [--out DIR]

--lucid is a clone of S-Lab-System-Group/Lucid, --helios one of S-Lab-System-Group/HeliosArtifact (README, "Real
traces", for their licenses). Writes into --out (default out/traces) the three series `bench/eval_forecast.py
--traces` reads:

- helios-venus-demand.csv (ts, gpus): Venus' GPUs in use every 10 min, the running sum of GPUs started less GPUs
  ended (`simulation/data/Venus/cluster_throughput.csv`), counted from the outage of 2020-05-10 that emptied the
  cluster (the sum's lowest point is 0), 2020-04-01 to 2020-09-27;
- helios-earth-demand.csv (ts, gpus): Earth's running GPUs of its 16 virtual clusters per minute
  (`analysis/2_cluster characterization/Earth_vcs/*/cluster_sequence_vc.csv`), summed, mean per 10 min;
- philly-nodes-demand.csv (ts, nodes): Philly's active nodes per minute (`framework/CES Service/data/
  philly_node_sequence.csv`), mean per 10 min; a 10 minutes without a row has none.

The Helios clusters' times are local (UTC+8) and are written so; Philly's as they are, as UTC.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np

from gpufleet.models.series import Series, SeriesError, parse_time, read_csv, regular

ROOT = Path(__file__).resolve().parent.parent
VENUS = Path("simulation/data/Venus/cluster_throughput.csv")
EARTH = Path("analysis/2_cluster characterization/Earth_vcs")
PHILLY = Path("framework/CES Service/data/philly_node_sequence.csv")
VENUS_LAST = parse_time("2020-09-27 23:50:00")     # the file's last day ends early; the series stops before it
STEP = 600.0
# The sources' times carry no zone: they are read as if UTC (10-minute steps fall alike in any whole-hour
# zone) and written back as they were, with the zone they are in.


def write(path: Path, column: str, series: Series, zone: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"ts,{column}\n")
        for t, v in zip(series.times(), series.values):
            if not np.isnan(v):
                f.write(f"{dt.datetime.fromtimestamp(t, dt.UTC).strftime('%Y-%m-%dT%H:%M:%S')}{zone},{v:g}\n")
    first, last = (dt.datetime.fromtimestamp(t, dt.UTC) for t in (series.times()[0], series.times()[-1]))
    print(f"{path}: {len(series)} steps, {first:%Y-%m-%d} to {last:%Y-%m-%d}", file=sys.stderr)


def venus(lucid: Path) -> Series:
    times, started = read_csv(str(lucid / VENUS), "time", "start_gpu_num")
    _, ended = read_csv(str(lucid / VENUS), "time", "end_gpu_num")
    running = np.cumsum(started - ended)
    running -= running.min()                       # the outage: nothing runs
    keep = times <= VENUS_LAST
    return regular(times[keep], running[keep], STEP, "last")


def earth(helios: Path) -> Series:
    files = sorted((helios / EARTH).glob("*/cluster_sequence_vc.csv"))
    if not files:
        raise SeriesError("file", f"no virtual cluster under {helios / EARTH}")
    columns = [read_csv(str(path), "time", "running_gpu_num") for path in files]
    per_minute = regular(np.concatenate([t for t, _ in columns]), np.concatenate([v for _, v in columns]), 60.0,
                         "sum")
    return regular(per_minute.times(), per_minute.values, STEP, "mean")


def philly(helios: Path) -> Series:
    return regular(*read_csv(str(helios / PHILLY), "time", "active"), STEP, "mean")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lucid", required=True, type=Path, help="a clone of S-Lab-System-Group/Lucid")
    p.add_argument("--helios", required=True, type=Path, help="a clone of S-Lab-System-Group/HeliosArtifact")
    p.add_argument("--out", type=Path, default=ROOT / "out" / "traces", help="where the CSVs go (default out/traces)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        write(args.out / "helios-venus-demand.csv", "gpus", venus(args.lucid), "+08:00")
        write(args.out / "helios-earth-demand.csv", "gpus", earth(args.helios), "+08:00")
        write(args.out / "philly-nodes-demand.csv", "nodes", philly(args.helios), "Z")
    except SeriesError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
