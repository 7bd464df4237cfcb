"""``gpufleet worker``: the stream processors on Kafka (the distributed mode)."""
from __future__ import annotations

import sys

from gpufleet.settings import load_settings

from . import COMMANDS
from .common import (
    kafka_overrides,
    load_model,
    store_options,
    writable_store,
)


def cmd_worker(args) -> int:
    from gpufleet.streams import worker
    from gpufleet.streams.kafka import KafkaUnavailable, anchor_offsets, ensure_topics

    store = {k: v for k, v in (("dsn", args.dsn), ("database", args.database)) if v is not None}
    w = {k: v for k, v in (("web_port", args.web_port), ("data_dir", args.data_dir), ("app_id", args.app_id))
         if v is not None}
    stream = {"model": args.model} if args.model else {}
    settings = load_settings(args.config, **({"store": store} if store else {}), **({"worker": w} if w else {}),
                             **({"stream": stream} if stream else {}), **kafka_overrides(args))
    if settings.store.dsn.startswith("chdb:"):
        print("gpufleet worker: note: writing to an embedded store; a ClickHouse server (--dsn http://...) "
              "lets several workers share it", file=sys.stderr)
    try:
        ensure_topics(settings.kafka.bootstrap, worker.internal_topics(settings))
        sources = worker.topic_names(settings)
        anchor_offsets(settings.kafka.bootstrap, settings.worker.app_id, [sources["telemetry"], sources["by_job"]])
    except (KafkaUnavailable, ValueError) as err:
        print(f"gpufleet worker: kafka: {err}", file=sys.stderr)
        return 1
    model = load_model(settings)
    store_ = writable_store(settings)
    return worker.run(settings, store_, model, loglevel=args.log_level)


def add_worker(sub) -> None:
    s = sub.add_parser("worker", help=COMMANDS["worker"].summary,
                       description="Run the stream processors as a faust-streaming worker: consume the telemetry "
                                   "topic, validate (bad messages to the dead-letter topic), compute rollups, idle "
                                   "windows and alerts with state in Faust tables, and write to ClickHouse. Start "
                                   "as many as there are partitions; they share the load and take over from a "
                                   "worker that dies. Serves /health and /metrics on --web-port.")
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    s.add_argument("--partitions", type=int, help="partitions of the topics it creates (setting kafka.partitions, 4)")
    s.add_argument("--topic", help="telemetry topic (setting kafka.telemetry_topic)")
    s.add_argument("--web-port", type=int, help="port of /health and /metrics (setting worker.web_port, 6066)")
    s.add_argument("--data-dir", help="Faust data directory (setting worker.data_dir)")
    s.add_argument("--app-id", help="Faust app id, the consumer group (setting worker.app_id, gpufleet)")
    s.add_argument("--model", help="detectors' model file (setting stream.model; default: the packaged model)")
    store_options(s)
    s.set_defaults(fn=cmd_worker)
