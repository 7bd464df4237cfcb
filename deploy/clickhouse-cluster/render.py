"""Render gpufleet's schema migrations (sql/migrations) as ON CLUSTER migrations for a ClickHouse cluster.

    python deploy/clickhouse-cluster/render.py            # writes deploy/clickhouse-cluster/migrations/*.sql
    python deploy/clickhouse-cluster/render.py --check    # exit 1 if the files there are not current
    python deploy/clickhouse-cluster/render.py --plain DIR    # the sharded layout without replication, into DIR

Each single-server migration NNNN_name.sql becomes migrations/NNNN_name.sql here, statement by statement:
- every CREATE, ALTER and DROP runs ON CLUSTER '{cluster}';
- MergeTree-family tables become their Replicated twins, at /clickhouse/tables/{shard}/{database}/<table>
  with replica '{replica}' (the server's macros), deduplicating repeated inserts as the single-server tables do;
- each table gets a Distributed twin, <table>_all, over every shard, sharded by a column of its sorting key
  (the GPU, node, job or alert where it has one: all versions of a row go to one shard, so FINAL stays exact,
  and a GPU's rows stay together); columns added to a table are added to its twin;
- each file ends by recording itself in schema_migrations (replicated to every node) with the version, name
  and checksum of the single-server migration, so `gpufleet db status` reads it as applied and the commands
  that migrate find nothing to do.
0000_schema_migrations.sql creates that table. See README.md here for how to apply them.

``--plain`` renders the same layout with the single-server engines in place of the replicated ones and no
``ON CLUSTER`` (which needs ZooKeeper or ClickHouse Keeper): shards without replicas, each file applied to every
node in turn. That is the layout the tests run on two local shards (tests/integration/test_cluster.py).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from gpufleet.sql import Migration, migrations

HERE = Path(__file__).resolve().parent
OUT = HERE / "migrations"
CLUSTER = "ON CLUSTER '{cluster}'"
ENGINES = ("ReplacingMergeTree", "AggregatingMergeTree", "SummingMergeTree", "MergeTree")

SCHEMA_MIGRATIONS = f"""CREATE TABLE IF NOT EXISTS schema_migrations {CLUSTER}
(
    version     UInt32,
    name        String,
    checksum    String,
    applied_at  DateTime('UTC') DEFAULT now()
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all/{{database}}/schema_migrations', '{{replica}}')
ORDER BY version"""

_CREATE_TABLE = re.compile(r"^CREATE TABLE IF NOT EXISTS (\w+)\s*\(", re.S)
_CREATE_VIEW = re.compile(r"^CREATE (MATERIALIZED VIEW|VIEW) IF NOT EXISTS (\w+)")
_ALTER = re.compile(r"^ALTER TABLE (\w+) ")
_DROP = re.compile(r"^DROP (TABLE|VIEW) IF EXISTS (\w+)")
_ENGINE = re.compile(r"ENGINE = (" + "|".join(ENGINES) + r")(?:\(([^)]*)\))?")
_ORDER = re.compile(r"ORDER BY \(?([\w ,]+)\)?")
SHARD_BY = ("gpu_uuid", "node", "job", "id")   # rows of one GPU (node, job, alert) together, on one shard


def _table(statement: str, name: str, replicated: bool = True) -> list[str]:
    m = _ENGINE.search(statement)
    if m is None:
        raise ValueError(f"table {name}: no MergeTree-family engine to replicate")
    on = f" {CLUSTER}" if replicated else ""
    if replicated:
        args = [f"'/clickhouse/tables/{{shard}}/{{database}}/{name}'", "'{replica}'"] + \
            ([m.group(2)] if m.group(2) else [])
        local = statement[:m.start()] + f"ENGINE = Replicated{m.group(1)}({', '.join(args)})" + statement[m.end():]
        local = _CREATE_TABLE.sub(f"CREATE TABLE IF NOT EXISTS {name}{on}\n(", local, count=1)
        local = local.replace("non_replicated_deduplication_window", "replicated_deduplication_window")
    else:
        local = statement
    order = _ORDER.search(statement)
    if order is None:
        raise ValueError(f"table {name}: no ORDER BY to shard by")
    key = [c.strip() for c in order.group(1).split(",")]
    shard_by = next((c for c in SHARD_BY if c in key), key[0])
    twin = (f"CREATE TABLE IF NOT EXISTS {name}_all{on} AS {name}\n"
            f"ENGINE = Distributed('{{cluster}}', currentDatabase(), {name}, cityHash64({shard_by}))")
    return [local, twin]


def render_statement(statement: str, tables: set[str], replicated: bool = True) -> list[str]:
    """One single-server statement as the statements of the cluster migration; ``tables`` (the tables created
    so far) is updated. Without ``replicated``: the single-server engines, no ON CLUSTER (``--plain``)."""
    on = f" {CLUSTER}" if replicated else ""
    m = _CREATE_TABLE.match(statement)
    if m:
        tables.add(m.group(1))
        return _table(statement, m.group(1), replicated)
    m = _CREATE_VIEW.match(statement)
    if m:
        return [statement.replace(m.group(0), f"{m.group(0)}{on}", 1)]
    m = _ALTER.match(statement)
    if m:
        name, rest = m.group(1), statement[m.end():]
        if replicated:
            rest = rest.replace("non_replicated_deduplication_window", "replicated_deduplication_window")
        out = [f"ALTER TABLE {name}{on} {rest}"]
        if name in tables and rest.startswith(("ADD COLUMN", "DROP COLUMN", "MODIFY COLUMN", "RENAME COLUMN")):
            out.append(f"ALTER TABLE {name}_all{on} {rest}")
        return out
    m = _DROP.match(statement)
    if m:
        out = [f"{m.group(0)}{on}{statement[m.end():]}"]
        if m.group(1) == "TABLE" and m.group(2) in tables:
            tables.discard(m.group(2))
            out.insert(0, f"DROP TABLE IF EXISTS {m.group(2)}_all{on}")
        return out
    if statement.startswith("INSERT INTO"):
        # a backfill: it runs on the node clickhouse-client is connected to (its shard); on a new cluster the
        # source is empty, on one with data run it on a replica of every shard
        return [statement]
    raise ValueError(f"no cluster form for: {statement[:80]}")


def render(m: Migration, tables: set[str], replicated: bool = True) -> str:
    head = (f"-- {m.name} for a ClickHouse cluster, rendered from sql/migrations/{m.name}.sql by "
            "deploy/clickhouse-cluster/render.py:\n-- do not edit; apply in order (README.md here).\n\n")
    body = [s for statement in m.statements for s in render_statement(statement, tables, replicated)]
    body.append(f"INSERT INTO schema_migrations (version, name, checksum) VALUES ({m.version}, '{m.name}', "
                f"'{m.checksum}')")
    return head + ";\n\n".join(body) + ";\n"


PLAIN_SCHEMA_MIGRATIONS = SCHEMA_MIGRATIONS.replace(f" {CLUSTER}", "").replace(
    "ReplicatedReplacingMergeTree('/clickhouse/tables/all/{database}/schema_migrations', '{replica}')",
    "ReplacingMergeTree")


def rendered(replicated: bool = True) -> dict[str, str]:
    """File name -> contents of every cluster migration (without ``replicated``: the ``--plain`` layout)."""
    files = {"0000_schema_migrations.sql": "-- The table every cluster migration records itself in (on every node)."
                                          "\n\n" + (SCHEMA_MIGRATIONS if replicated else PLAIN_SCHEMA_MIGRATIONS) +
                                          ";\n"}
    tables: set[str] = set()
    for m in migrations():
        files[f"{m.name}.sql"] = render(m, tables, replicated)
    return files


def statements(text: str) -> list[str]:
    """The statements of a rendered file, in order."""
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in text.split(";") if s.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check that the files are current")
    ap.add_argument("--plain", metavar="DIR",
                    help="write the layout with the single-server engines and no ON CLUSTER into DIR instead")
    args = ap.parse_args()
    if args.plain:
        out = Path(args.plain)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in rendered(replicated=False).items():
            (out / name).write_text(text)
        print(f"{len(rendered(replicated=False))} plain cluster migrations in {out}")
        return 0
    files = rendered()
    stale = [n for n, text in files.items() if not (OUT / n).is_file() or (OUT / n).read_text() != text]
    extra = [p.name for p in OUT.glob("*.sql") if p.name not in files] if OUT.is_dir() else []
    if args.check:
        for name in stale + extra:
            print(f"{OUT / name}: not current; run python {Path(__file__).relative_to(Path.cwd())}"
                  if Path.cwd() in Path(__file__).parents else f"{OUT / name}: not current", file=sys.stderr)
        return 1 if stale or extra else 0
    OUT.mkdir(exist_ok=True)
    for name in stale:
        (OUT / name).write_text(files[name])
    for name in extra:
        (OUT / name).unlink()
    print(f"{len(files)} cluster migrations in {OUT} ({len(stale)} written, {len(extra)} removed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
