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
import csv
import datetime as dt
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENUS = Path("simulation/data/Venus/cluster_throughput.csv")
EARTH = Path("analysis/2_cluster characterization/Earth_vcs")
PHILLY = Path("framework/CES Service/data/philly_node_sequence.csv")
VENUS_LAST = dt.datetime(2020, 9, 27, 23, 50)       # the file's last day ends early; the series stops before it
STEP = dt.timedelta(minutes=10)


def rows(path: Path) -> Iterable[dict[str, str]]:
    if not path.is_file():
        raise SystemExit(f"error: {path} not found (is the clone complete?)")
    with open(path, newline="", encoding="utf-8") as f:
        yield from csv.DictReader(f)


def when(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S")


def bucket(t: dt.datetime) -> dt.datetime:
    return t - dt.timedelta(minutes=t.minute % 10, seconds=t.second)


def ten_minute_means(points: Iterable[tuple[dt.datetime, float]]) -> list[tuple[dt.datetime, float]]:
    sums: dict[dt.datetime, list[float]] = defaultdict(lambda: [0.0, 0])
    for t, v in points:
        s = sums[bucket(t)]
        s[0] += v
        s[1] += 1
    return [(t, s[0] / s[1]) for t, s in sorted(sums.items())]


def write(path: Path, column: str, series: list[tuple[dt.datetime, float]], zone: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"ts,{column}\n")
        for t, v in series:
            f.write(f"{t.strftime('%Y-%m-%dT%H:%M:%S')}{zone},{v:g}\n")
    print(f"{path}: {len(series)} steps, {series[0][0]:%Y-%m-%d} to {series[-1][0]:%Y-%m-%d}", file=sys.stderr)


def venus(lucid: Path) -> list[tuple[dt.datetime, float]]:
    running, out = 0, []
    for r in rows(lucid / VENUS):
        running += int(r["start_gpu_num"]) - int(r["end_gpu_num"])
        out.append((when(r["time"]), running))
    low = min(v for _, v in out)                     # the outage: nothing runs
    return [(t, float(v - low)) for t, v in out if t <= VENUS_LAST]


def earth(helios: Path) -> list[tuple[dt.datetime, float]]:
    files = sorted((helios / EARTH).glob("*/cluster_sequence_vc.csv"))
    if not files:
        raise SystemExit(f"error: no virtual cluster under {helios / EARTH}")
    total: dict[dt.datetime, float] = defaultdict(float)
    for path in files:
        for r in rows(path):
            total[when(r["time"])] += float(r["running_gpu_num"])
    return ten_minute_means(sorted(total.items()))


def philly(helios: Path) -> list[tuple[dt.datetime, float]]:
    return ten_minute_means((when(r["time"]), float(r["active"])) for r in rows(helios / PHILLY))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lucid", required=True, type=Path, help="a clone of S-Lab-System-Group/Lucid")
    p.add_argument("--helios", required=True, type=Path, help="a clone of S-Lab-System-Group/HeliosArtifact")
    p.add_argument("--out", type=Path, default=ROOT / "out" / "traces", help="where the CSVs go (default out/traces)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out / "helios-venus-demand.csv", "gpus", venus(args.lucid), "+08:00")
    write(args.out / "helios-earth-demand.csv", "gpus", earth(args.helios), "+08:00")
    write(args.out / "philly-nodes-demand.csv", "nodes", philly(args.helios), "Z")
    return 0


if __name__ == "__main__":
    sys.exit(main())
