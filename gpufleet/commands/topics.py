"""``gpufleet topics``: create the Kafka topics gpufleet uses."""
from __future__ import annotations

import sys

from gpufleet.settings import load_settings

from . import COMMANDS
from .common import (
    kafka_overrides,
)


def cmd_topics(args) -> int:
    from gpufleet.streams import worker
    from gpufleet.streams.forecast_events import topic_names
    from gpufleet.streams.kafka import KafkaUnavailable, ensure_topics
    from gpufleet.streams.notify.service import dead_letter_topic
    settings = load_settings(args.config, **kafka_overrides(args))
    topics = worker.internal_topics(settings)
    topics.update({t: settings.kafka.partitions for t in topic_names(settings).values()})
    topics[dead_letter_topic(worker.topic_names(settings)["alerts"])] = settings.kafka.partitions
    try:
        ensure_topics(settings.kafka.bootstrap, topics)
    except (KafkaUnavailable, ValueError) as err:
        print(f"gpufleet topics: kafka: {err}", file=sys.stderr)
        return 1
    for name, n in sorted(topics.items()):
        print(f"{name}: {n} partitions")
    return 0


def add_topics(sub) -> None:
    s = sub.add_parser("topics", help=COMMANDS["topics"].summary,
                       description="Create the telemetry, dead-letter, alert, billing and internal topics with their "
                                   "partition counts, or check that existing ones have them.")
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    s.add_argument("--partitions", type=int, help="partitions (setting kafka.partitions, 4)")
    s.set_defaults(fn=cmd_topics)
