"""A store double for unit tests of what writes to the store: rows kept in memory, outages on demand.

Not a database: every query it is asked returns no row (so a writer finds no month closed and nothing stored at
other prices). Tests of SQL, of idempotent writes and of the materialized views
talk to the real ClickHouse engine (tests/integration).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from . import Insert, StoreUnavailable


class MemoryStore:
    def __init__(self) -> None:
        self.rows: dict[str, list[tuple]] = {}
        self.unavailable = 0                      # the next this-many writes fail as if the store were down
        self.before_write: Callable[[str], None] | None = None   # called first (to block, or to record order)

    def prepare(self, table: str, columns: Sequence[str], rows: Sequence[tuple], dedup: bool = True) -> Insert:
        return Insert(table, tuple(columns), list(rows))

    def insert(self, batch: Insert) -> int:
        if self.before_write is not None:
            self.before_write(batch.table)
        if self.unavailable:
            self.unavailable -= 1
            raise StoreUnavailable(f"{batch.table}: the memory store is down (as asked)")
        self.rows.setdefault(batch.table, []).extend(batch.rows)
        return len(batch.rows)

    def query(self, sql: str, parameters: dict | None = None) -> list[tuple]:
        return []

    def table(self, name: str) -> str:
        return name

    def write(self, table: str, columns: Sequence[str], rows: Sequence[tuple], dedup: bool = True) -> int:
        return self.insert(self.prepare(table, columns, rows, dedup))

    def count(self, table: str) -> int:
        return len(self.rows.get(table, ()))
