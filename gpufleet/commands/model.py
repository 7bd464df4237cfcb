"""``gpufleet model train`` and ``gpufleet model eval``."""
from __future__ import annotations

import datetime as dt
import json
import re
import sys
import time
from typing import TYPE_CHECKING

from gpufleet.collectors.simulator import DEFAULT_START
from gpufleet.errors import UsageError

from . import COMMANDS

if TYPE_CHECKING:           # the heavy parts (numpy, scikit-learn, the pipeline) load when a command runs
    from gpufleet.collectors.simulator import FleetSpec
    from gpufleet.models.artifact import Model
    from gpufleet.models.train import Recording

from .common import (
    Parser,
    Progress,
    fleet_options,
    fleet_spec,
    numbers,
)


def train(args, specs: list[FleetSpec]) -> int:
    from gpufleet.streams.recording import train_on_simulations
    from gpufleet.summary import table
    model = train_on_simulations(specs, args.max_false, progress=lambda text: print(text, file=sys.stderr))
    model.save(args.out)
    m = model.metadata
    print(f"trained on {len(specs)} simulated fleets ({m['gpu_hours']:,} GPU-hours, "
          + ", ".join(f"{v} {k}" for k, v in m["faults"].items()) + f") in {m['trained_in_s']} s")
    rows = [(k, v["windows"], v["faulty_windows"], v["threshold"], v["persist_on"], v["f1"],
             v["false_per_1000_gpu_h"], v["delay_p50_s"]) for k, v in m["training_metrics"].items()]
    print(table(["kind", "windows", "faulty", "threshold", "windows_in_a_row", "train_F1", "false_per_1000h",
                 "delay_p50_s"], rows))
    print(f"wrote {args.out}")
    return 0


def render(reports: dict) -> str:
    from gpufleet.models import evaluate
    from gpufleet.summary import table
    parts = []
    for name, rep in reports.items():
        parts.append(f"{name} ({rep.gpu_hours:,.0f} GPU-hours; false alerts, all kinds: "
                     f"{rep.false_per_1000h():.2f} per 1,000 GPU-hours)\n" + table(evaluate.Report.HEADERS, rep.rows()))
    met = evaluate.goals(reports)
    parts.append("goals\n" + table(["goal", "met", "value"], [(g, "yes" if ok else "NO", v) for g, ok, v in met]))
    return "\n\n".join(parts)


def _recorded_files(pairs: list[tuple[str, str]], model: Model, progress) -> Recording:
    from gpufleet.models.train import Recording
    from gpufleet.streams.embedded import file_source
    from gpufleet.streams.recording import record
    rec = Recording()
    for telemetry, labels_path in pairs:
        labels = read_labels(labels_path)
        print(f"evaluating on {telemetry}", file=sys.stderr)
        source = file_source(telemetry)
        rec.extend(record((line for _, line in source), labels, model=model, progress=progress))
        if source.error:
            raise UsageError(f"gpufleet model eval: {source.error}")
    return rec


def read_labels(path: str) -> list[dict]:
    """Ground truth, one fault a line (what ``gpufleet simulate`` and the held-out generator write); a line that is
    not one is a usage error naming its line."""
    from gpufleet.contracts.files import FileError, parse_json, read_text
    try:
        text = read_text(path, 256 << 20)
        labels = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            label = parse_json(line, where)
            if not isinstance(label, dict) or not isinstance(label.get("kind"), str) \
                    or not all(type(label.get(k)) in (int, float) for k in ("start", "end")):
                raise FileError(f"{where}: not a label (an object with kind, start and end is due)")
            labels.append(label)
    except FileError as err:
        raise UsageError(f"gpufleet model eval: labels {err}") from None
    return labels


EVERY = re.compile(r"\.every-(\d+(?:\.\d+)?)s$")


def interval_of(name: str) -> float | None:
    """The sampling interval a held-out recording's NAME carries (``NAME.every-30s``), or None (mixed)."""
    m = EVERY.search(name)
    return float(m.group(1)) if m else None


def held_out_pairs(directory: str) -> list[tuple[str, str]]:
    """The held-out family's recordings in ``directory``: NAME.telemetry.jsonl (or .jsonl.gz) with
    NAME.labels.jsonl. Those whose NAME ends in ``.every-<N>s`` are fleets sampled every N s, scored apart."""
    import glob
    import os
    pairs = []
    for path in sorted(glob.glob(os.path.join(directory, "*.telemetry.jsonl*"))):
        name = path[: path.index(".telemetry.jsonl")]
        if path.endswith((".jsonl", ".jsonl.gz")) and os.path.exists(name + ".labels.jsonl"):
            pairs.append((path, name + ".labels.jsonl"))
    return pairs


def evaluate_command(args, specs: list[FleetSpec], model: Model, progress) -> int:
    from gpufleet.collectors.simulator import Simulation
    from gpufleet.models import baselines, evaluate
    from gpufleet.models.train import Recording
    from gpufleet.streams.recording import record
    from gpufleet.summary import table
    started = time.monotonic()
    families: dict[str, Recording] = {}
    intervals: dict[str, tuple[str, float]] = {}       # family -> (generator, its one sampling interval)
    if args.telemetry:
        families["recording"] = _recorded_files([(args.telemetry, args.labels)], model, progress)
    else:
        by_interval: dict[float, list[FleetSpec]] = {}
        for spec in specs:
            by_interval.setdefault(spec.interval_s, []).append(spec)
        for every, group in by_interval.items():
            rec = Recording()
            for spec in group:
                sim = Simulation(spec)
                start = dt.datetime.fromtimestamp(spec.start, dt.UTC)
                print(f"evaluating on simulated fleet seed {spec.seed} ({spec.nodes} nodes x {spec.gpus_per_node} "
                      f"GPUs, {spec.hours:g} h from {start:%Y-%m-%d %H:%M} UTC, sampled every {spec.interval_s:g} s)",
                      file=sys.stderr)
                rec.extend(record(sim.messages(), sim.labels(), model=model, progress=progress))
            name = "simulated family" if len(by_interval) == 1 else f"simulated family, every {every:g} s"
            families[name] = rec
            if len(by_interval) > 1:
                intervals[name] = ("simulated family", every)
    if args.held_out:
        groups: dict[float | None, list[tuple[str, str]]] = {}
        for telemetry, labels in held_out_pairs(args.held_out):
            groups.setdefault(interval_of(telemetry[: telemetry.index(".telemetry.jsonl")]), []).append(
                (telemetry, labels))
        for tag, pairs in sorted(groups.items(), key=lambda g: -1 if g[0] is None else g[0]):
            name = "held-out family" if tag is None else f"held-out family, every {tag:g} s"
            families[name] = _recorded_files(pairs, model, progress)
            if tag is not None:
                intervals[name] = ("held-out family", tag)
    out = {}
    for name, rec in families.items():
        reports = baselines.evaluate_recording(rec, with_baselines=not args.no_baselines)
        print(f"== {name}\n" + render(reports) + "\n")
        out[name] = reports
    per_interval: dict[str, list] = {}
    interval_met: dict[str, list] = {}
    for name, (generator, every) in intervals.items():
        per_interval.setdefault(generator, []).append((every, name))
    for generator, entries in per_interval.items():
        rows = [(f"{every:g} s", k, round(out[name]["detectors"].kinds[k].f1, 3),
                 round(out[name]["detectors"].false_per_1000h(k), 2),
                 round(out[name]["detectors"].false_per_1000h(), 2)) for every, name in sorted(entries)
                for k in out[name]["detectors"].kinds]
        print(f"{generator}, each sampling interval on its own\n" +
              table(["every", "kind", "F1", "false_per_1000h", "false_all_kinds"], rows))
        met = interval_met[generator] = evaluate.interval_goals({every: out[name] for every, name in entries})
        print("goals at each interval\n" + table(["goal", "met", "value"],
                                                 [(g, "yes" if ok else "NO", v) for g, ok, v in met]) + "\n")
    if len(out) > 1:
        met_by = [{g: f"{'yes' if ok else 'NO'} {v}" for g, ok, v in evaluate.goals(r)} for r in out.values()]
        names = list(dict.fromkeys(g for m in met_by for g in m))       # a goal some family has no figure for: -
        side = [(g, *(m.get(g, "-") for m in met_by)) for g in names]
        print("goals, side by side\n" + table(["goal", *out], side))
    print(f"\nevaluated in {time.monotonic() - started:.0f} s; model trained on "
          f"{json.dumps(model.metadata.get('trained_on', {}))[:200]}")
    if args.chart:
        first = next(iter(families.values()))
        evaluate.chart(first.labels, first.alerts, args.chart)
        print(f"chart: {args.chart}")
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump({family: {name: r.to_dict() for name, r in reports.items()} |
                       {"goals": [{"goal": g, "met": ok, "value": v} for g, ok, v in evaluate.goals(reports)]}
                       for family, reports in out.items()} |
                      {f"{generator}, at each interval": [{"goal": g, "met": ok, "value": v} for g, ok, v in met]
                       for generator, met in interval_met.items()}, f, indent=1)
        print(f"report: {args.report}")
    return 0


# -- the command line --------------------------------------------------------------------------------



def cmd_model(args) -> int:
    prog = f"{args.prog} {args.model_command}"
    seeds = numbers(prog, "--seeds", args.seeds, int)
    training = args.model_command == "train"
    intervals = (numbers(prog, "--intervals", args.intervals, float) if training or args.intervals
                 else [args.interval])
    if not training and args.intervals:             # every seed at every interval, each interval scored apart
        seeds = [s for s in seeds for _ in intervals]
    specs = [fleet_spec(prog, nodes=args.nodes, gpus_per_node=args.gpus_per_node, hours=args.hours, seed=s,
                        faults_per_kind=args.faults, interval_s=intervals[i % len(intervals)], start=args.start)
             for i, s in enumerate(seeds)]
    if training:
        if not args.faults:
            raise UsageError(f"{prog}: argument --faults: 0 faults leave nothing to learn")
        return train(args, specs)
    if args.telemetry and not args.labels:
        raise UsageError(f"{prog}: argument --labels: needed with --telemetry")
    if args.held_out is not None:
        import os
        if not os.path.isdir(args.held_out):
            raise UsageError(f"{prog}: argument --held-out: no such directory {args.held_out!r}")
        if not held_out_pairs(args.held_out):
            raise UsageError(f"{prog}: argument --held-out: no NAME.telemetry.jsonl[.gz] with its "
                             f"NAME.labels.jsonl in {args.held_out!r} "
                             "(make them with: python -m bench.evalfleet)")
    from gpufleet.models.artifact import Model, ModelError
    try:
        model = Model.load(args.model) if args.model else Model.default()
    except ModelError as err:
        raise UsageError(f"{prog}: argument --model: {err}") from None
    return evaluate_command(args, specs, model, Progress("record", None, "messages"))


def add_model(sub) -> None:
    s = sub.add_parser("model", help=COMMANDS["model"].summary,
                       description="Train the detectors (stragglers, IO starvation, memory leaks) on simulated "
                                   "fleets with ground truth, or evaluate a model against labelled telemetry, side "
                                   "by side with a threshold baseline and an isolation forest.")
    msub = s.add_subparsers(dest="model_command", metavar="ACTION", parser_class=Parser)
    msub.required = True
    m = msub.add_parser("train", help="fit a model on simulated fleets and write it as JSON",
                        description="Simulate labelled fleets (one per seed), record every window the detectors "
                                    "evaluate, fit gradient-boosted trees per kind and tune their thresholds on "
                                    "incidents. The packaged model: gpufleet model train --seeds 101-104 "
                                    "--intervals 5,10,30,60")
    fleet_options(m, hours=12.0, start_default=DEFAULT_START, nodes=16, faults=12, seed=False, interval=False)
    m.set_defaults(seeds="101-104")
    m.add_argument("--seeds", help="simulated fleets to train on, e.g. 1,2,5-8 (default 101-104)")
    m.add_argument("--intervals", default="5",
                   help="sampling intervals the seeds cycle through, e.g. 5,10 (default 5)")
    m.add_argument("--max-false", type=float, default=0.3, help="false alerts per 1,000 GPU-hours allowed per kind "
                                                                 "when tuning thresholds (default 0.3)")
    m.add_argument("-o", "--out", default="model.json", help="model file to write (default model.json)")
    m = msub.add_parser("eval", help="score a model against ground truth, with baselines, goals and a chart",
                        description="Replay labelled telemetry (a file, or simulated fleets of the given seeds) "
                                    "through the detectors and score their incidents: precision, recall, F1, "
                                    "detection delay, false alerts per 1,000 GPU-hours, leak lead time; beside a "
                                    "threshold baseline and an isolation forest on the same windows.")
    fleet_options(m, hours=24.0, start_default=DEFAULT_START, nodes=32, faults=35, seed=False)
    m.set_defaults(seeds="9001")
    m.add_argument("--model", help="model file (default: the packaged model)")
    m.add_argument("--telemetry", metavar="FILE", help="telemetry JSONL to evaluate on (else simulated fleets)")
    m.add_argument("--labels", metavar="FILE", help="its ground-truth labels (JSONL, as gpufleet simulate writes)")
    m.add_argument("--seeds", help="simulated fleets to evaluate on when no --telemetry (default 9001)")
    m.add_argument("--intervals", metavar="S,S,...",
                   help="evaluate the simulated fleets at each of these sampling intervals, each scored on its own "
                        "with the goals that must hold at every interval (default: --interval alone)")
    m.add_argument("--held-out", metavar="DIR",
                   help="also evaluate the held-out family: every NAME.telemetry.jsonl[.gz] with its "
                        "NAME.labels.jsonl in DIR (made by bench/evalfleet, never used for training); reported beside "
                        "the simulated one. NAME.every-<N>s files are fleets sampled every N s, scored apart "
                        "(python -m bench.evalfleet --intervals N)")
    m.add_argument("--chart", metavar="PNG", help="draw a timeline of faults and incidents")
    m.add_argument("--report", metavar="JSON", help="write the figures as JSON")
    m.add_argument("--no-baselines", action="store_true", help="skip the baselines")
    s.set_defaults(fn=cmd_model)
