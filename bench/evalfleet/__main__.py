"""python -m bench.evalfleet: write an evaluation fleet's telemetry and labels."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from .generate import generate
from .plan import INTERVALS, FleetSpec


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:      # one line, exit 2
        print(f"evalfleet: {message}", file=sys.stderr)
        sys.exit(2)


def _intervals(text: str) -> tuple[int, ...]:
    try:
        return tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of seconds: {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="python -m bench.evalfleet",
                description="Write a held-out evaluation fleet: gpufleet.telemetry.v1 messages and fault labels. "
                            "Never use it to train or tune a detector.")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fleets", type=int, default=1,
                   help="independent fleets (seeds SEED, SEED+1, ...) merged into one output, default 1")
    p.add_argument("--nodes", type=int, default=16, help="servers (4 or 8 GPUs each), default 16")
    p.add_argument("--hours", type=float, default=12.0, help="length of the run, default 12")
    p.add_argument("--start", type=float, default=None,
                   help="Unix seconds of the first sample; default depends on the seed (another weekday and hour)")
    p.add_argument("-o", "--output", required=True, help="telemetry JSONL to write")
    p.add_argument("--labels", required=True, help="ground-truth labels JSONL to write")
    p.add_argument("--stragglers", type=int, default=None, help="straggler faults (default: one per ~150 GPU-hours)")
    p.add_argument("--io-starvations", type=int, default=None, help="IO starvation faults (same default)")
    p.add_argument("--leaks", type=int, default=None, help="leaking processes (same default)")
    p.add_argument("--intervals", type=_intervals, default=INTERVALS,
                   help="sampling intervals to mix, seconds (default 1,2,5,10,15,30,60)")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")
    a = p.parse_args(argv)
    for flag, path in (("-o", a.output), ("--labels", a.labels)):
        if not Path(path).resolve().parent.is_dir():
            p.error(f"{flag}: no directory {str(Path(path).resolve().parent)!r} to write {path!r} in")
    if not 1 <= a.fleets <= 100:
        p.error("fleets must be between 1 and 100")
    if a.fleets > 1 and a.start is not None:
        p.error("--start applies to one fleet; several fleets each start at their seed's own time")
    try:
        specs = [FleetSpec(seed=a.seed + k, nodes=a.nodes, hours=a.hours, start=a.start, stragglers=a.stragglers,
                           io_starvations=a.io_starvations, leaks=a.leaks, intervals=a.intervals)
                 for k in range(a.fleets)]
    except ValueError as e:
        p.error(str(e))
    try:
        summary = generate(specs, a.output, a.labels)
    except OSError as e:
        print(f"evalfleet: {e}", file=sys.stderr)
        return 1
    if not a.quiet:
        for line in summary.lines():
            print(f"evalfleet: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
