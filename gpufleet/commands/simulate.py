"""``gpufleet simulate``: a simulated fleet's telemetry and labels to files."""
from __future__ import annotations

import json

from gpufleet.collectors.simulator import DEFAULT_START

from . import COMMANDS
from .common import (
    Progress,
    fleet_options,
    spec_of,
)


def cmd_simulate(args) -> int:
    from gpufleet.collectors.simulator import Simulation
    spec = spec_of(args)
    labels_path = args.labels or (args.out[:-6] if args.out.endswith(".jsonl") else args.out) + ".labels.jsonl"
    sim = Simulation(spec)
    progress = Progress("simulate", spec.messages_total)
    n = 0
    with open(args.out, "w", encoding="utf-8") as f:
        for n, msg in enumerate(sim.messages(), 1):
            f.write(json.dumps(msg, separators=(",", ":")) + "\n")
            if n % 1000 == 0:
                progress(n)
    progress(n, final=True)
    labels = sim.labels()
    with open(labels_path, "w", encoding="utf-8") as f:
        for label in labels:
            f.write(json.dumps(label) + "\n")
    kinds: dict[str, int] = {}
    for label in labels:
        kinds[label["kind"]] = kinds.get(label["kind"], 0) + 1
    print(f"wrote {n:,} messages ({n * spec.gpus_per_node:,} GPU samples) to {args.out}")
    print(f"wrote {len(labels)} labels to {labels_path}: " + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())))
    return 0


def add_simulate(sub) -> None:
    s = sub.add_parser("simulate", help=COMMANDS["simulate"].summary,
                       description="Write a simulated fleet's telemetry (one gpufleet.telemetry.v1 message a "
                                   "line) and its ground-truth labels (one injected fault a line).")
    fleet_options(s, start_default=DEFAULT_START)
    s.add_argument("-o", "--out", default="telemetry.jsonl", help="telemetry file (default telemetry.jsonl)")
    s.add_argument("--labels", help="labels file (default: OUT with .labels.jsonl)")
    s.set_defaults(fn=cmd_simulate)
