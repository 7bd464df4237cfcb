"""What processing produces, collected for the driver: rows per table, events, dead letters, counts."""
from __future__ import annotations

import json
import logging
import os
import traceback
from collections import Counter

from .events import ALERT_SCHEMA, DEFAULT_MANUAL_URL, dead_letter, runbook_url
from .tables import Table

log = logging.getLogger("gpufleet.stream")
_TOLD: set[str] = set()         # where internal errors were logged with their traceback (each place once)


class Output:
    __slots__ = ("rows", "events", "dead", "counts", "job_samples", "watermarks", "done", "manual_url")

    def __init__(self, manual_url: str = DEFAULT_MANUAL_URL):
        self.manual_url = manual_url         # the manual every alert's runbook_url points into
        self.rows: dict[Table, list[tuple]] = {}
        self.events: list[dict] = []
        self.dead: list[dict] = []
        self.counts: Counter = Counter()
        self.job_samples: list[dict] = []    # for the job stage (streams/jobs.py)
        self.watermarks: dict[int, float | None] = {}   # distributed mode: telemetry partition -> its watermark
        self.done: list = []                 # references of inputs whose results are all in this output

    def row(self, table: Table, row: tuple) -> None:
        rows = self.rows.get(table)
        if rows is None:
            rows = self.rows[table] = []
        rows.append(row)

    def event(self, event: dict) -> None:
        if event.get("schema") == ALERT_SCHEMA and "runbook_url" not in event:
            event["runbook_url"] = runbook_url(self.manual_url, event["kind"])
        self.events.append(event)

    def dead_letter(self, reason_code: str, reason: str, source: str, received_at: float, payload) -> None:
        if isinstance(payload, dict):
            payload = json.dumps(payload, separators=(",", ":"))
        self.dead.append(dead_letter(reason_code, reason, source, received_at, payload))
        self.counts[f"dead_{reason_code}"] += 1

    def internal_error(self, err: Exception, source: str, received_at: float, payload) -> None:
        """Processing one input raised: the input is dead-lettered with reason ``internal_error`` and the
        traceback's last line, and the stream goes on (the input's fault or gpufleet's, one input must not stop a
        partition). The first traceback from each place is logged whole."""
        line = crash_line(err)
        if line not in _TOLD and len(_TOLD) < 1000:
            _TOLD.add(line)
            log.error("processing %s failed; dead-lettered as internal_error, the stream goes on", source,
                      exc_info=err)
        self.dead_letter("internal_error", line, source, received_at, payload)

    def drain(self) -> tuple[dict[Table, list[tuple]], list[dict], list[dict]]:
        """Hand over rows, events and dead letters collected so far (counts stay)."""
        rows, events, dead = self.rows, self.events, self.dead
        self.rows, self.events, self.dead = {}, [], []
        return rows, events, dead


def crash_line(err: BaseException) -> str:
    """The traceback's last line, and where it was raised: ``KeyError: 'ts' (at jobs.py:143 in push)``."""
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return (traceback.format_exception_only(err)[-1].strip() + where)[:1000]


def source_of(ref, fallback: str) -> str:
    """Where an input came from: a stream event's ``topic/partition/offset`` (a share of one too), else
    ``fallback``."""
    ev = getattr(ref, "event", ref)           # durable.Share wraps the event it shares
    m = getattr(ev, "message", None)
    if m is not None and getattr(m, "topic", None) is not None:
        return f"{m.topic}/{m.partition}/{m.offset}"
    return ref if isinstance(ref, str) else fallback
