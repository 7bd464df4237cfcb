"""``gpufleet demo``: a simulated fleet through the embedded pipeline, and its summary."""
from __future__ import annotations

import json

from . import COMMANDS
from .common import Progress, fleet_options, settings_of, spec_of, store_options, tee, writable_store
from .embedded import LOCAL, notifier_of, print_run, routing_of, run_embedded
from .notify import finish


def cmd_demo(args) -> int:
    import os

    from gpufleet.collectors.simulator import Simulation
    from gpufleet.streams.embedded import dict_source
    from gpufleet.summary import render

    spec = spec_of(args)
    settings = settings_of(args)
    print(f"gpufleet demo: {spec.nodes} nodes x {spec.gpus_per_node} GPUs, {spec.hours:g} simulated hours at "
          f"{spec.interval_s:g} s, {spec.faults_per_kind} faults of each kind, seed {spec.seed}")
    routing = routing_of(args, settings)           # a routing file that cannot be used stops it before the store
    print(f"store: {settings.store.dsn}, database {settings.store.database} (recreated)")
    store = writable_store(settings, fresh=True)
    sim = Simulation(spec)
    messages = sim.messages()
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        messages = tee(messages, os.path.join(args.save, "telemetry.jsonl"))
        with open(os.path.join(args.save, "labels.jsonl"), "w", encoding="utf-8") as f:
            for label in sim.labels():
                f.write(json.dumps(label) + "\n")
    events_path = os.path.join(args.save, "events.jsonl") if args.save else None
    code = 0
    try:
        notifier = notifier_of(args, settings, store, routing)
        result = run_embedded(settings, dict_source(messages), Progress("pipeline", spec.messages_total),
                              events_path, None, store, notifier)
        print_run(result, events_path, None)
        if notifier is not None:
            code = finish(notifier, routing)
        print()
        print(render(store))
    finally:
        store.close()
        if routing is not None:
            routing.close()
    print(f"\nExplore it with SQL, e.g.: gpufleet sql --database {settings.store.database} "
          "'SELECT * FROM idle_windows ORDER BY duration_s DESC LIMIT 5'  (docs/sql.md)")
    if not args.notify:
        print("Send these alerts to Slack, PagerDuty, Alertmanager or a signed webhook: gpufleet demo --notify "
              "routes.toml, or with no file to see the payloads locally  (docs/alerting.md)")
    return code


def add_demo(sub) -> None:
    s = sub.add_parser("demo", help=COMMANDS["demo"].summary,
                       description="Simulate a fleet, run its telemetry through the embedded pipeline into "
                                   "ClickHouse (in-process), then print a fleet summary read back with SQL.")
    fleet_options(s, start_default=None)
    store_options(s, database="gpufleet_demo")
    s.add_argument("--save", metavar="DIR", help="also write telemetry.jsonl, labels.jsonl and events.jsonl there")
    s.add_argument("--notify", metavar="FILE", nargs="?", const=LOCAL,
                   help="also deliver the alerts with this routing file (TOML); with no file, to a local receiver "
                        "this command starts, writing every payload to notify.outbox_dir/payloads.jsonl")
    s.set_defaults(fn=cmd_demo)
