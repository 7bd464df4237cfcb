"""The billing ledger as a destination of the stream's sink: the billing rules of writing it live here.

A batch of ledger rows is decided once against the store (a retry inserts the very same blocks again): rows of
open months go into the ledger (keys stored already dropped, as every repeat is); rows of closed months that the
ledger lacks go to ``billing_adjustments`` as late usage, invoiced in the first open month after theirs; rows
priced differently from the row in force for their key are counted and logged, the ledger keeping its amounts
until ``gpufleet bill rerate`` (ledger.py). The closed months and the prices in force are read once per batch.
"""
from __future__ import annotations

import logging

from gpufleet.sql import Insert

from . import ledger

log = logging.getLogger("gpufleet.sink")


class LedgerSink:
    """The ``billing_ledger`` destination (streams/sink.py's ``Destination`` protocol)."""

    table = ledger.LEDGER

    def __init__(self, store) -> None:
        self.store = store
        self.priced_differently = 0                     # ledger rows stored at other prices (a replay's warning)
        self.late_rows = 0                              # records of closed months, written as adjustments

    def prepare(self, rows: list[tuple]) -> list[Insert]:
        store, LEDGER = self.store, ledger.LEDGER
        closed = ledger.closed_months(store)
        differ = ledger.priced_differently(ledger.in_force(store, [ledger.key_of(r) for r in rows]), rows)
        if differ:
            self.priced_differently += len(differ)
            first = LEDGER.record(*differ[0])
            log.warning("%d billing rows are priced differently from the ledger (price version %s, stored %s); the "
                        "ledger keeps its amounts: `gpufleet bill rerate` prices stored rows again", len(differ),
                        first.price_version or "(none)", ledger.key_of(differ[0]))
        late = [r for r in rows if ledger.month_of(LEDGER.record(*r).period_start) in closed]
        if not late:
            return [store.prepare(LEDGER.name, LEDGER.columns, rows)]
        fresh = [r for r in rows if ledger.month_of(LEDGER.record(*r).period_start) not in closed]
        stored = store.stored_keys(LEDGER.name, LEDGER.columns, late)
        key = store.key_of(LEDGER.name, LEDGER.columns)
        adjustments = []
        for r in late:
            if key(r) in stored:
                continue
            d = ledger.as_dict(r)
            adjustments.append(ledger.adjustment(d, ledger.Change(
                ledger.LATE, "late", ledger.invoice_month(ledger.month_of(d["period_start"]), closed), 0,
                "arrived after the month was closed", d["amount"], d["idle_amount"])))
        late_batch = store.prepare(ledger.ADJUSTMENTS.name, ledger.ADJUSTMENTS.columns, adjustments)
        self.late_rows += len(late_batch.rows)                 # those not stored yet
        return [store.prepare(LEDGER.name, LEDGER.columns, fresh), late_batch]
