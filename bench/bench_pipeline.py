"""Embedded pipeline throughput in GPU samples per second, against only parsing the same JSON.

    .venv/bin/python bench/bench_pipeline.py [--nodes 8] [--gpus 8] [--hours 2]

Stages, each timed over the same recorded lines in the same run (best of 3):
  json.loads            the baseline: decoding the JSON and nothing else
  validate              pydantic validation of gpufleet.telemetry.v1 (schema checks)
  pipeline              validate + event-time gate + rollups + idle windows (no store)
  pipeline + store      the above written to the embedded ClickHouse engine (chdb)
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import best_of, machine, telemetry_lines  # noqa: E402

from gpufleet.collectors.telemetry import parse  # noqa: E402
from gpufleet.sql.store import Store  # noqa: E402
from gpufleet.streams import embedded  # noqa: E402
from gpufleet.streams.pipeline import Pipeline  # noqa: E402
from gpufleet.streams.sink import Sink  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=2.0)
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

    def pipeline_only():
        embedded.run(source, Pipeline(), None)

    def with_store():
        store = Store.connect(f"chdb://{data_dir}", f"b_{uuid.uuid4().hex[:8]}", create=True)
        store.migrate()
        embedded.run(source, Pipeline(), Sink(store))
        store.drop()

    stages = [("json.loads (baseline)", json_only), ("validate", validate), ("pipeline", pipeline_only),
              ("pipeline + store (chdb)", with_store)]
    results = [(name, best_of(fn)) for name, fn in stages]
    base = results[0][1]
    print(f"{len(lines):,} messages, {samples:,} GPU samples ({args.nodes} nodes x {args.gpus} GPUs, "
          f"{args.hours:g} h); {machine()}")
    print("| stage | GPU samples/s | µs per GPU sample | time vs baseline |")
    print("|---|---:|---:|---:|")
    for name, seconds in results:
        print(f"| {name} | {samples / seconds:,.0f} | {seconds / samples * 1e6:.2f} | {seconds / base:.2f}x |")


if __name__ == "__main__":
    main()
