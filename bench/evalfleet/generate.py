"""Plan a fleet, render every node, merge the nodes' messages in time order, write the labels."""
from __future__ import annotations

import gzip
import heapq
import io
import json
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .plan import FleetSpec, plan
from .render import HEAD, render_node

_TS = len(HEAD)


def _open_out(path: Path) -> TextIO:
    """A ``.gz`` name is written gzip-compressed (the timestamp in the gzip header left at 0, so that a seed
    still gives the same bytes)."""
    if path.suffix == ".gz":
        raw = gzip.GzipFile(path, "wb", compresslevel=4, mtime=0)
        return io.TextIOWrapper(raw, encoding="utf-8")
    return open(path, "w", encoding="utf-8")


def _ts(line: str) -> float:
    return float(line[_TS:line.index(",", _TS)])


@dataclass
class Summary:
    nodes: int = 0
    gpus: int = 0
    gpu_hours: float = 0.0
    messages: int = 0
    gpu_samples: int = 0
    labels: Counter = field(default_factory=Counter)
    intervals: Counter = field(default_factory=Counter)
    guard_touches: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        kinds = ", ".join(f"{k} {self.labels[k]}" for k in ("straggler", "io_starvation", "memory_leak", "idle"))
        ivs = ", ".join(f"{i} s x{n}" for i, n in sorted(self.intervals.items()))
        return [f"{self.nodes} nodes, {self.gpus} GPUs, {self.gpu_hours:,.0f} GPU-hours; intervals {ivs}",
                f"{self.messages:,} messages, {self.gpu_samples:,} GPU samples in {self.seconds:.1f} s",
                f"labels: {kinds}"] + self.notes


def _merge(paths: list[Path], out: TextIO, tmp: Path) -> None:
    """Merge files of time-ordered lines into one, a few hundred files at a time (open-file limits)."""
    level = 0
    while len(paths) > 256:
        merged = []
        for j in range(0, len(paths), 256):
            path = tmp / f"merge-{level}-{j}.jsonl"
            with open(path, "w") as f:
                _merge(paths[j:j + 256], f, tmp)
            merged.append(path)
        paths, level = merged, level + 1
    files = [open(p) for p in paths]
    try:
        out.writelines(heapq.merge(*files, key=_ts))
    finally:
        for fh in files:
            fh.close()


def generate(specs: FleetSpec | list[FleetSpec], telemetry: str | os.PathLike, labels: str | os.PathLike
             ) -> Summary:
    """Write one or more fleets' telemetry, merged (one message a line, ``ts`` nondecreasing), and their
    labels (one fault a line, by start). The same specs always give the same bytes."""
    began = time.perf_counter()
    specs = [specs] if isinstance(specs, FleetSpec) else list(specs)
    out = Summary()
    found: list[dict] = []
    telemetry = Path(telemetry)
    with tempfile.TemporaryDirectory(prefix=".evalfleet-", dir=telemetry.parent or ".") as tmp:
        parts: list[Path] = []
        for spec in specs:
            fleet = plan(spec)
            out.nodes += len(fleet.nodes)
            out.gpus += sum(n.gpus for n in fleet.nodes)
            out.gpu_hours += fleet.gpu_hours()
            out.notes += [f"seed {spec.seed}: {note}" for note in fleet.notes]
            found += fleet.fault_labels()
            for node in fleet.nodes:
                path = Path(tmp) / f"{len(parts):06d}.jsonl"
                with open(path, "w") as f:
                    res = render_node(node, fleet.on(node), fleet.run, f)
                parts.append(path)
                out.messages += res.messages
                out.gpu_samples += res.gpu_samples
                out.guard_touches += res.touches
                out.intervals[node.interval] += 1
                found += res.idle_labels
        with _open_out(telemetry) as f:
            _merge(parts, f, Path(tmp))
    found.sort(key=lambda x: (x["start"], x["kind"], x["node"], x["gpu_uuid"] or ""))
    with open(labels, "w") as f:
        for lab in found:
            f.write(json.dumps(lab) + "\n")
    out.labels = Counter(lab["kind"] for lab in found)
    out.seconds = time.perf_counter() - began
    return out
