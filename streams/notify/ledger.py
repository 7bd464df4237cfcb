"""Between the router and the store, on a thread of its own so that a store outage never holds up a
delivery: the delivery log copied to ``alert_deliveries`` (rows wait in the outbox while the store is
down), the silences and the firing incidents inhibition rules may use read back every ``refresh_s`` (the last read stay
in force meanwhile), and, for alerts another router may have handled, the deliveries it recorded.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from gpufleet.contracts import tables
from gpufleet.sql import StoreError

from . import silences as silence_store
from .matchers import LABELS
from .outbox import FINAL, Outbox

log = logging.getLogger("gpufleet.notify")

DELIVERIES = tables.ALERT_DELIVERIES

FIRING = """
    SELECT id, any(kind), any(severity), any(tenant), any(pool), any(node), any(job), any(gpu_uuid) FROM alerts
    WHERE detected_at > now() - INTERVAL 7 DAY
    GROUP BY id
    HAVING countIf(status = 'resolved') = 0"""


def _ms(t: float | None) -> int | None:
    return None if t is None else round(t * 1000)


def delivery_row(r: dict) -> tuple:
    a = json.loads(r["alert"])
    return (r["id"], r["alert_status"], r["receiver"], r["state"], a.get("dedup_key") or "", a.get("kind") or "",
            a.get("severity") or "", a.get("node") or "", a.get("gpu_uuid") or "", a.get("job") or "",
            a.get("tenant") or "", a.get("pool") or "", r["group_key"], int(r["attempts"]), r["reason"],
            r["last_error"], _ms(r["sent_at"]), _ms(r["updated_at"]))


class Ledger(threading.Thread):
    def __init__(self, store, outbox: Outbox, metrics=None, export_s: float = 2.0, refresh_s: float = 10.0,
                 is_source: Callable[[dict[str, str]], bool] = lambda values: False):
        super().__init__(name="notify-ledger", daemon=True)
        self.store, self.outbox, self.metrics = store, outbox, metrics
        self.export_s, self.refresh_s = export_s, refresh_s
        self.silences: list[silence_store.Silence] = []
        self.is_source = is_source
        self.firing: dict[str, dict[str, str]] = {}      # incidents firing that an inhibition rule may use
        self.stopping = threading.Event()
        self.lock = threading.Lock()          # one store call at a time
        self.exported = 0
        self._refreshed = 0.0
        self._failing = False

    def run(self) -> None:
        while not self.stopping.is_set():
            self.export()
            if time.monotonic() - self._refreshed >= self.refresh_s:
                self.refresh()
            self.stopping.wait(self.export_s)

    def stop(self, final_export: bool = True) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(timeout=60)
        if final_export:
            self.export()

    def export(self) -> int:
        """Copy the delivery log's new rows to the store; returns how many (0 while the store is down)."""
        n = 0
        while True:
            rows = self.outbox.unexported()
            if not rows:
                break
            try:
                with self.lock:
                    self.store.write(DELIVERIES.name, DELIVERIES.columns, [delivery_row(r) for r in rows],
                                     dedup=DELIVERIES.dedup)
            except StoreError as err:
                self._failed("alert_deliveries not written (kept in the outbox, tried again)", err)
                return n
            self.outbox.mark_exported(rows)
            n += len(rows)
        self._recovered()
        self.exported += n
        return n

    def refresh(self) -> bool:
        """Read the silences and the firing incidents inhibition may use from the store (so that it works across
        partitions and routers); False (old ones kept) if it is down."""
        try:
            with self.lock:
                found = silence_store.load(self.store)
                firing = {}
                for aid, *values in self.store.query(FIRING):
                    named = dict(zip(LABELS, values, strict=True))
                    if self.is_source(named):
                        firing[aid] = named
        except StoreError as err:
            self._failed("silences not read (the last read stay in force)", err)
            return False
        self.silences, self.firing = found, firing
        self._refreshed = time.monotonic()
        self._recovered()
        return True

    def told_elsewhere(self, ids: list[str]) -> dict[tuple[str, str, str], str]:
        """Final states the store holds for these alert ids (written by whichever router handled them)."""
        if not ids:
            return {}
        try:
            with self.lock:
                rows = self.store.query("SELECT id, alert_status, receiver, status FROM alert_deliveries FINAL "
                                        "WHERE id IN %(ids)s", {"ids": sorted(set(ids))})
        except StoreError as err:
            self._failed("the deliveries of other routers not read (this router's own log still applies)", err)
            return {}
        return {(i, s, r): st for i, s, r, st in rows if st in FINAL}

    def _failed(self, what: str, err: Exception) -> None:
        if self.metrics:
            self.metrics.ledger_failures.inc()
        if not self._failing:
            log.warning("store: %s: %s", what, str(err).splitlines()[0] if str(err) else type(err).__name__)
        self._failing = True

    def _recovered(self) -> None:
        if self._failing:
            log.info("store: reachable again")
        self._failing = False
