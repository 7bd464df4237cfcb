"""``gpufleet status``: how far the workers have got."""
from __future__ import annotations

import sys
import time

from gpufleet.errors import UsageError
from gpufleet.settings import load_settings

from . import COMMANDS
from .common import (
    kafka_overrides,
)


def cmd_status(args) -> int:
    from gpufleet.streams import worker
    from gpufleet.streams.kafka import KafkaUnavailable, group_progress
    from gpufleet.summary import table
    if args.wait is not None and not 0 < args.wait <= 86400:
        raise UsageError(f"{args.prog}: argument --wait: {args.wait:g} is not between 0 and 86400 seconds")
    overrides = kafka_overrides(args)
    if args.app_id:
        overrides["worker"] = {"app_id": args.app_id}
    settings = load_settings(args.config, **overrides)
    names = worker.topic_names(settings)
    deadline = time.monotonic() + (args.wait or 0)
    clear = 0
    while True:
        try:
            progress = group_progress(settings.kafka.bootstrap, settings.worker.app_id,
                                      [names["telemetry"], names["by_job"]])
        except KafkaUnavailable as err:
            print(f"gpufleet status: kafka: {err}", file=sys.stderr)
            return 1
        lag = sum(end - (committed or 0) for _, _, committed, end in progress)
        clear = clear + 1 if lag == 0 else 0
        if args.wait is None or clear >= 2 or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    print(table(["topic", "partition", "committed", "end", "lag"],
                [(t, p, c, e, e - (c or 0)) for t, p, c, e in progress]))
    if lag == 0:
        print(f"all processed: group {settings.worker.app_id} has committed every message published")
        return 0
    print(f"{lag:,} messages not processed yet by group {settings.worker.app_id}")
    return 1 if args.wait is not None else 0


def add_status(sub) -> None:
    s = sub.add_parser("status", help=COMMANDS["status"].summary,
                       description="For the workers' consumer group (worker.app_id), each partition of the "
                                   "telemetry and by-job topics: the offset committed, the end, and the lag. "
                                   "Zero lag everywhere means everything published has been processed and is "
                                   "stored (after `gpufleet publish --end`, windows included).")
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    s.add_argument("--topic", help="telemetry topic (setting kafka.telemetry_topic)")
    s.add_argument("--app-id", help="the workers' app id, their consumer group (setting worker.app_id)")
    s.add_argument("--wait", type=float, metavar="SECONDS",
                   help="wait up to SECONDS for zero lag everywhere; exit 1 if it does not come")
    s.set_defaults(fn=cmd_status)
