"""``gpufleet publish``: a recorded telemetry file to the telemetry topic, bad lines refused."""
from __future__ import annotations

import sys
import time

from gpufleet.errors import UsageError
from gpufleet.settings import load_settings

from . import COMMANDS
from .common import (
    Progress,
    kafka_overrides,
)


def cmd_publish(args) -> int:
    import os

    from gpufleet.contracts.telemetry import end_of_stream
    from gpufleet.streams.kafka import KafkaUnavailable, ensure_topics, produce, produce_to_every_partition
    if not os.path.isfile(args.file):
        raise UsageError(f"{args.prog}: argument FILE: no such file {args.file!r}")
    settings = load_settings(args.config, **kafka_overrides(args))
    topic = settings.kafka.telemetry_topic
    key = settings.kafka.control_key
    if args.end and key is None:
        raise UsageError("gpufleet publish: setting kafka.control_key (GPUFLEET_KAFKA__CONTROL_KEY): not set; --end "
                         "sends an end-of-stream marker, which the workers act on only when it is signed with the key "
                         "they hold")
    try:
        ensure_topics(settings.kafka.bootstrap, {topic: settings.kafka.partitions})
    except (KafkaUnavailable, ValueError) as err:
        print(f"gpufleet publish: kafka: {err}", file=sys.stderr)
        return 1
    from gpufleet.streams.embedded import JsonLines, file_source
    source, check = file_source(args.file), LineCheck()
    progress = Progress("publish")

    def keyed():
        for i, (where, line) in enumerate(source, 1):
            if i % 1000 == 0:
                progress(i)
            key = check(where, line)
            if key is not None:
                yield key, line.rstrip(b"\n")
    try:
        n = produce(settings.kafka.bootstrap, topic, keyed())     # what was queued is flushed whatever happens
    finally:
        dead = JsonLines(args.dead_letters)
        dead.write(check.dead)
        dead.close()
    progress(n, final=True)
    print(f"published {n:,} messages to {topic} (key = node)")
    failed = check.report(args.dead_letters)
    if source.error:
        print(f"gpufleet publish: {source.error}; the lines before it were published", file=sys.stderr)
        failed = True
    if args.end:
        parts = produce_to_every_partition(settings.kafka.bootstrap, topic, end_of_stream(
            time.time(), check.newest, key.get_secret_value().encode() if key is not None else None))
        print(f"sent the end-of-stream marker to the {parts} partitions: the workers flush every open window, "
              f"as replay does; `gpufleet status --wait` tells when all is processed")
    return 1 if failed else 0


class LineCheck:
    """``publish`` checks each line as the workers will, before it is sent: a good line's key (its node), or
    None for a bad one, kept as a dead letter with its line number (nothing that would be dead-lettered is sent)."""

    def __init__(self) -> None:
        self.dead: list[dict] = []
        self.newest: float | None = None           # the newest ts of the good lines (the end-of-stream tells it)

    def __call__(self, where: str, line: bytes) -> str | None:
        from gpufleet.contracts.events import dead_letter
        from gpufleet.contracts.telemetry import TelemetryError, control_kind, unreadable
        from gpufleet.streams.decode import decode
        if control_kind(line) is not None:
            return ""                                # a marker the workers act on: sent as it is
        try:
            msg = decode(line, share_names=False)
            self.newest = msg.ts if self.newest is None else max(self.newest, msg.ts)
            return str(msg.node)
        except TelemetryError as err:
            code, reason = err.reason_code, err.reason
        except Exception as err:                     # the decoder's own failure: the line still is not sent
            code, reason = "internal_error", unreadable(err)
        self.dead.append(dead_letter(code, reason, where, time.time(), line))
        return None

    def report(self, path: str | None) -> bool:
        """Print the lines refused (the first five, and where the rest are); True if there were any."""
        if not self.dead:
            return False
        print(f"refused {len(self.dead):,} lines that are not valid telemetry (not sent)" +
              (f", written to {path}" if path else ""), file=sys.stderr)
        for d in self.dead[:5]:
            print(f"  {d['source']}: {d['reason_code']}: {d['reason']}", file=sys.stderr)
        if len(self.dead) > 5:
            print("  ..." if path else "  ... (pass --dead-letters FILE to keep every one with its payload)",
                  file=sys.stderr)
        return True


def add_publish(sub) -> None:
    s = sub.add_parser("publish", help=COMMANDS["publish"].summary,
                       description="Produce every line of a telemetry JSONL file to the telemetry topic, keyed by "
                                   "node, for the workers to process (a replay in the distributed mode). Each line "
                                   "is checked first: a line that is not valid telemetry is not sent but reported "
                                   "with its line number, and the exit code is 1; the good lines are all sent.")
    s.add_argument("file", metavar="FILE", help="telemetry JSONL file (.gz too)")
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    s.add_argument("--topic", help="telemetry topic (setting kafka.telemetry_topic)")
    s.add_argument("--partitions", type=int, help="partitions if the topic is created (setting kafka.partitions)")
    s.add_argument("--end", action="store_true",
                   help="after the file, mark the end of the stream on every partition: the workers then flush "
                        "every open window as replay does at the end of its input")
    s.add_argument("--dead-letters", metavar="OUT",
                   help="write every line refused (not valid telemetry) here as a dead letter with its line number")
    s.set_defaults(fn=cmd_publish)
