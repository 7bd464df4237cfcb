"""The store sink: batches rows by size and age, writes them idempotently, retries while the store is down.

``Sink.add`` buffers what processing produced; ``Sink.flush`` writes every
buffered row and returns only once all of it is stored, retrying with backoff
while the store is unavailable (so a caller that waits on it is held back
rather than buffering without bound). A permanent failure raises.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from decimal import Decimal

from gpufleet.contracts import tables
from gpufleet.contracts.events import ALERT_SCHEMA, BILLING_SCHEMA
from gpufleet.contracts.tables import Table
from gpufleet.sql import StoreUnavailable

from .billing import ledger

log = logging.getLogger("gpufleet.sink")

ALERTS, DEAD_LETTERS, LEDGER = tables.ALERTS, tables.DEAD_LETTERS, tables.BILLING_LEDGER


def _ms(t: float | None) -> int | None:
    return None if t is None else round(t * 1000)


def alert_row(e: dict) -> tuple:
    return (e["id"], e["status"], e["dedup_key"], e["kind"], e["severity"], e["node"] or "", e["gpu_uuid"] or "",
            e["job"] or "", e["tenant"] or "", e["pool"] or "", _ms(e["started_at"]), _ms(e["detected_at"]),
            _ms(e["resolved_at"]), float(e["score"]), e["summary"], json.dumps(e["evidence"], sort_keys=True))


def _seconds(s: float) -> Decimal:
    return Decimal(str(s))       # the event's seconds have at most 3 decimals: exact in Decimal(18, 3)


def ledger_row(e: dict) -> tuple:
    """A ``gpufleet.billing.v1`` event as a ``billing_ledger`` row: money and seconds as Decimal, never floats."""
    return (e["gpu_uuid"], e["tenant"], e["job"] or "", e["period_start"], e["period_end"], e.get("node") or "",
            e["pool"] or "", e.get("gpu_index") or 0, e["gpu_model"] or "", e.get("mig_profile") or "",
            Decimal(e.get("gpu_share") or "1"), e.get("team") or "", e.get("billing_mode") or "", e["currency"],
            e.get("samples") or 0, e.get("interval_s") or 0.0, _seconds(e["rented_s"]), _seconds(e["busy_s"]),
            _seconds(e["idle_s"]), _seconds(e.get("estimated_s") or 0), _seconds(e.get("unbilled_s") or 0),
            _seconds(e.get("minimum_topup_s") or 0), e.get("util_pct"), e.get("busy_util_pct"),
            Decimal(e["price_per_gpu_hour"]), Decimal(e["amount"]), Decimal(e["idle_amount"]),
            {k: Decimal(v) for k, v in (e.get("amounts_by_mode") or {}).items()}, e.get("data_quality") or "",
            _seconds(e.get("underused_s") or 0), Decimal(e.get("unused_amount") or "0"),
            Decimal(e.get("unsold_amount") or "0"), e.get("price_version") or "",
            Decimal(e.get("busy_weighted_s") or 0), Decimal(e.get("idle_weighted_s") or 0),
            _seconds(e.get("estimated_idle_s") or 0))


def dead_row(d: dict) -> tuple:
    return (_ms(d["received_at"]), d["reason_code"], d["reason"], d["source"], d["payload"])


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
        self.priced_differently = 0                     # ledger rows stored at other prices (a replay's warning)
        self.late_rows = 0                              # records of closed months, written as adjustments

    def add(self, rows: dict[Table, list[tuple]], events: Sequence[dict] = (), dead: Sequence[dict] = ()) -> None:
        if events:
            rows = {**rows, ALERTS: [alert_row(e) for e in events if e["schema"] == ALERT_SCHEMA],
                    LEDGER: [ledger_row(e) for e in events if e["schema"] == BILLING_SCHEMA]}
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
            delay, batches = self.backoff_s[0], None
            while True:
                try:
                    # what is not stored yet is decided once: a retry inserts the very same blocks again
                    if batches is None:
                        batches = (self._ledger(rows) if table.name == LEDGER.name else
                                   [self.store.prepare(table.name, table.columns, rows, dedup=table.dedup)])
                    n = sum(self.store.insert(b) for b in batches)
                    break
                except StoreUnavailable as err:
                    self.failures += 1
                    self.unavailable_since = self.unavailable_since or time.time()
                    log.warning("store unavailable, %d rows for %s held, retrying in %.1f s: %s",
                                len(rows), table.name, delay, err)
                    time.sleep(delay)
                    delay = min(delay * 2, self.backoff_s[1])
            if self.unavailable_since is not None:
                self.unavailable_total_s += time.time() - self.unavailable_since
                self.unavailable_since = None
            new += n
            self.written[table.name] = self.written.get(table.name, 0) + n
        return new

    def _ledger(self, rows: list[tuple]) -> list:
        """The inserts of a batch of ledger rows: those of open months into the ledger (keys stored already are
        dropped), those of closed months that the ledger lacks into the adjustments, as late usage. Rows stored
        at other prices are counted and logged: the ledger keeps its amounts until `gpufleet bill rerate`."""
        closed = ledger.closed_months(self.store)
        differ = ledger.priced_differently(ledger.in_force(self.store, [ledger.key_of(r) for r in rows]), rows)
        if differ:
            self.priced_differently += len(differ)
            log.warning("%d billing rows are priced differently from the ledger (price version %s, stored %s); the "
                        "ledger keeps its amounts: `gpufleet bill rerate` prices stored rows again", len(differ),
                        differ[0][LEDGER.columns.index("price_version")] or "(none)",
                        ledger.key_of(differ[0]))
        late = [r for r in rows if ledger.month_of(r[3]) in closed]
        if not late:
            return [self.store.prepare(LEDGER.name, LEDGER.columns, rows)]
        fresh = [r for r in rows if ledger.month_of(r[3]) not in closed]
        stored = self.store.stored_keys(LEDGER.name, LEDGER.columns, late)
        key = self.store.key_of(LEDGER.name, LEDGER.columns)
        adjustments = []
        for r in late:
            if key(r) in stored:
                continue
            d = ledger.as_dict(r)
            adjustments.append(ledger.adjustment(
                d, ledger.LATE, "late", ledger.invoice_month(ledger.month_of(r[3]), closed),
                "arrived after the month was closed", d["amount"], d["idle_amount"], at=0))
        late_batch = self.store.prepare(ledger.ADJUSTMENTS.name, ledger.ADJUSTMENTS.columns, adjustments)
        self.late_rows += len(late_batch.rows)                 # those not stored yet
        return [self.store.prepare(LEDGER.name, LEDGER.columns, fresh), late_batch]
