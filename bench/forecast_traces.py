"""The real demand traces of QUALITY.md ("Demand forecast"), derived from the public files they come from.

    python bench/forecast_traces.py --lucid PATH --helios PATH [--out DIR]

--lucid is a clone of S-Lab-System-Group/Lucid, --helios one of S-Lab-System-Group/HeliosArtifact (docs/forecasting.md,
"Real traces", for their licenses). Writes into --out (default out/traces) the series `bench/eval_forecast.py
--traces` reads, each the most in any minute of every 10 minutes where the source has minutes (what the forecast
process forecasts: `pool_demand_5m.rented_gpus_max`):

- helios-venus-demand.csv (ts, gpus): Venus' GPUs in use every 10 min, the running sum of GPUs started less GPUs
  ended (`simulation/data/Venus/cluster_throughput.csv`, counts per 10 min: the sum at the end of each), counted
  from the outage of 2020-05-10 that emptied the cluster (the sum's lowest point is 0), 2020-04-01 to 2020-09-27;
- helios-earth-demand.csv (ts, gpus): Earth's running GPUs of its virtual clusters per minute
  (`analysis/2_cluster characterization/Earth_vcs/*/cluster_sequence_vc.csv`), summed, the most per 10 min;
- earth-vc-<name>.csv (ts, gpus) for each virtual cluster of Earth with demand (a mean of at least 1 GPU): its
  running GPUs, the most per 10 min;
- philly-nodes-demand.csv (ts, nodes): Philly's active nodes per minute (`framework/CES Service/data/
  philly_node_sequence.csv`), the most per 10 min; a 10 minutes without a row has none;
- capacity.csv (series, gpus): what each cluster has, the bound of `gpufleet scale simulate --capacity`: Venus'
  nodes (`simulation/data/Venus/vc_config.csv`) times 8 GPUs; Earth's and each virtual cluster's installed GPUs
  over the series' days, the most common daily figure of `Earth_vcs/Earth_gpu_number.csv`; Philly's most nodes
  (column total).

The Helios clusters' times are local (UTC+8) and are written so; Philly's as they are, as UTC.
"""
from __future__ import annotations

import argparse
import collections
import csv
import datetime as dt
import sys
from pathlib import Path

import numpy as np

from gpufleet.models.series import Series, SeriesError, parse_time, read_csv, regular

ROOT = Path(__file__).resolve().parent.parent
VENUS = Path("simulation/data/Venus/cluster_throughput.csv")
VENUS_NODES = Path("simulation/data/Venus/vc_config.csv")
GPUS_PER_NODE = 8                                  # Helios' nodes
EARTH = Path("analysis/2_cluster characterization/Earth_vcs")
EARTH_GPUS = EARTH / "Earth_gpu_number.csv"
PHILLY = Path("framework/CES Service/data/philly_node_sequence.csv")
VENUS_LAST = parse_time("2020-09-27 23:50:00")     # the file's last day ends early; the series stops before it
STEP = 600.0
MIN_MEAN_GPUS = 1.0                                # a virtual cluster that rents less than this on average is left out
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


def _vcs(helios: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    files = sorted((helios / EARTH).glob("*/cluster_sequence_vc.csv"))
    if not files:
        raise SeriesError("file", f"no virtual cluster under {helios / EARTH}")
    return [(path.parent.name, *read_csv(str(path), "time", "running_gpu_num")) for path in files]


def earth(helios: Path) -> Series:
    columns = _vcs(helios)
    per_minute = regular(np.concatenate([t for _, t, _ in columns]), np.concatenate([v for _, _, v in columns]), 60.0,
                         "sum")
    return regular(per_minute.times(), per_minute.values, STEP, "max")


def earth_vcs(helios: Path) -> dict[str, Series]:
    """Each virtual cluster with demand: its running GPUs, the most per 10 min."""
    return {name: regular(t, v, STEP, "max") for name, t, v in _vcs(helios) if np.nanmean(v) >= MIN_MEAN_GPUS}


def installed(helios: Path, vcs: dict[str, Series]) -> dict[str, int]:
    """The GPUs installed in each virtual cluster (and in all, "total") over its series' days: the most common
    daily figure."""
    path = helios / EARTH_GPUS
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        raise SeriesError("file", f"cannot read {path}: {err.strerror}") from None
    out = {}
    for name, series in vcs.items():
        lo, hi = (dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d") for t in (series.start, series.end - 1))
        days = [int(r[name]) for r in rows if lo <= r["date"] <= hi and r.get(name)]
        if not days:
            raise SeriesError("file", f"{path} has no GPUs for {name} from {lo} to {hi}")
        out[name] = collections.Counter(days).most_common(1)[0][0]
    return out


def venus_gpus(lucid: Path) -> int:
    path = lucid / VENUS_NODES
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return GPUS_PER_NODE * sum(int(r["num"]) for r in csv.DictReader(f))
    except (OSError, KeyError, ValueError) as err:
        raise SeriesError("file", f"cannot read the nodes of {path}: {err}") from None


def philly_nodes(helios: Path) -> int:
    _, total = read_csv(str(helios / PHILLY), "time", "total")
    return int(np.nanmax(total))


def philly(helios: Path) -> Series:
    return regular(*read_csv(str(helios / PHILLY), "time", "active"), STEP, "max")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lucid", required=True, type=Path, help="a clone of S-Lab-System-Group/Lucid")
    p.add_argument("--helios", required=True, type=Path, help="a clone of S-Lab-System-Group/HeliosArtifact")
    p.add_argument("--out", type=Path, default=ROOT / "out" / "traces", help="where the CSVs go (default out/traces)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        write(args.out / "helios-venus-demand.csv", "gpus", venus(args.lucid), "+08:00")
        all_earth = earth(args.helios)
        write(args.out / "helios-earth-demand.csv", "gpus", all_earth, "+08:00")
        vcs = earth_vcs(args.helios)
        for name, series in vcs.items():
            write(args.out / f"earth-vc-{name}.csv", "gpus", series, "+08:00")
        write(args.out / "philly-nodes-demand.csv", "nodes", philly(args.helios), "Z")
        capacity = {"helios-venus-demand": venus_gpus(args.lucid),
                    "helios-earth-demand": installed(args.helios, {"total": all_earth})["total"],
                    **{f"earth-vc-{k}": v for k, v in installed(args.helios, vcs).items()},
                    "philly-nodes-demand": philly_nodes(args.helios)}
        with open(args.out / "capacity.csv", "w", encoding="utf-8") as f:
            f.write("series,gpus\n" + "".join(f"{k},{v}\n" for k, v in capacity.items()))
    except SeriesError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
