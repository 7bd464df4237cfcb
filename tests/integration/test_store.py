"""The store on the embedded engine and on a ClickHouse server: migrations and idempotent rows."""
import time

import pytest

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.sql import Insert, StoreError, migrations
from gpufleet.streams import embedded
from gpufleet.streams.pipeline import Pipeline
from gpufleet.streams.rollups import GPU_ROLLUP
from gpufleet.streams.sink import Sink

pytestmark = pytest.mark.integration

POOL_TOTALS = """SELECT pool, sum(gpus), round(sum(util_pct * gpus), 3), sum(rented_gpus)
                 FROM pool_usage_1m GROUP BY pool ORDER BY pool"""
TENANT_TOTALS = ("SELECT tenant, sum(gpus), round(sum(util_pct * gpus), 3) FROM tenant_usage_1m "
                 "GROUP BY tenant ORDER BY tenant")


@pytest.fixture(params=["embedded", "server"])
def store(request):
    return request.getfixturevalue(f"{request.param}_store")


def rollup_rows():
    pipeline = Pipeline()
    for m in Simulation(FleetSpec(nodes=2, gpus_per_node=4, hours=0.5, seed=2, faults_per_kind=0)).messages():
        pipeline.submit(m, "sim")
    pipeline.flush()
    return pipeline.out.rows


def test_migrate_is_idempotent_and_recorded(store):
    assert store.migrate() == []                      # the fixture already applied everything
    assert [v for v, _ in store.applied()] == [m.version for m in migrations()]
    tables = {r[0] for r in store.query("SHOW TABLES")}
    assert {"gpu_samples", "gpu_rollup_1m", "usage_gpu_1m", "pool_usage_1m", "tenant_usage_1m",
            "idle_windows", "alerts", "dead_letters", "schema_migrations"} <= tables


def test_an_edited_migration_is_refused(store):
    store.command("INSERT INTO schema_migrations (version, name, checksum) VALUES (1, '0001_telemetry', 'x')")
    store.command("OPTIMIZE TABLE schema_migrations FINAL")
    with pytest.raises(StoreError, match="differs from the one applied"):
        store.migrate()


def test_raw_samples_have_a_ttl_and_codecs(store):
    ddl = store.query("SHOW CREATE TABLE gpu_samples")[0][0]
    assert "TTL inserted_at + toIntervalDay(14)" in ddl and "DoubleDelta" in ddl and "Gorilla" in ddl
    assert store.set_raw_retention(30) and not store.set_raw_retention(30)
    assert "TTL inserted_at + toIntervalDay(30)" in store.query("SHOW CREATE TABLE gpu_samples")[0][0]


def test_a_batch_inserted_again_after_the_table_but_not_its_views_was_written_completes_the_views(store):
    rows = rollup_rows()[GPU_ROLLUP]
    batch = store.prepare("gpu_rollup_1m", GPU_ROLLUP.columns, rows)
    # the server goes down mid-insert: the table is written, the materialized views are not
    store.command("DETACH TABLE usage_gpu_1m_mv")
    store.insert(batch)
    store.command("ATTACH TABLE usage_gpu_1m_mv")
    assert store.query(POOL_TOTALS) == []
    store.insert(batch)                                    # the retry: the very same block
    assert store.query("SELECT count() FROM gpu_rollup_1m") == [(len(rows),)]
    assert store.query("SELECT sum(gpus) FROM pool_usage_1m") == [(len(rows),)]
    store.insert(batch)                                    # and once more: nothing changes anywhere
    assert store.query("SELECT count() FROM gpu_rollup_1m") == [(len(rows),)]
    assert store.query("SELECT sum(gpus) FROM pool_usage_1m") == [(len(rows),)]


def test_rows_written_twice_or_recut_are_stored_once(store):
    rows = rollup_rows()
    sink = Sink(store)
    sink.add(rows)
    sink.flush()
    once = store.query(POOL_TOTALS), store.query(TENANT_TOTALS), store.query("SELECT count() FROM gpu_rollup_1m")
    assert once[2][0][0] == len(rows[GPU_ROLLUP]) > 0 and once[0]
    # the same batch again, then the same rows cut into other batches, in another order
    sink.add(rows)
    sink.flush()
    gpu_rows = rows[GPU_ROLLUP]
    for lo in range(0, len(gpu_rows), 37):
        sink.add({GPU_ROLLUP: list(reversed(gpu_rows[lo:lo + 37]))})
        sink.flush()
    again = store.query(POOL_TOTALS), store.query(TENANT_TOTALS), store.query("SELECT count() FROM gpu_rollup_1m")
    assert again == once


def test_the_same_rows_written_by_two_workers_at_once_change_no_total(store):
    rows = rollup_rows()[GPU_ROLLUP]
    store.write("gpu_rollup_1m", GPU_ROLLUP.columns, rows)
    once = store.query(POOL_TOTALS), store.query(TENANT_TOTALS)
    assert once[0] and once[1]
    # both checked what was stored before either wrote: the second writes the rows again, in other blocks
    for lo in range(0, len(rows), 50):
        store.insert(Insert("gpu_rollup_1m", GPU_ROLLUP.columns, rows[lo:lo + 50]))
    assert (store.query(POOL_TOTALS), store.query(TENANT_TOTALS)) == once
    assert store.query("SELECT count() FROM gpu_rollup_1m FINAL") == [(len(rows),)]


def test_an_embedded_run_fills_every_table(store):
    pipeline = Pipeline()
    recent = (time.time() // 86400 - 1) * 86400
    sim = Simulation(FleetSpec(nodes=2, gpus_per_node=4, hours=2, seed=5, faults_per_kind=1, start=recent))
    embedded.run(embedded.dict_source(sim.messages()), pipeline, Sink(store, max_rows=5000))
    counts = dict(store.query("SELECT table, sum(rows) FROM system.parts WHERE active AND database = "
                              "currentDatabase() GROUP BY table"))
    for table in ("gpu_samples", "gpu_rollup_1m", "node_rollup_1m", "usage_gpu_1m"):
        assert counts.get(table, 0) > 0, table
    assert counts["gpu_samples"] == 2 * 4 * 2 * 720
    assert counts["gpu_rollup_1m"] == 2 * 4 * 120
    gpus_per_minute = store.query("SELECT DISTINCT sum(gpus) FROM pool_usage_1m GROUP BY minute")
    assert gpus_per_minute == [(8,)]


def test_a_batch_of_many_keys_costs_one_stored_keys_query_and_keeps_only_new_rows(store, monkeypatch):
    from gpufleet.sql import store as store_module
    template = rollup_rows()[GPU_ROLLUP][0]
    uuid_at = GPU_ROLLUP.columns.index("gpu_uuid")
    # more GPUs than the query lists by value: their range is asked for instead
    rows = [template[:uuid_at] + (f"GPU-{i:05d}",) + template[uuid_at + 1:]
            for i in range(store_module.MAX_IN_VALUES + 500)]
    store.write("gpu_rollup_1m", GPU_ROLLUP.columns, rows[::2])
    queries = []
    real = store.query
    monkeypatch.setattr(store, "query", lambda sql, parameters=None: queries.append(sql) or real(sql, parameters))
    batch = store.prepare("gpu_rollup_1m", GPU_ROLLUP.columns, rows + rows[:10])
    assert len(queries) == 1 and "BETWEEN" in queries[0]
    assert sorted(batch.rows) == sorted(rows[1::2])
    store.insert(batch)
    assert store.query("SELECT count(), uniqExact(gpu_uuid) FROM gpu_rollup_1m") == [(len(rows), len(rows))]


def test_processes_migrating_one_new_database_at_once_apply_each_migration_once(clickhouse_url):
    # two workers started together on a new database: migration 0005 drops what 0002 made, so two
    # processes interleaving them failed ("Unknown table expression identifier") or revived dropped views
    import threading
    import uuid

    from gpufleet.sql.store import Store

    database = f"t_{uuid.uuid4().hex[:12]}"
    stores = [Store.connect(clickhouse_url, database, create=True) for _ in range(4)]
    done, errors = [], []

    def run(store):
        try:
            done.append(store.migrate())
        except Exception as err:     # noqa: BLE001 (the assertion below reports it)
            errors.append(err)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        applied = [name for names in done for name in names]
        assert sorted(applied) == sorted(m.name for m in migrations())        # each applied by one process
        tables = {name for (name,) in stores[0].query(
            "SELECT name FROM system.tables WHERE database = %(db)s", {"db": database})}
        assert "pool_rollup_1m_mv" not in tables and "schema_migrations_lock" not in tables
        assert [v for v, _ in stores[0].applied()] == [m.version for m in migrations()]
    finally:
        stores[0].drop()
        for s in stores:
            s.close()
