"""Commands that read never write: no database created, nothing migrated; a missing database is named."""
import os
import subprocess
import sys
import uuid

import pytest

from gpufleet.sql.store import Store

pytestmark = pytest.mark.integration


def gpufleet(*args, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=cwd)


def test_reading_an_embedded_store_that_does_not_exist_creates_nothing(tmp_path):
    where = tmp_path / "nowhere"
    for args in (["summary"], ["sql", "SHOW DATABASES"], ["db", "status"], ["serve", "--port", "0"],
                 ["bill", "--month", "2026-01"], ["bill", "capacity", "--month", "2026-01"],
                 ["bill", "export", "--month", "2026-01", "--format", "focus-csv", "-o", str(tmp_path / "f.csv")],
                 ["bill", "rerate", "--from", "2026-01", "--to", "2026-02", "--reason", "x"],
                 ["bill", "close", "--month", "2026-01"]):
        out = gpufleet(*args, "--dsn", f"chdb://{where}")
        if args[0] == "db":
            assert out.returncode == 0 and "pending" in out.stdout and "does not exist" not in out.stderr
        else:
            assert out.returncode == 2, out.stderr
            assert len(out.stderr.strip().splitlines()) == 1 and "gpufleet db migrate" in out.stderr, out.stderr
        assert not where.exists(), f"{args} created the store"


def test_reading_a_database_that_does_not_exist_names_it_and_creates_nothing(clickhouse_url):
    missing = f"nosuch_{uuid.uuid4().hex[:8]}"
    for args in (["summary"], ["sql", "SELECT 1"], ["bill", "--month", "2026-01"],
                 ["bill", "export", "--month", "2026-01", "--format", "focus-csv", "-o", os.devnull],
                 ["bill", "rerate", "--from", "2026-01", "--to", "2026-02", "--reason", "x"],
                 ["bill", "close", "--month", "2026-01"]):
        out = gpufleet(*args, "--dsn", clickhouse_url, "--database", missing)
        assert out.returncode == 2 and missing in out.stderr and "Traceback" not in out.stderr, out.stderr
    server = Store.connect(clickhouse_url, "system")
    try:
        assert missing not in {name for (name,) in server.query("SHOW DATABASES")}
    finally:
        server.close()


def test_a_database_without_the_schema_is_not_migrated_by_a_read(clickhouse_url):
    name = f"bare_{uuid.uuid4().hex[:8]}"
    bare = Store.connect(clickhouse_url, name, create=True)
    try:
        for args in (["summary"], ["bill", "--month", "2026-01"], ["bill", "capacity", "--month", "2026-01"],
                     ["bill", "close", "--month", "2026-01"]):
            out = gpufleet(*args, "--dsn", clickhouse_url, "--database", name)
            assert out.returncode == 2 and "gpufleet db migrate" in out.stderr, out.stderr
        assert bare.query(f"SELECT count() FROM system.tables WHERE database = '{name}'") == [(0,)]
        assert gpufleet("db", "migrate", "--dsn", clickhouse_url, "--database", name).returncode == 0
        out = gpufleet("summary", "--dsn", clickhouse_url, "--database", name)
        assert out.returncode == 0 and "Utilization by pool" in out.stdout, out.stderr
    finally:
        bare.drop()
        bare.close()


def test_the_summary_shows_when_each_decision_was_made_the_pool_its_request_and_why(clickhouse_url):
    """A scale action reads against the GPUs present, within what the pool has; demand beyond it is a request,
    and the reason and the time the decision was made are shown (make demo prints this table)."""
    name = f"summary_{uuid.uuid4().hex[:8]}"
    store = Store.connect(clickhouse_url, name, create=True)
    try:
        store.migrate()
        at = 1764374400                                              # 2025-11-29 00:00 UTC
        store.write("forecasts", ["pool", "made_at", "step_s", "ts", "demand_gpus", "p10", "p90"],
                    [("h100", at, 3600, at + 3600 * h, 20.0 + h, 18.0, 30.0 + h) for h in range(1, 4)])
        columns = ["pool", "at", "action", "current_gpus", "target_gpus", "rented_gpus", "reason", "dry_run",
                   "lead_time_s", "capacity_gpus", "request_gpus", "request_from", "request_until", "request_p90"]
        store.write("scale_events", columns,
                    [("h100", at - 3600, "scale_up", 24, 32, 22, "Scale up from 24 to 32 GPUs: x.", 0, 900, 32, 0, 0,
                      0, 0.0),
                     ("h100", at, "hold", 32, 32, 23, "Hold at 32 GPUs: capped at the pool's 32 GPUs.", 0, 900, 32, 8,
                      at + 3600, at + 4 * 3600, 33.0)])
        out = gpufleet("summary", "--dsn", clickhouse_url, "--database", name)
        assert out.returncode == 0, out.stderr
        section = out.stdout.split("Demand forecast")[1].splitlines()
        header, row = section[1].split(), section[3].split()
        got = dict(zip(header, [row[0], " ".join(row[1:3]), row[3], row[4], " ".join(row[5:7]), *row[7:12],
                                " ".join(row[12:])]))
        assert got["decided"] == "2025-11-29 00:00" and got["forecast_made"] == "2025-11-29 00:00", out.stdout
        assert (got["present"], got["capacity"], got["rented"], got["target"]) == ("32", "32", "23", "32"), out.stdout
        assert got["action"] == "hold" and got["peak_p90"] == "33", out.stdout
        assert got["capacity_request"] == "+8 from 11-29 01:00 to 11-29 04:00", out.stdout
        why = out.stdout.split("Why (the latest scale decision of each pool)")[1].splitlines()
        assert why[3].split(None, 3) == ["h100", "2025-11-29", "00:00", "Hold at 32 GPUs: capped at the pool's 32 "
                                         "GPUs."], out.stdout
    finally:
        store.drop()
        store.close()
