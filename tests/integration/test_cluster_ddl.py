"""The cluster DDL (deploy/clickhouse-cluster): rendered from the current migrations, and every statement parsed
by the ClickHouse engine (formatQuery). A cluster with ZooKeeper or Keeper is needed to run it, not to parse it."""
import importlib.util
import re

import pytest

from gpufleet.sql import migrations

pytestmark = pytest.mark.integration


def render_module():
    from conftest import ROOT
    path = ROOT / "deploy" / "clickhouse-cluster" / "render.py"
    spec = importlib.util.spec_from_file_location("render", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def statements(text: str) -> list[str]:
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in text.split(";") if s.strip()]


def test_the_committed_cluster_migrations_are_the_rendering_of_the_current_ones():
    render = render_module()
    files = render.rendered()
    on_disk = {p.name: p.read_text() for p in render.OUT.glob("*.sql")}
    assert on_disk == files, "run python deploy/clickhouse-cluster/render.py"
    assert sorted(files)[1:] == [f"{m.name}.sql" for m in migrations()]


def test_every_cluster_statement_parses_on_the_engine_and_runs_on_the_cluster(embedded_store):
    render = render_module()
    count = 0
    for name, text in render.rendered().items():
        for s in statements(text):
            (formatted,), = embedded_store.query("SELECT formatQuery(%(q)s)", {"q": s})
            assert formatted, (name, s)
            count += 1
            if s.startswith(("CREATE", "ALTER", "DROP")):
                assert "ON CLUSTER `{cluster}`" in formatted, (name, s)     # as the parser read it
            if "ENGINE" in s:
                assert re.search(r"ENGINE = (Replicated\w*MergeTree|Distributed)\(", s), (name, s)
    assert count > 60


def test_each_cluster_migration_records_itself_as_the_single_server_one_would():
    render = render_module()
    files = render.rendered()
    for m in migrations():
        last = statements(files[f"{m.name}.sql"])[-1]
        assert last == (f"INSERT INTO schema_migrations (version, name, checksum) VALUES ({m.version}, '{m.name}', "
                        f"'{m.checksum}')")
    ledger = statements(files["0008_billing_ledger.sql"])
    assert any("ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/billing_ledger'" in s
               for s in ledger)
    assert any(s.startswith("CREATE TABLE IF NOT EXISTS billing_ledger_all") and "cityHash64(gpu_uuid)" in s
               for s in ledger)
    assert any(s.startswith("ALTER TABLE gpu_rollup_1m_all ON CLUSTER") and "rented_ms" in s for s in ledger)


def test_the_plain_rendering_is_the_same_layout_without_replication(embedded_store):
    render = render_module()
    plain, replicated = render.rendered(replicated=False), render.rendered()
    assert sorted(plain) == sorted(replicated)
    for name, text in plain.items():
        ours, theirs = statements(text), statements(replicated[name])
        assert len(ours) == len(theirs), name                   # statement for statement
        for s in ours:
            assert "ON CLUSTER" not in s and "Replicated" not in s, (name, s)
            (formatted,), = embedded_store.query("SELECT formatQuery(%(q)s)", {"q": s})
            assert formatted
    assert any("ENGINE = Distributed('{cluster}', currentDatabase(), billing_ledger, cityHash64(gpu_uuid))" in s
               for s in statements(plain["0008_billing_ledger.sql"]))
