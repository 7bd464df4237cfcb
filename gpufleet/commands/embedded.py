"""The embedded run that ``demo`` and ``replay`` share: the pipeline over a source into the store, its events and
dead letters written, alerts delivered with ``--notify``, forecasts made over what the store holds."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from gpufleet.settings import Settings

from .common import Progress, load_model
from .forecast import embedded_forecasts
from .notify import load_routes, local_notifier

LOCAL = "-"          # --notify with no file: the local receiver


@dataclass
class Routing:
    routes: Any
    local: Any = None            # the local receiver started for --notify without a file
    payloads: str | None = None  # where it writes what it received

    def close(self) -> None:
        if self.local is not None:
            self.local.down()


def run_embedded(settings: Settings, source, progress: Progress, events_path=None, dead_path=None, store=None,
                 notifier=None):
    from gpufleet.streams import embedded
    from gpufleet.streams.pipeline import Pipeline
    from gpufleet.streams.sink import Sink

    pipeline = Pipeline(settings.stream, model=load_model(settings), billing=settings.billing)
    sink = Sink(store, settings.store.batch_rows, settings.store.batch_seconds) if store is not None else None
    events, dead = embedded.JsonLines(events_path), embedded.JsonLines(dead_path)
    if notifier is not None:
        events = notifier.tap(events)
    started = time.monotonic()
    forecasts = None
    try:
        n = embedded.run(source, pipeline, sink, events, dead, progress=progress)
        progress(n, final=True)
        if store is not None:        # demand is the store's: forecasts and scale decisions over what it holds
            forecasts = embedded_forecasts(settings, store, events)
    finally:
        events.close()
        dead.close()
    return EmbeddedRun(pipeline, sink, events, dead, time.monotonic() - started, forecasts)


@dataclass
class EmbeddedRun:
    pipeline: Any
    sink: Any
    events: Any
    dead: Any
    seconds: float
    forecasts: Any = None


def print_run(run: EmbeddedRun, events_path, dead_path) -> None:
    c, sink, events, seconds = run.pipeline.out.counts, run.sink, run.events, run.seconds
    dead_total = sum(v for k, v in c.items() if k.startswith("dead_"))
    print(f"processed {c['messages']:,} messages, {c['gpu_samples']:,} GPU samples in {seconds:.1f} s "
          f"({c['gpu_samples'] / max(seconds, 1e-9):,.0f} samples/s); duplicates ignored: {c['duplicates']:,}")
    if dead_total:
        reasons = ", ".join(f"{v} {k[5:]}" for k, v in sorted(c.items()) if k.startswith("dead_"))
        print(f"dead letters: {dead_total:,} ({reasons})" + (f", written to {dead_path}" if dead_path else ""))
    print(f"events: {events.count:,}" + (f", written to {events_path}" if events_path else ""))
    if sink is not None:
        print("stored rows: " + ", ".join(f"{t} {n:,}" for t, n in sorted(sink.written.items())))
        if sink.priced_differently:
            print(f"gpufleet: warning: {sink.priced_differently:,} billing records are priced differently from the "
                  "rows the ledger holds for them (the prices changed since): the ledger keeps its amounts; "
                  "`gpufleet bill rerate --from ... --to ... --reason ...` prices stored usage again",
                  file=sys.stderr)
        if sink.late_rows:
            print(f"billing records of closed months: {sink.late_rows:,}, written to billing_adjustments "
                  "(invoiced in the next open month)")
    f = run.forecasts
    if f is not None:
        print(f"forecasts: {f.forecasts:,} ({len(f.made_at)} times, every forecast.every_s), scale decisions: "
              f"{f.decisions:,}" + ("" if f.made_at else " (less demand history than forecast.min_history_s "
                                                         "plus forecast.every_s)"))


def show_dead(path: str | None) -> None:
    if not path:
        print("(pass --dead-letters FILE to keep every dead letter with its payload)")
        return
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i == 5:
                print("  ...")
                break
            d = json.loads(line)
            print(f"  {d['source']}: {d['reason_code']}: {d['reason']}")


def routing_of(args, settings: Settings):
    """The routing of ``--notify``, checked with its secrets before anything is written, or None without
    ``--notify``. Given no file, a local receiver is started and every payload written to a file."""
    how = getattr(args, "notify", None)
    if not how:
        return None
    if how != LOCAL:
        return Routing(load_routes(args.prog, how))
    import os

    from gpufleet.streams.notify.routing import Routes
    from gpufleet.streams.notify.testing import local_routing, start_local
    path = os.path.join(settings.notify.outbox_dir, "payloads.jsonl")
    local = start_local(path)
    print(f"notify: no routing file given: delivering to a local receiver this command started at {local.url()} "
          f"(slack, pagerduty, alertmanager and webhook paths); every payload is written to {path}", file=sys.stderr)
    return Routing(Routes.parse(local_routing(local.url())), local, path)


def notifier_of(args, settings: Settings, store, routing=None):
    """The notifier of ``--notify``, started, or None."""
    routing = routing if routing is not None else routing_of(args, settings)
    if routing is None:
        return None
    return local_notifier(args.prog, settings, routing.routes, store)
