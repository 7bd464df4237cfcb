"""Embedded pipeline throughput in GPU samples per second, against only parsing the same JSON.

    .venv/bin/python bench/bench_pipeline.py [--nodes 8] [--gpus 8] [--hours 2] [--repeat 3] [--profile N]

Stages, each timed over the same recorded lines (a simulated fleet with faults of every kind) in the
same run; the stages take turns, each round running every stage once, and each keeps its fastest round:
  json.loads            the baseline: decoding the JSON and nothing else
  validate              pydantic validation of gpufleet.telemetry.v1 (schema checks): the contract's model
  decode                the stream's decoder (streams/decode.py): msgspec structs made from that model, the
                        same checks, the same verdict
  pipeline              decode, event-time gate (waiting packed, unpacked on release), rollups, idle windows, metering,
                        detectors, the job stage, raw sample rows (no store)
  pipeline + store      the above written to the embedded ClickHouse engine (chdb): what `gpufleet replay`
                        does (detectors on, raw samples stored)
Each stage reports wall time and CPU time of the process (every thread, chdb's included): on a shared
machine the CPU time is the steadier of the two; the ratio is against the baseline's.
``--profile N`` then runs the last stage once under cProfile and prints its N costliest functions.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, telemetry_lines  # noqa: E402

from gpufleet.contracts.telemetry import parse  # noqa: E402
from gpufleet.sql.store import Store  # noqa: E402
from gpufleet.streams import embedded  # noqa: E402
from gpufleet.streams.decode import decode  # noqa: E402
from gpufleet.streams.pipeline import Pipeline  # noqa: E402
from gpufleet.streams.sink import Sink  # noqa: E402


def timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3, help="rounds; each stage keeps its fastest (default 3)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="then profile the store stage once and print its N costliest functions")
    args = ap.parse_args()
    lines = telemetry_lines(args.nodes, args.gpus, args.hours)
    samples = len(lines) * args.gpus
    source = [(f"bench:{i}", line) for i, line in enumerate(lines)]
    data_dir = tempfile.mkdtemp(prefix="gpufleet-bench-")

    def json_only():
        for line in lines:
            json.loads(line)

    def validate():
        for line in lines:
            parse(line)

    def decode_only():
        for line in lines:
            decode(line)

    def pipeline_only():
        embedded.run(source, Pipeline(), None)

    def with_store():
        store = Store.connect(f"chdb://{data_dir}", f"b_{uuid.uuid4().hex[:8]}", create=True)
        store.migrate()
        try:
            embedded.run(source, Pipeline(), Sink(store))
        finally:
            store.drop()

    stages = [("json.loads (baseline)", json_only), ("validate (pydantic)", validate),
              ("decode (msgspec)", decode_only), ("pipeline", pipeline_only),
              ("pipeline + store (chdb)", with_store)]
    best = {name: (float("inf"), float("inf")) for name, _ in stages}
    for _ in range(args.repeat):
        for name, fn in stages:
            wall, cpu = timed(fn)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    base_wall, base_cpu = best[stages[0][0]]
    print(f"{len(lines):,} messages, {samples:,} GPU samples ({args.nodes} nodes x {args.gpus} GPUs, "
          f"{args.hours:g} h); {machine()}; best of {args.repeat} rounds")
    print("| stage | GPU samples/s (wall) | µs per GPU sample (wall) | time vs baseline (wall) "
          "| µs per GPU sample (CPU) | time vs baseline (CPU) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, _ in stages:
        wall, cpu = best[name]
        print(f"| {name} | {samples / wall:,.0f} | {wall / samples * 1e6:.2f} | {wall / base_wall:.2f}x "
              f"| {cpu / samples * 1e6:.2f} | {cpu / base_cpu:.2f}x |")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(with_store)
        stats = pstats.Stats(profile)
        total = stats.total_tt      # type: ignore[attr-defined]
        print(f"\nprofile of pipeline + store: {total:.2f} s under cProfile; the costliest functions by own time")
        print("| function | calls | own s | share |")
        print("|---|---:|---:|---:|")
        rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)   # type: ignore[attr-defined]
        for (path, line, fn), (_, calls, own, _, _) in rows[:args.profile]:
            where = f"{Path(path).parent.name}/{Path(path).name}:{line}" if line else path
            print(f"| {fn} ({where}) | {calls:,} | {own:.3f} | {own / total:.1%} |")


if __name__ == "__main__":
    main()
