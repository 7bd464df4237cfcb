"""What processing produces, collected for the driver: rows per table, events, dead letters, counts."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

from .events import dead_letter


@dataclass(frozen=True)
class Table:
    """A store table the stream writes: its name, its columns in row order, and whether the sink
    must drop rows whose key is already stored (tables that feed materialized views)."""

    name: str
    columns: tuple[str, ...]
    dedup: bool = True


class Output:
    __slots__ = ("rows", "events", "dead", "counts", "job_samples", "watermarks", "done")

    def __init__(self):
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
        self.events.append(event)

    def dead_letter(self, reason_code: str, reason: str, source: str, received_at: float, payload) -> None:
        if isinstance(payload, dict):
            payload = json.dumps(payload, separators=(",", ":"))
        self.dead.append(dead_letter(reason_code, reason, source, received_at, payload))
        self.counts[f"dead_{reason_code}"] += 1

    def drain(self) -> tuple[dict[Table, list[tuple]], list[dict], list[dict]]:
        """Hand over rows, events and dead letters collected so far (counts stay)."""
        rows, events, dead = self.rows, self.events, self.dead
        self.rows, self.events, self.dead = {}, [], []
        return rows, events, dead
