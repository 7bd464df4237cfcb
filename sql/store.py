"""The ClickHouse store, through clickhouse-connect: the only module that imports it.

One DSN names the store: ``chdb:///path/to/dir`` for the engine embedded in
this process (the default), ``http://host:8123`` or ``https://...`` for a
server. Rows are written idempotently: for tables marked ``dedup`` the rows
whose key (the table's ORDER BY) is already stored are dropped first, so a
batch written again after a crash or a retry changes no total, and the
materialized views that feed on the table see each row once.

On a sharded cluster (``store.cluster``, the schema of deploy/clickhouse-cluster) rows are written through each
table's ``Distributed`` twin, ``<table>_all``, which sends every row to the shard of its key and returns only once
every shard has it (``distributed_foreground_insert``: a shard down is a failure to retry, never rows queued on
one node's disk); the stored keys are read through it too, so the idempotent check spans the shards.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import contextmanager
from operator import itemgetter

import clickhouse_connect
from clickhouse_connect.driver.exceptions import ClickHouseError, DatabaseError, OperationalError

from . import Insert, StoreBusy, StoreError, StoreMissing, StoreUnavailable, migrations, parse_dsn

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_chdb_lock = threading.Lock()


# Above this many distinct values of a key column, the stored-keys query asks for their range, not the list
# (the query stays short, one per table per batch; what the range brings back beyond the batch is dropped).
MAX_IN_VALUES = 1000

# Inserts are synchronous: a write returns once the rows are in the table (some servers, chdb's among
# them, buffer inserts asynchronously by default).
SETTINGS = {"async_insert": 0}
# ... and on a cluster, once every shard has its rows
CLUSTER_INSERT = {"distributed_foreground_insert": 1}


# -- who holds an embedded store ----------------------------------------------------------------------------
# One process at a time opens a chdb directory. Each gpufleet process that opens one says so in HOLDER there (pid,
# command, since; ``gpufleet serve`` adds its URL), so that another is told who holds it, and ``report`` and
# ``top`` can read through a running ``serve`` instead.
HOLDER = "gpufleet-holder.json"
_held: dict[str, int] = {}            # directory -> stores of this process open on it


def holder(path: str) -> dict | None:
    """The live process holding the embedded store at ``path``, as it recorded itself, or None."""
    try:
        with open(os.path.join(path, HOLDER), encoding="utf-8") as f:
            found = json.load(f)
        os.kill(int(found["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if isinstance(found, dict) else None


def _record_holder(path: str, **extra) -> None:
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    prog = "gpufleet" if prog == "__main__.py" else prog             # python -m gpufleet
    record = {"pid": os.getpid(), "command": " ".join([prog, *sys.argv[1:]])[:300],
              "since": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"), **extra}
    try:
        fd, tmp = tempfile.mkstemp(dir=path, prefix=".holder-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(tmp, os.path.join(path, HOLDER))
    except OSError:
        pass                              # a read-only directory: nobody is told, nothing breaks


def _hold(path: str) -> None:
    _held[path] = _held.get(path, 0) + 1
    if _held[path] == 1:
        _record_holder(path)


def _release(path: str) -> None:
    _held[path] = _held.get(path, 1) - 1
    if _held[path] <= 0:
        _held.pop(path, None)
        found = holder(path)
        if found is not None and found.get("pid") == os.getpid():
            try:
                os.unlink(os.path.join(path, HOLDER))
            except OSError:
                pass


def busy_message(path: str, found: dict | None) -> str:
    who = (f"pid {found['pid']} ({found.get('command', '?')}, since {found.get('since', '?')})" if found
           else "another process")
    return (f"the embedded store at {path} is open in {who}; one process at a time opens an embedded store: "
            "wait for it or stop it, or run a ClickHouse server (store.dsn http://host:8123) for several")


@contextmanager
def _stderr_captured():
    """chdb prints its own errors on file descriptor 2 (C++): kept aside and handed back as text."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        box: list[str] = []
        try:
            yield box
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            box.append(tmp.read().decode("utf-8", "replace"))


def _chdb_client(target: dict, database: str | None):
    path = target["path"]
    with _stderr_captured() as said:
        try:
            if database:
                return clickhouse_connect.get_client(dsn="chdb://" + path, settings=SETTINGS, database=database)
            return clickhouse_connect.get_client(dsn="chdb://" + path, settings=SETTINGS)
        except Exception as err:
            failed: Exception | None = err
        else:
            failed = None
    text = "".join(said)
    if "Cannot lock file" in text or "Cannot lock file" in str(failed):
        found = holder(path)
        raise StoreBusy(busy_message(path, found), found) from None
    if text.strip():
        sys.stderr.write(text)
    assert failed is not None
    raise failed


def _client(target: dict, database: str | None, password: str | None, create: bool):
    try:
        if target["kind"] == "chdb":
            if create:
                os.makedirs(target["path"], exist_ok=True)
            elif not os.path.isdir(target["path"]):
                raise StoreMissing(f"no embedded store at {target['path']}: create it with `gpufleet db migrate` "
                                   "(or `gpufleet demo`)")
            return _chdb_client(target, database)
        return clickhouse_connect.get_client(
            host=target["host"], port=target["port"], secure=target["secure"], username=target["username"],
            password=password if password is not None else target["password"], database=database or "",
            connect_timeout=5, send_receive_timeout=60, autogenerate_session_id=False, settings=SETTINGS)
    except OperationalError as err:
        raise StoreUnavailable(f"cannot reach ClickHouse: {err}") from None
    except DatabaseError as err:
        raise StoreError(str(err)) from None


class Store:
    """A ClickHouse database holding gpufleet's tables."""

    def __init__(self, client, database: str, target: dict, cluster: str | None = None):
        self.client, self.database, self.target, self.cluster = client, database, target, cluster
        self._keys: dict[str, list[tuple[int, str, bool]]] = {}
        self._holds = False                  # an embedded store this object counts as held by this process

    @classmethod
    def connect(cls, dsn: str, database: str = "gpufleet", password: str | None = None,
                create: bool = False, cluster: str | None = None) -> Store:
        """Open ``database`` in the store at ``dsn``.

        With ``create`` the database (and an embedded store's directory) is created if needed: only
        the commands that write (``db migrate``, ``demo``, ``replay``, the workers) ask for it. Without
        it a missing database raises :class:`StoreMissing` and nothing is created. ``cluster``: the sharded
        cluster the server at ``dsn`` belongs to (``store.cluster``): rows go through the ``_all`` tables.
        """
        if not _IDENT.match(database):
            raise ValueError(f"database name {database!r} is not a plain identifier")
        target = parse_dsn(dsn)
        bare = _client(target, None, password, create)
        try:
            if create:
                bare.command(f"CREATE DATABASE IF NOT EXISTS {database}")
            elif not bare.command(f"EXISTS DATABASE {database}"):
                raise StoreMissing(f"database {database} does not exist at {_where(target)}: create it with "
                                   f"`gpufleet db migrate --database {database}`")
        except (OperationalError, DatabaseError) as err:
            raise StoreUnavailable(f"cannot reach ClickHouse: {err}") from None
        finally:
            if target["kind"] != "chdb":
                bare.close()
        store = cls(_client(target, database, password, create), database, target, cluster)
        if target["kind"] == "chdb":
            _hold(target["path"])
            store._holds = True
        return store

    def announce(self, url: str) -> None:
        """An embedded store's holder serves on ``url`` (``gpufleet serve``): ``report`` and ``top`` read through it."""
        if self.target["kind"] == "chdb":
            _record_holder(self.target["path"], url=url)

    def require_schema(self) -> None:
        """Refuse a database that no migration has touched, or one behind this gpufleet's schema."""
        have = {v for v, _ in self.applied()} if self.query("EXISTS TABLE schema_migrations")[0][0] else set()
        missing = [m.name for m in migrations() if m.version not in have]
        if missing:
            raise StoreMissing(f"database {self.database} lacks migrations {', '.join(missing)}: apply them with "
                               f"`gpufleet db migrate --database {self.database}`")

    # -- plumbing ----------------------------------------------------------
    def _call(self, fn, *args, **kw):
        try:
            if self.target["kind"] == "chdb":
                with _chdb_lock:   # one embedded engine per process
                    return fn(*args, **kw)
            return fn(*args, **kw)
        except OperationalError as err:
            raise StoreUnavailable(f"ClickHouse unavailable: {err}") from None
        except DatabaseError as err:
            text = str(err)
            if "Connection refused" in text or "timed out" in text.lower():
                raise StoreUnavailable(f"ClickHouse unavailable: {text}") from None
            raise StoreError(text) from None
        except ClickHouseError as err:   # bad data on our side, e.g. a value the column cannot hold
            raise StoreError(str(err)) from None

    def command(self, sql: str, parameters: dict | None = None):
        return self._call(self.client.command, sql, parameters=parameters)

    def query(self, sql: str, parameters: dict | None = None) -> list[tuple]:
        return self._call(self.client.query, sql, parameters=parameters).result_rows

    def select(self, sql: str, parameters: dict | None = None) -> tuple[list[str], list[tuple]]:
        """Column names and rows of a query."""
        result = self._call(self.client.query, sql, parameters=parameters)
        return list(result.column_names), result.result_rows

    def select_typed(self, sql: str, parameters: dict | None = None) -> tuple[list[str], list[str], list[tuple]]:
        """Column names, their ClickHouse types (``Nullable(Float32)``, ``Decimal(18, 6)``, ...) and rows."""
        result = self._call(self.client.query, sql, parameters=parameters)
        return list(result.column_names), [t.name for t in result.column_types], result.result_rows

    def records(self, table, where: str = "", parameters: dict | None = None, final: bool = True) -> list:
        """The rows of a registry ``table`` (gpufleet/contracts/tables.py) that ``where`` picks, each a record of
        its columns by name (``table.record``): a read that cannot drift from the table's description."""
        sql = (f"SELECT {', '.join(table.columns)} FROM {self.table(table.name)}{' FINAL' if final else ''}"
               + (f" WHERE {where}" if where else ""))
        return [table.record(*r) for r in self.query(sql, parameters)]

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:   # closing a dead connection is not an error worth reporting
            pass
        if self._holds:
            self._holds = False
            _release(self.target["path"])

    def drop(self) -> None:
        """Drop this database with everything in it."""
        self.command(f"DROP DATABASE IF EXISTS {self.database} SYNC")

    def table(self, name: str) -> str:
        """Where the rows of table ``name`` are written and their keys read: the table, or on a sharded cluster its
        ``Distributed`` twin over every shard."""
        return f"{name}_all" if self.cluster else name

    # -- schema --------------------------------------------------------------
    def migrate(self) -> list[str]:
        """Apply the migrations not applied yet, in order; returns their names. On a cluster nothing is applied
        (the cluster's migrations run on every node first, deploy/clickhouse-cluster/README.md): every one must
        be recorded already."""
        if self.cluster:
            have = ({v for v, _ in self.applied()} if self.query("EXISTS TABLE schema_migrations")[0][0]
                    else set())
            missing = [m.name for m in migrations() if m.version not in have]
            if missing:
                raise StoreMissing(f"database {self.database} on cluster {self.cluster} lacks migrations "
                                   f"{', '.join(missing)}: apply deploy/clickhouse-cluster/migrations on every node "
                                   "first (its README.md)")
            return []
        self.command("CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32, name String, "
                     "checksum String, applied_at DateTime('UTC') DEFAULT now()) "
                     "ENGINE = ReplacingMergeTree ORDER BY version")
        applied = self._applied()
        if all(m.version in applied for m in migrations()):
            self._check_applied(applied)
            return []
        with self._migration_lock():
            return self._apply()

    def _applied(self) -> dict[int, str]:
        return {v: c for v, c in self.query("SELECT version, checksum FROM schema_migrations FINAL")}

    def _check_applied(self, applied: dict[int, str]) -> None:
        for m in migrations():
            if applied.get(m.version, m.checksum) != m.checksum:
                raise StoreError(f"migration {m.name} differs from the one applied to {self.database}; "
                                 "add a new migration instead of editing an applied one")

    @contextmanager
    def _migration_lock(self, wait_s: float = 300.0, stale_s: float = 300.0):
        """One migrating process at a time (two workers started together): creating a table succeeds
        for one caller only; a lock older than ``stale_s`` (its holder died) is broken."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.command("CREATE TABLE schema_migrations_lock (holder String) ENGINE = Memory")
                break
            except StoreError as err:
                if "already exists" not in str(err).lower() and "TABLE_ALREADY_EXISTS" not in str(err):
                    raise
            age = self.query("SELECT dateDiff('second', metadata_modification_time, now()) FROM system.tables "
                             "WHERE database = %(db)s AND name = 'schema_migrations_lock'", {"db": self.database})
            if age and age[0][0] > stale_s:
                self.command("DROP TABLE IF EXISTS schema_migrations_lock")
                continue
            if time.monotonic() > deadline:
                raise StoreError(f"another process has been migrating {self.database} for over {wait_s:.0f} s "
                                 "(table schema_migrations_lock); drop it if no migration is running")
            time.sleep(0.5)
        try:
            yield
        finally:
            self.command("DROP TABLE IF EXISTS schema_migrations_lock")

    def _apply(self) -> list[str]:
        applied = self._applied()
        done = []
        for m in migrations():
            if m.version in applied:
                if applied[m.version] != m.checksum:
                    raise StoreError(f"migration {m.name} differs from the one applied to {self.database}; "
                                     "add a new migration instead of editing an applied one")
                continue
            for statement in m.statements:
                self.command(statement)
            self._call(self.client.insert, "schema_migrations", [(m.version, m.name, m.checksum)],
                       column_names=["version", "name", "checksum"])
            done.append(m.name)
        return done

    def set_raw_retention(self, days: int) -> bool:
        """Keep raw samples ``days`` days from when they were stored; returns whether the TTL changed. On a cluster
        the TTL is set on each shard with the cluster's migrations, not from here (nothing changes)."""
        if self.cluster:
            return False
        ttl = f"inserted_at + toIntervalDay({int(days)})"
        (engine,) = self.query("SELECT engine_full FROM system.tables WHERE database = %(db)s AND name = 'gpu_samples'",
                               {"db": self.database})[0]
        if f"toIntervalDay({int(days)})" in engine and "inserted_at" in engine:
            return False
        self.command(f"ALTER TABLE gpu_samples MODIFY TTL {ttl} SETTINGS materialize_ttl_after_modify = 0")
        return True

    def applied(self) -> list[tuple[int, str]]:
        return self.query("SELECT version, name FROM schema_migrations FINAL ORDER BY version")

    # -- rows ------------------------------------------------------------------
    def _key(self, table: str, columns: Sequence[str]) -> list[tuple[int, str, bool]]:
        """Per key column: its position in the row, its SQL expression (times as integers), whether a time."""
        if table not in self._keys:
            found = self.query("SELECT sorting_key FROM system.tables WHERE database = %(db)s AND name = %(t)s",
                               {"db": self.database, "t": table})
            if not found:
                raise StoreError(f"table {self.database}.{table} does not exist: run `gpufleet db migrate`")
            types = dict(self.query("SELECT name, type FROM system.columns WHERE database = %(db)s AND "
                                    "table = %(t)s", {"db": self.database, "t": table}))
            key = []
            for name in (c.strip() for c in found[0][0].split(",")):
                kind = types[name]
                expr = (f"toUnixTimestamp64Milli({name})" if kind.startswith("DateTime64") else
                        f"toUnixTimestamp({name})" if kind.startswith("DateTime") else name)
                key.append((list(columns).index(name), expr, kind.startswith("DateTime")))
            self._keys[table] = key
        return self._keys[table]

    def stored_keys(self, table: str, columns: Sequence[str], rows: Sequence[tuple]) -> set[tuple]:
        """Keys of ``rows`` already in ``table``, in one range query (the first key column's values, or their
        range when there are many; the other columns' values or time range), whatever the batch's size."""
        return self._stored(table, self._key(table, columns), set(map(self._key_of(table, columns), rows)))

    def key_of(self, table: str, columns: Sequence[str]):
        """A function of a row (in ``columns`` order) giving its key in ``table``, a tuple in key order."""
        return self._key_of(table, columns)

    def _key_of(self, table: str, columns: Sequence[str]):
        """A function of a row giving its key, a tuple in key order."""
        at = [i for i, _, _ in self._key(table, columns)]
        if len(at) == 1:
            (i,) = at
            return lambda row: (row[i],)
        return itemgetter(*at)

    def _stored(self, table: str, key: list[tuple[int, str, bool]], wanted: set[tuple]) -> set[tuple]:
        if not wanted:
            return set()
        params: dict = {}
        conds = []
        for n, (_, expr, is_time) in enumerate(key):
            values = {k[n] for k in wanted}
            if is_time or len(values) > MAX_IN_VALUES:
                params[f"lo{n}"], params[f"hi{n}"] = min(values), max(values)
                conds.append(f"{expr} BETWEEN %(lo{n})s AND %(hi{n})s")
            else:
                params[f"k{n}"] = sorted(values)
                conds.append(f"{expr} IN %(k{n})s")
        exprs = ", ".join(e for _, e, _ in key)
        rows_found = self.query(f"SELECT {exprs} FROM {self.table(table)} WHERE {' AND '.join(conds)}", params)
        return {k for k in map(tuple, rows_found) if k in wanted}

    def prepare(self, table: str, columns: Sequence[str], rows: Sequence[tuple], dedup: bool = True) -> Insert:
        """The rows of ``rows`` not stored yet (for tables keyed with ``dedup``; repeats within the batch
        dropped too), ready to insert, with a token that makes a retry of this very insert idempotent."""
        if dedup and rows:
            keys = list(map(self._key_of(table, columns), rows))
            seen = self._stored(table, self._key(table, columns), set(keys))
            fresh = []
            for k, r in zip(keys, rows):
                if k not in seen:
                    seen.add(k)
                    fresh.append(r)
            rows = fresh
        return Insert(table, tuple(columns), list(rows))

    def insert(self, batch: Insert) -> int:
        """Insert a prepared batch; returns how many rows it holds.

        ClickHouse drops a block it already holds with the same token, per table, the materialized
        views' tables included: a retry after a failure that left the table written but a view not (the
        server went down mid-insert) completes the view instead of losing its share or doubling the table.
        """
        if not batch.rows:
            return 0
        settings = {"insert_deduplication_token": batch.token,
                    "deduplicate_blocks_in_dependent_materialized_views": 1, **(CLUSTER_INSERT if self.cluster else {})}
        columns = list(zip(*batch.rows))        # column-oriented: one column of values per name
        self._call(self.client.insert, self.table(batch.table), columns, column_names=list(batch.columns),
                   settings=settings, column_oriented=True)
        return len(batch.rows)

    def write(self, table: str, columns: Sequence[str], rows: Sequence[tuple], dedup: bool = True) -> int:
        """Insert rows (tuples in ``columns`` order); returns how many were new."""
        return self.insert(self.prepare(table, columns, rows, dedup))


def _where(target: dict) -> str:
    if target["kind"] == "chdb":
        return f"chdb://{target['path']}"
    return f"{'https' if target['secure'] else 'http'}://{target['host']}:{target['port']}"
