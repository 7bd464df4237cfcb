"""What the detectors cost in the stream: time per GPU sample and state per tracked GPU, against the
rollup processors alone (validation, event time, rollups, idle windows, the job stage), in the same run.

    .venv/bin/python bench/bench_detectors.py [--nodes 16] [--hours 2]
"""
from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import best_of, machine, saved_states, telemetry_lines  # noqa: E402

from gpufleet.contracts.state import pack  # noqa: E402
from gpufleet.streams.pipeline import Pipeline  # noqa: E402


def run(lines: list[bytes], detect: bool) -> Pipeline:
    p = Pipeline(detect=detect)
    for i, line in enumerate(lines):
        p.submit(line, str(i))
        if i % 1024 == 0:
            p.out.rows, p.out.events, p.out.done = {}, [], []
    return p


def state(lines: list[bytes], detect: bool, gpus: int) -> tuple[float, float]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    p = run(lines, detect)
    p.out.rows, p.out.events, p.out.done = {}, [], []
    gc.collect()                    # what the processors hold, not garbage the collector has not reached yet
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    saved = sum(len(pack(s)) for s in saved_states(p))
    return used / gpus, saved / gpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--hours", type=float, default=2.0)
    args = ap.parse_args()
    lines = telemetry_lines(args.nodes, 8, args.hours)
    samples, gpus = len(lines) * 8, args.nodes * 8
    base = best_of(lambda: run(lines, False))
    full = best_of(lambda: run(lines, True))
    mem_base, saved_base = state(lines, False, gpus)
    mem_full, saved_full = state(lines, True, gpus)
    print(f"{len(lines):,} messages, {samples:,} GPU samples ({args.nodes} nodes x 8 GPUs, {args.hours:g} h); "
          f"{machine()}")
    print("| path | µs per GPU sample | time vs rollups alone | state in memory per GPU | saved state per GPU |")
    print("|---|---:|---:|---:|---:|")
    print(f"| rollups, idle windows, job stage (baseline) | {base / samples * 1e6:.1f} | 1.00x | "
          f"{mem_base / 1024:.1f} kB | {saved_base / 1024:.2f} kB |")
    print(f"| the same with the detectors | {full / samples * 1e6:.1f} | {full / base:.2f}x | "
          f"{mem_full / 1024:.1f} kB | {saved_full / 1024:.2f} kB |")
    print(f"detectors alone: {(full - base) / samples * 1e6:.1f} µs per GPU sample, "
          f"{(mem_full - mem_base) / 1024:.1f} kB of state per GPU in memory, "
          f"{(saved_full - saved_base) / 1024:.2f} kB saved")


if __name__ == "__main__":
    main()
