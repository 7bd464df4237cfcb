"""``gpufleet model train`` and ``gpufleet model eval``."""
from __future__ import annotations

import datetime as dt
import json
import sys
import time

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.errors import UsageError
from gpufleet.models import baselines, evaluate
from gpufleet.models.artifact import Model
from gpufleet.models.train import Recording, Tuning, incidents
from gpufleet.streams.recording import record, train_on_simulations
from gpufleet.summary import table

GOALS = {"faults_per_kind": 30, "gpu_hours": 5000, "f1": 0.9, "false_per_1000h": 1.0, "delay_p50_s": 120.0,
         "leak_early_share": 0.9, "leak_within_hour_share": 0.9, "margin_over_baselines": 0.1}


def train(args, specs: list[FleetSpec]) -> int:
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


def _baseline_report(rec: Recording, kind_rule) -> evaluate.Report:
    fired = []
    for kind in evaluate.KINDS:
        rows = rec.rows[kind]
        if not rows:
            continue
        fired += incidents(kind, rows, Tuning(0.5, 2, 6), positive=kind_rule(kind, rows), precedence=False)
    return evaluate.score(rec.labels, fired, rec.gpu_hours)


def _threshold(kind, rows):
    rule = baselines.threshold(kind)
    return [bool(rule(r[2])) for r in rows]


def _forest(kind, rows):
    return baselines.isolation_forest(kind, [r[2] for r in rows])([r[2] for r in rows])


def evaluate_recording(rec: Recording, with_baselines: bool = True) -> dict:
    reports = {"detectors": evaluate.score(rec.labels, rec.alerts, rec.gpu_hours)}
    if with_baselines:
        reports["threshold baseline"] = _baseline_report(rec, _threshold)
        reports["isolation forest baseline"] = _baseline_report(rec, _forest)
    return reports


def goals(reports: dict) -> list[tuple[str, bool, str]]:
    det = reports["detectors"]
    out = []
    for k in evaluate.KINDS:
        kr = det.kinds[k]
        out.append((f"{k}: at least {GOALS['faults_per_kind']} faults", kr.faults >= GOALS["faults_per_kind"],
                    str(kr.faults)))
    out.append((f"at least {GOALS['gpu_hours']:,} GPU-hours", det.gpu_hours >= GOALS["gpu_hours"],
                f"{det.gpu_hours:,.0f}"))
    for k in evaluate.KINDS:
        out.append((f"{k}: F1 >= {GOALS['f1']}", det.kinds[k].f1 >= GOALS["f1"], f"{det.kinds[k].f1:.3f}"))
    out.append((f"false alerts <= {GOALS['false_per_1000h']:g} per 1,000 GPU-hours",
                det.false_per_1000h() <= GOALS["false_per_1000h"], f"{det.false_per_1000h():.2f}"))
    for k in ("straggler", "io_starvation"):
        d = det.kinds[k].delay(0.5)
        out.append((f"{k}: median delay <= 2 min", d is not None and d <= GOALS["delay_p50_s"],
                    "n/a" if d is None else f"{d / 60:.1f} min"))
    share = det.kinds["memory_leak"].leak_early_share
    out.append(("leaks of 30+ min: alert 10+ min before the OOM in >= 90%",
                share is not None and share >= GOALS["leak_early_share"],
                "n/a" if share is None else f"{share:.0%} of {det.kinds['memory_leak'].leak_long}"))
    hour = det.kinds["memory_leak"].leak_within_hour_share
    out.append(("leaks growing an hour or more: alerted within 60 min of their start in >= 90%",
                hour is not None and hour >= GOALS["leak_within_hour_share"],
                "n/a" if hour is None else f"{hour:.0%} of {det.kinds['memory_leak'].leak_hours}"))
    for name in ("threshold baseline", "isolation forest baseline"):
        if name in reports:
            for k in evaluate.KINDS:
                a, b = det.kinds[k].f1, reports[name].kinds[k].f1
                out.append((f"{k}: F1 at least 0.1 above the {name}", a >= b + GOALS["margin_over_baselines"],
                            f"{a:.3f} vs {b:.3f}"))
    return out


def render(reports: dict) -> str:
    parts = []
    for name, rep in reports.items():
        parts.append(f"{name} ({rep.gpu_hours:,.0f} GPU-hours; false alerts, all kinds: "
                     f"{rep.false_per_1000h():.2f} per 1,000 GPU-hours)\n" + table(evaluate.Report.HEADERS, rep.rows()))
    met = goals(reports)
    parts.append("goals\n" + table(["goal", "met", "value"], [(g, "yes" if ok else "NO", v) for g, ok, v in met]))
    return "\n\n".join(parts)


def _recorded_files(pairs: list[tuple[str, str]], model: Model, progress) -> Recording:
    from gpufleet.streams.embedded import file_source
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


def held_out_pairs(directory: str) -> list[tuple[str, str]]:
    """The held-out family's recordings in ``directory``: NAME.telemetry.jsonl (or .jsonl.gz) with
    NAME.labels.jsonl."""
    import glob
    import os
    pairs = []
    for path in sorted(glob.glob(os.path.join(directory, "*.telemetry.jsonl*"))):
        name = path[: path.index(".telemetry.jsonl")]
        if path.endswith((".jsonl", ".jsonl.gz")) and os.path.exists(name + ".labels.jsonl"):
            pairs.append((path, name + ".labels.jsonl"))
    return pairs


def evaluate_command(args, specs: list[FleetSpec], model: Model, progress) -> int:
    started = time.monotonic()
    families: dict[str, Recording] = {}
    if args.telemetry:
        families["recording"] = _recorded_files([(args.telemetry, args.labels)], model, progress)
    else:
        rec = Recording()
        for spec in specs:
            sim = Simulation(spec)
            start = dt.datetime.fromtimestamp(spec.start, dt.UTC)
            print(f"evaluating on simulated fleet seed {spec.seed} ({spec.nodes} nodes x {spec.gpus_per_node} GPUs, "
                  f"{spec.hours:g} h from {start:%Y-%m-%d %H:%M} UTC, sampled every {spec.interval_s:g} s)",
                  file=sys.stderr)
            rec.extend(record(sim.messages(), sim.labels(), model=model, progress=progress))
        families["simulated family"] = rec
    if args.held_out:
        families["held-out family"] = _recorded_files(held_out_pairs(args.held_out), model, progress)
    out = {}
    for name, rec in families.items():
        reports = evaluate_recording(rec, with_baselines=not args.no_baselines)
        print(f"== {name}\n" + render(reports) + "\n")
        out[name] = reports
    if len(out) > 1:
        rows = []
        for goal_rows in zip(*(goals(r) for r in out.values())):
            rows.append((goal_rows[0][0], *(f"{'yes' if ok else 'NO'} {v}" for _, ok, v in goal_rows)))
        print("goals, side by side\n" + table(["goal", *out], rows))
    print(f"\nevaluated in {time.monotonic() - started:.0f} s; model trained on "
          f"{json.dumps(model.metadata.get('trained_on', {}))[:200]}")
    if args.chart:
        first = next(iter(families.values()))
        evaluate.chart(first.labels, first.alerts, args.chart)
        print(f"chart: {args.chart}")
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump({family: {name: r.to_dict() for name, r in reports.items()} |
                       {"goals": [{"goal": g, "met": ok, "value": v} for g, ok, v in goals(reports)]}
                       for family, reports in out.items()}, f, indent=1)
        print(f"report: {args.report}")
    return 0
