"""The table registry (gpufleet/contracts/tables.py) is the schema the migrations make, table for table and column
for column: a column added to a migration and not to the registry, or the other way round, fails here."""
import re

import pytest

from gpufleet.contracts.tables import TABLES

pytestmark = pytest.mark.integration


def engine_full(t) -> str:
    """A described table as ClickHouse reports it (system.tables.engine_full), settings aside."""
    order = t.order_by[0] if len(t.order_by) == 1 else f"({', '.join(t.order_by)})"
    return (t.engine + (f" PARTITION BY {t.partition_by}" if t.partition_by else "") + f" ORDER BY {order}" +
            (f" TTL {t.ttl}" if t.ttl else ""))


def test_every_stored_table_is_described_as_the_migrations_make_it(embedded_store):
    db = {"db": embedded_store.database}
    stored = dict(embedded_store.query("SELECT name, engine_full FROM system.tables WHERE database = %(db)s AND "
                                       "engine LIKE '%%MergeTree'", db))
    assert sorted(stored) == sorted(TABLES)
    for name, t in TABLES.items():
        full = stored[name]
        head, _, settings = full.partition(" SETTINGS ")
        assert head == engine_full(t), name
        found = {s for s in settings.split(", ") if not s.startswith("index_granularity")}
        assert found == set(t.settings), name
        columns = embedded_store.query(
            "SELECT name, type, default_kind, default_expression FROM system.columns WHERE database = %(db)s AND "
            "table = %(t)s ORDER BY position", {**db, "t": name})
        assert [(c.name, c.type, "DEFAULT" if c.default is not None else "", c.default or "") for c in t.schema] == \
            [tuple(c) for c in columns], name
        assert all(c.written or c.default is not None for c in t.schema), name     # left out: it has a default


def test_a_row_is_built_and_read_by_name():
    t = TABLES["billing_months"]
    row = t.row(month="2026-03-01", closed_at=0, reason="x")
    assert row == ("2026-03-01", 0, "x") and t.record(*row).reason == "x"
    with pytest.raises(ValueError, match="billing_months"):
        t.row(month="2026-03-01", closed_at=0)
    with pytest.raises(ValueError, match="billing_months"):
        t.row(month="2026-03-01", closed_at=0, reason="x", extra=1)
    assert re.fullmatch(r"\(?[\w, ]+\)?", ", ".join(TABLES["gpu_samples"].order_by))


def test_rows_are_read_back_by_name_from_the_registry(embedded_store):
    t = TABLES["billing_months"]
    import datetime as dt
    embedded_store.write(t.name, t.columns, [t.row(month=dt.date(2026, 3, 1), closed_at=1000, reason="audit")])
    (got,) = embedded_store.records(t, "month = %(m)s", {"m": dt.date(2026, 3, 1)})
    assert got.reason == "audit" and got.month == dt.date(2026, 3, 1)
