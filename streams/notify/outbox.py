"""The delivery log, and in the embedded mode the outbox: one SQLite file in ``notify.outbox_dir``.

One row per alert id, step and receiver (the step: ``firing``, ``firing.N`` for an incident's revision N,
told when its severity changed or its numbers moved on, or ``resolved``), in one of these states:

- ``pending``: owed and not told yet (the embedded mode keeps these, so that a run cut short tells
  them at the next start; in the distributed mode the alert topic is the outbox);
- ``sent``: the receiver answered 2xx; ``dead``: given up (rejected, or retried past the limit),
  with the reason; ``silenced`` / ``inhibited``: not told, with the silence or the incident that
  muted it; ``superseded``: a firing that came after its own resolve, never told.

A row is written before the router acknowledges the alert behind it, so across a restart each
(incident, status, receiver) is told once. With ``notify.outbox_fsync`` each commit is fsynced (a
power cut loses none); without, a killed process still loses none. The file carries its format
version and a file of another version is refused.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

VERSION = 1
FINAL = ("sent", "dead", "silenced", "inhibited", "superseded")
HELD = ("silenced", "inhibited")
SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    id           TEXT NOT NULL,
    alert_status TEXT NOT NULL,
    receiver     TEXT NOT NULL,
    state        TEXT NOT NULL,
    group_key    TEXT NOT NULL,
    partition    INTEGER NOT NULL,
    alert        TEXT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    reason       TEXT NOT NULL DEFAULT '',
    last_error   TEXT NOT NULL DEFAULT '',
    sent_at      REAL,
    updated_at   REAL NOT NULL,
    exported     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (id, alert_status, receiver)
);
CREATE INDEX IF NOT EXISTS deliveries_state ON deliveries (state);
CREATE INDEX IF NOT EXISTS deliveries_unexported ON deliveries (exported) WHERE exported = 0;
CREATE TABLE IF NOT EXISTS reminders (
    receiver  TEXT NOT NULL,
    group_key TEXT NOT NULL,
    last_at   REAL NOT NULL,
    PRIMARY KEY (receiver, group_key)
);
"""


def step_of(alert: dict) -> str:
    """The step an alert event is in its incident's life: ``firing`` (first told), ``firing.N`` (revision N:
    escalated, de-escalated or updated) or ``resolved``."""
    if alert["status"] == "firing" and alert.get("revision"):
        return f"firing.{int(alert['revision'])}"
    return alert["status"]


def revision_of(alert: dict) -> int:
    return int(alert.get("revision") or 0)


def latest(rows: list[tuple], key, alert_at: int) -> list[tuple]:
    """Of rows that carry an alert at position ``alert_at``, the one of the highest revision per ``key(row)``."""
    best: dict = {}
    for row in rows:
        k = key(row)
        if k not in best or revision_of(row[alert_at]) >= revision_of(best[k][alert_at]):
            best[k] = row
    return list(best.values())


# The circuit breakers' state: added to version 1 files as they are opened (no reader of version 1 needs it).
RECEIVERS = """
CREATE TABLE IF NOT EXISTS receiver_state (
    receiver   TEXT PRIMARY KEY,
    state      TEXT NOT NULL,
    since      REAL,
    last_error TEXT NOT NULL DEFAULT '',
    updated_at REAL NOT NULL
);
"""


class OutboxError(Exception):
    """An outbox this version cannot read."""


@dataclass(eq=False)
class Delivery:
    """One alert event owed to one receiver."""

    alert: dict
    receiver: str
    group_key: str
    partition: int = -1                      # Kafka partition of the alert; -1 in the embedded mode
    arrived: float = field(default_factory=time.monotonic)
    refs: list = field(default_factory=list)     # inputs whose acknowledgement waits for it
    attempts: int = 0
    cancelled: bool = False
    submitted: bool = False                  # handed to its sender

    @property
    def id(self) -> str:
        return self.alert["id"]

    @property
    def status(self) -> str:
        return self.alert["status"]

    @property
    def step(self) -> str:
        return step_of(self.alert)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.alert["id"], self.step, self.receiver)


class Outbox:
    def __init__(self, directory: str, fsync: bool = True, name: str = "outbox.sqlite3"):
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, name)
        self.fsync = fsync
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._last_update = 0.0
        db = self._db()
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if version not in (0, VERSION):
            raise OutboxError(f"outbox {self.path} is format version {version}; this gpufleet reads version "
                              f"{VERSION}: point notify.outbox_dir elsewhere, or deliver with the gpufleet that "
                              "wrote it")
        with db:
            if version == 0:
                db.executescript(SCHEMA)
                db.execute(f"PRAGMA user_version = {VERSION}")
            db.executescript(RECEIVERS)              # added to version 1 files as they are opened

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {'FULL' if self.fsync else 'NORMAL'}")
            self._local.db = db
            with self._lock:
                self._all.append(db)
        return db

    def close(self) -> None:
        with self._lock:
            for db in self._all:
                try:
                    db.close()
                except sqlite3.ProgrammingError:     # made in a thread that has ended
                    pass
            self._all.clear()
        self._local = threading.local()

    def _now(self) -> float:
        """Wall time, strictly increasing: the store keeps the row with the latest."""
        with self._lock:
            self._last_update = max(time.time(), self._last_update + 0.001)
            return self._last_update

    # -- reads ---------------------------------------------------------------------
    def states(self, ids: Iterable[str]) -> dict[tuple[str, str, str], str]:
        """State of every row of these alert ids, by (id, step, receiver)."""
        ids = list(set(ids))
        out: dict[tuple[str, str, str], str] = {}
        for lo in range(0, len(ids), 500):
            chunk = ids[lo:lo + 500]
            rows = self._db().execute(
                f"SELECT id, alert_status, receiver, state FROM deliveries WHERE id IN ({','.join('?' * len(chunk))})",
                chunk)
            out.update({(i, s, r): state for i, s, r, state in rows})
        return out

    def pending(self) -> list[tuple[dict, str]]:
        """Alerts owed and not told (the embedded mode's outbox), oldest first, with their receiver."""
        rows = self._db().execute("SELECT alert, receiver FROM deliveries WHERE state = 'pending' "
                                  "ORDER BY rowid")                  # the order they were owed in
        return [(json.loads(a), r) for a, r in rows]

    def open_incidents(self) -> list[tuple[dict, int]]:
        """Firing alerts whose resolve has not come (under any receiver), each incident at its latest revision,
        with its partition."""
        rows = self._db().execute(
            "SELECT f.alert, f.partition FROM deliveries f WHERE f.alert_status LIKE 'firing%' AND NOT EXISTS "
            "(SELECT 1 FROM deliveries r WHERE r.id = f.id AND r.alert_status = 'resolved')")
        return latest([(json.loads(a), p) for a, p in rows], lambda r: r[0]["id"], 0)

    def told(self) -> list[tuple[str, str, dict, int, float]]:
        """Firing alerts told to a receiver and not resolved there, the latest revision told:
        (receiver, group, alert, partition, sent_at)."""
        rows = self._db().execute(
            "SELECT f.receiver, f.group_key, f.alert, f.partition, f.sent_at FROM deliveries f "
            "WHERE f.alert_status LIKE 'firing%' AND f.state = 'sent' AND NOT EXISTS (SELECT 1 FROM deliveries r "
            "WHERE r.id = f.id AND r.receiver = f.receiver AND r.alert_status = 'resolved')")
        return latest([(r, g, json.loads(a), p, s) for r, g, a, p, s in rows], lambda r: (r[0], r[2]["id"]), 2)

    def held(self) -> list[tuple[dict, str, str, int]]:
        """Firing alerts silenced or inhibited at a receiver and not resolved, none of their steps told there:
        (alert, receiver, state, partition)."""
        rows = self._db().execute(
            "SELECT f.alert, f.receiver, f.state, f.partition FROM deliveries f "
            "WHERE f.alert_status LIKE 'firing%' AND f.state IN ('silenced', 'inhibited') AND NOT EXISTS "
            "(SELECT 1 FROM deliveries r WHERE r.id = f.id AND r.alert_status = 'resolved') AND NOT EXISTS "
            "(SELECT 1 FROM deliveries t WHERE t.id = f.id AND t.receiver = f.receiver AND t.state = 'sent' "
            "AND t.alert_status LIKE 'firing%')")
        return latest([(json.loads(a), r, s, p) for a, r, s, p in rows], lambda r: (r[1], r[0]["id"]), 0)

    def reminders(self) -> dict[tuple[str, str], float]:
        return {(r, g): t for r, g, t in self._db().execute("SELECT receiver, group_key, last_at FROM reminders")}

    def unexported(self, limit: int = 5000) -> list[dict]:
        rows = self._db().execute(
            "SELECT id, alert_status, receiver, state, group_key, alert, attempts, reason, last_error, sent_at, "
            "updated_at FROM deliveries WHERE exported = 0 AND state != 'pending' ORDER BY updated_at LIMIT ?",
            (limit,))
        names = ("id", "alert_status", "receiver", "state", "group_key", "alert", "attempts", "reason", "last_error",
                 "sent_at", "updated_at")
        return [dict(zip(names, r)) for r in rows]

    def counts(self) -> dict[str, int]:
        return dict(self._db().execute("SELECT state, count(*) FROM deliveries GROUP BY state").fetchall())

    # -- writes ----------------------------------------------------------------------
    def add_pending(self, deliveries: Iterable[Delivery]) -> None:
        now = self._now()
        rows = [(d.id, d.step, d.receiver, d.group_key, d.partition, json.dumps(d.alert), now) for d in deliveries]
        if rows:
            db = self._db()
            with db:
                db.executemany("INSERT OR IGNORE INTO deliveries (id, alert_status, receiver, state, group_key, "
                               "partition, alert, updated_at) VALUES (?, ?, ?, 'pending', ?, ?, ?, ?)", rows)

    def record(self, deliveries: Iterable[Delivery], state: str, *, attempts: int | None = None, reason: str = "",
               error: str = "", sent_at: float | None = None) -> None:
        """The final state of deliveries, committed (and fsynced) before this returns."""
        if state not in FINAL:
            raise ValueError(f"not a final state: {state}")
        now = self._now()
        rows = [(d.id, d.step, d.receiver, state, d.group_key, d.partition, json.dumps(d.alert),
                 d.attempts if attempts is None else attempts, reason, error[:2000], sent_at, now)
                for d in deliveries]
        if rows:
            db = self._db()
            with db:
                db.executemany(
                    "INSERT INTO deliveries (id, alert_status, receiver, state, group_key, partition, alert, attempts, "
                    "reason, last_error, sent_at, updated_at, exported) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0) "
                    "ON CONFLICT (id, alert_status, receiver) DO UPDATE SET state = excluded.state, "
                    "group_key = excluded.group_key, attempts = excluded.attempts, reason = excluded.reason, "
                    "last_error = excluded.last_error, sent_at = excluded.sent_at, "
                    "updated_at = excluded.updated_at, exported = 0", rows)

    def receiver_state(self, receiver: str, state: str, since: float | None, error: str = "") -> None:
        """A receiver marked up or down by its circuit breaker."""
        db = self._db()
        with db:
            db.execute("INSERT INTO receiver_state VALUES (?, ?, ?, ?, ?) ON CONFLICT (receiver) DO UPDATE SET "
                       "state = excluded.state, since = excluded.since, last_error = excluded.last_error, "
                       "updated_at = excluded.updated_at", (receiver, state, since, error[:2000], time.time()))

    def reminded(self, receiver: str, group_key: str, at: float) -> None:
        db = self._db()
        with db:
            db.execute("INSERT INTO reminders VALUES (?, ?, ?) ON CONFLICT (receiver, group_key) DO UPDATE SET "
                       "last_at = excluded.last_at", (receiver, group_key, at))

    def forget_pending(self) -> int:
        """Drop rows still pending: the distributed mode reads what they owed again from the topic."""
        db = self._db()
        with db:
            return db.execute("DELETE FROM deliveries WHERE state = 'pending'").rowcount

    def mark_exported(self, rows: Iterable[dict]) -> None:
        db = self._db()
        with db:
            db.executemany("UPDATE deliveries SET exported = 1 WHERE id = ? AND alert_status = ? AND receiver = ? "
                           "AND updated_at = ?",
                           [(r["id"], r["alert_status"], r["receiver"], r["updated_at"]) for r in rows])

    def prune(self, before: float) -> int:
        """Forget exported rows of incidents resolved before ``before`` (wall time)."""
        db = self._db()
        with db:
            n = db.execute(
                "DELETE FROM deliveries WHERE exported = 1 AND updated_at < ? AND state != 'pending' AND id IN "
                "(SELECT id FROM deliveries WHERE alert_status = 'resolved' AND updated_at < ?)",
                (before, before)).rowcount
            db.execute("DELETE FROM reminders WHERE last_at < ?", (before,))
        return n


def read_status(directory: str, name: str = "outbox.sqlite3") -> dict[str, dict] | None:
    """Per receiver, from the delivery log read only (None when there is none): deliveries by state, the last
    sent, and what its circuit breaker says (``up``, or ``down`` since when and why)."""
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return None
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        out: dict[str, dict] = {}
        for receiver, state, n, last in db.execute(
                "SELECT receiver, state, count(*), max(sent_at) FROM deliveries GROUP BY receiver, state"):
            r = out.setdefault(receiver, {"states": {}, "last_sent": None, "breaker": "up", "since": None,
                                          "last_error": ""})
            r["states"][state] = n
            if last is not None:
                r["last_sent"] = max(r["last_sent"] or 0.0, last)
        try:
            rows = db.execute("SELECT receiver, state, since, last_error FROM receiver_state").fetchall()
        except sqlite3.OperationalError:             # a log no breaker has written to yet
            rows = []
        for receiver, state, since, error in rows:
            r = out.setdefault(receiver, {"states": {}, "last_sent": None})
            r.update(breaker=state, since=since, last_error=error)
        return out
    finally:
        db.close()
