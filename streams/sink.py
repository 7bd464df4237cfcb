"""The store sink: batches rows by size and age, writes each table to its destination, retries while the store is down.

``Sink.add`` buffers what processing produced; ``Sink.flush`` writes every
buffered row and returns only once all of it is stored, retrying with backoff
while the store is unavailable (so a caller that waits on it is held back
rather than buffering without bound). A permanent failure raises.

Each table has one destination behind one interface (:class:`Destination`): ``prepare(rows)`` decides, once,
the inserts a batch needs (a retry inserts the very same blocks again), and the sink inserts them. A table is
written idempotently on its key (:class:`TableSink`); the billing ledger has its own rules
(streams/billing/sink.py). This module knows no billing rule.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpufleet.contracts import tables
from gpufleet.contracts.events import ALERT_SCHEMA, BILLING_SCHEMA
from gpufleet.contracts.tables import Table
from gpufleet.sql import Insert, StoreUnavailable

from .billing import ledger
from .billing.sink import LedgerSink

log = logging.getLogger("gpufleet.sink")

ALERTS, DEAD_LETTERS, LEDGER = tables.ALERTS, tables.DEAD_LETTERS, tables.BILLING_LEDGER


def _ms(t: float | None) -> int | None:
    return None if t is None else round(t * 1000)


def alert_row(e: dict) -> tuple:
    return ALERTS.row(id=e["id"], status=e["status"], dedup_key=e["dedup_key"], kind=e["kind"],
                      severity=e["severity"], node=e["node"] or "", gpu_uuid=e["gpu_uuid"] or "", job=e["job"] or "",
                      tenant=e["tenant"] or "", pool=e["pool"] or "", started_at=_ms(e["started_at"]),
                      detected_at=_ms(e["detected_at"]), resolved_at=_ms(e["resolved_at"]), score=float(e["score"]),
                      summary=e["summary"], evidence=json.dumps(e["evidence"], sort_keys=True))


ledger_row = ledger.row_of


def dead_row(d: dict) -> tuple:
    return DEAD_LETTERS.row(received_at=_ms(d["received_at"]), reason_code=d["reason_code"], reason=d["reason"],
                            source=d["source"], payload=d["payload"])


# the events the sink stores, by schema: the table and the row of each
EVENT_ROWS: dict[str, tuple[Table, Callable[[dict], tuple]]] = {ALERT_SCHEMA: (ALERTS, alert_row),
                                                                 BILLING_SCHEMA: (LEDGER, ledger_row)}


class Destination(Protocol):
    """Where one table's rows go: the inserts a batch of rows needs, decided once against the store."""

    table: Table

    def prepare(self, rows: list[tuple]) -> list[Insert]: ...


class TableSink:
    """A table written idempotently: rows whose key is stored already are dropped (for tables marked ``dedup``)."""

    def __init__(self, store, table: Table) -> None:
        self.store, self.table = store, table

    def prepare(self, rows: list[tuple]) -> list[Insert]:
        t = self.table
        return [self.store.prepare(t.name, t.columns, rows, dedup=t.dedup)]


@dataclass
class Batch:
    """One table's rows on their way to the store, and the inserts decided for them at the first try."""

    rows: list[tuple]
    inserts: list[Insert] | None = None


class Sink:
    def __init__(self, store, max_rows: int = 50_000, max_delay_s: float = 2.0,
                 backoff_s: tuple[float, float] = (0.5, 10.0)):
        if max_rows < 1 or max_delay_s < 0:
            raise ValueError("max_rows must be >= 1 and max_delay_s >= 0")
        self.store, self.max_rows, self.max_delay_s = store, max_rows, max_delay_s
        self.backoff_s = backoff_s
        self.buffer: dict[Table, list[tuple]] = {}
        self.buffered = 0
        self.oldest: float | None = None
        self.written: dict[str, int] = {}
        self.failures = 0
        self.unavailable_since: float | None = None     # wall time of the first failure of a retry run
        self.unavailable_total_s = 0.0                  # over retry runs that ended
        self.ledger = LedgerSink(store)
        self.destinations: dict[str, Destination] = {LEDGER.name: self.ledger}

    @property
    def priced_differently(self) -> int:
        return self.ledger.priced_differently

    @property
    def late_rows(self) -> int:
        return self.ledger.late_rows

    def destination(self, table: Table) -> Destination:
        found = self.destinations.get(table.name)
        if found is None:
            found = self.destinations[table.name] = TableSink(self.store, table)
        return found

    def add(self, rows: dict[Table, list[tuple]], events: Sequence[dict] = (), dead: Sequence[dict] = ()) -> None:
        if events:
            rows = dict(rows)
            for schema, (table, row_of) in EVENT_ROWS.items():
                rows[table] = [row_of(e) for e in events if e["schema"] == schema]
        if dead:
            rows = {**rows, DEAD_LETTERS: [dead_row(d) for d in dead]}
        for table, new in rows.items():
            if new:
                self.buffer.setdefault(table, []).extend(new)
                self.buffered += len(new)
        if self.buffered and self.oldest is None:
            self.oldest = time.monotonic()

    def unavailable_s(self) -> float:
        """Seconds the store has been unavailable, in all, the current outage included."""
        since = self.unavailable_since
        return self.unavailable_total_s + (time.time() - since if since is not None else 0.0)

    def discard(self) -> None:
        """Drop everything buffered (after a rebalance the inputs behind it come again)."""
        self.buffer, self.buffered, self.oldest = {}, 0, None

    def due(self) -> bool:
        return self.buffered >= self.max_rows or (
            self.oldest is not None and time.monotonic() - self.oldest >= self.max_delay_s)

    def flush(self) -> int:
        """Write everything buffered; returns the number of rows that were new to the store."""
        return self.write(self.take())

    def take(self) -> dict[Table, list[tuple]]:
        """Hand over everything buffered (to :meth:`write`, perhaps in another thread) and start empty."""
        buffer = self.buffer
        self.buffer, self.buffered, self.oldest = {}, 0, None
        return buffer

    def write(self, buffer: dict[Table, list[tuple]]) -> int:
        """Write rows taken from the buffer, retrying while the store is unavailable; returns how many were new."""
        new = 0
        for table, rows in buffer.items():
            n = self._write(self.destination(table), Batch(rows))
            new += n
            self.written[table.name] = self.written.get(table.name, 0) + n
        return new

    def _write(self, destination: Destination, batch: Batch) -> int:
        delay = self.backoff_s[0]
        while True:
            try:
                if batch.inserts is None:     # decided once: a retry inserts the very same blocks again
                    batch.inserts = destination.prepare(batch.rows)
                n = sum(self.store.insert(b) for b in batch.inserts)
                break
            except StoreUnavailable as err:
                self.failures += 1
                self.unavailable_since = self.unavailable_since or time.time()
                log.warning("store unavailable, %d rows for %s held, retrying in %.1f s: %s",
                            len(batch.rows), destination.table.name, delay, err)
                time.sleep(delay)
                delay = min(delay * 2, self.backoff_s[1])
        if self.unavailable_since is not None:
            self.unavailable_total_s += time.time() - self.unavailable_since
            self.unavailable_since = None
        return n
