"""``gpufleet replay``: the embedded pipeline over a recorded telemetry file."""
from __future__ import annotations

import sys

from gpufleet.errors import UsageError

from . import COMMANDS
from .common import Progress, settings_of, store_options, writable_store
from .embedded import LOCAL, notifier_of, print_run, routing_of, run_embedded, show_dead
from .notify import finish


def cmd_replay(args) -> int:
    import os

    from gpufleet.streams.embedded import file_source
    if not os.path.isfile(args.file):
        raise UsageError(f"{args.prog}: argument FILE: no such file {args.file!r}")
    settings = settings_of(args)
    routing = routing_of(args, settings)           # a routing file that cannot be used stops it before the store
    store = None if args.no_store else writable_store(settings)
    source = file_source(args.file)
    code = 0
    try:
        notifier = notifier_of(args, settings, store, routing)
        result = run_embedded(settings, source, Progress("replay"), args.events, args.dead_letters, store, notifier)
        print_run(result, args.events, args.dead_letters)
        if notifier is not None:
            code = finish(notifier, routing)
        counts = result.pipeline.out.counts
        if counts.get("dead_invalid") or counts.get("dead_too_large") or counts.get("dead_internal_error"):
            show_dead(args.dead_letters)
    finally:
        if store is not None:
            store.close()
        if routing is not None:
            routing.close()
    if source.error:
        print(f"gpufleet replay: {source.error}; the lines before it were processed", file=sys.stderr)
        return 1
    return code


def add_replay(sub) -> None:
    s = sub.add_parser("replay", help=COMMANDS["replay"].summary,
                       description="Run the embedded pipeline over a file of telemetry messages (JSONL, .gz "
                                   "too; any order within the allowed lateness), store the results and write "
                                   "every event it emits. Bad lines are dead-lettered and counted, never fatal.")
    s.add_argument("file", metavar="FILE", help="telemetry JSONL file")
    s.add_argument("--events", metavar="OUT", help="write every emitted event here, one JSON object a line")
    s.add_argument("--dead-letters", metavar="OUT", help="write every dead letter here, one JSON object a line")
    s.add_argument("--no-store", action="store_true", help="do not write to the store")
    s.add_argument("--model", help="detectors' model file (setting stream.model; default: the packaged model)")
    s.add_argument("--notify", metavar="FILE", nargs="?", const=LOCAL,
                   help="also deliver the alerts with this routing file (TOML), through the durable outbox in "
                        "notify.outbox_dir; with no file, to a local receiver this command starts, writing every "
                        "payload to notify.outbox_dir/payloads.jsonl")
    store_options(s)
    s.set_defaults(fn=cmd_replay)
