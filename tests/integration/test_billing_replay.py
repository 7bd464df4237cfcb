"""The ledger is idempotent and exact: `gpufleet replay` of the same telemetry (tenant changes and gaps
included) twice into one database, and shuffled within the lateness with repeats into another, gives the same
ledger row for row, read with the queries finance runs; the reconciliation finds nothing to report.
(tests/integration/test_workers.py holds the workers, a SIGKILL mid-period included, to the same ledger.)"""
import datetime as dt
import json
import os
import subprocess
import sys
import uuid

import pytest
from billing_fleet import fleet
from test_parity import shuffled_with_repeats

from gpufleet.collectors.simulator import FleetSpec
from gpufleet.sql.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FINANCE = {
    "ledger": "SELECT * FROM billing_ledger FINAL ORDER BY gpu_uuid, tenant, job, period_start",
    "cost": "SELECT * FROM billing_cost_monthly ORDER BY month, tenant, pool, currency",
    "idle cost": "SELECT * FROM billing_idle_cost ORDER BY month, tenant, team, currency",
    "modes": "SELECT * FROM billing_mode_comparison ORDER BY month, tenant, currency, mode",
}


def replay(path, url, database):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}, "GPUFLEET_STORE__DSN": url,
           "GPUFLEET_STORE__DATABASE": database}
    out = subprocess.run([sys.executable, "-m", "gpufleet", "replay", str(path)], capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stderr


def read(url, database):
    store = Store.connect(url, database)
    try:
        got = {name: json.loads(json.dumps(store.query(sql), default=str)) for name, sql in FINANCE.items()}
        got["stored rows"] = store.query("SELECT count() FROM billing_ledger")[0][0]
        got["reconciliation"] = store.query("SELECT * FROM billing_reconciliation")
        return got
    finally:
        store.close()


def test_replays_twice_and_shuffled_give_the_same_ledger_row_for_row(tmp_path, clickhouse_url):
    start = dt.datetime(2026, 1, 5, tzinfo=dt.UTC).timestamp()
    messages = [m for m, _ in fleet(FleetSpec(nodes=5, gpus_per_node=4, hours=7, seed=4, faults_per_kind=1,
                                              start=start))]
    in_order, shuffled = tmp_path / "telemetry.jsonl", tmp_path / "shuffled.jsonl"
    in_order.write_text("".join(json.dumps(m) + "\n" for m in messages))
    shuffled.write_text("".join(json.dumps(m) + "\n" for m in shuffled_with_repeats(messages, 30.0, seed=5)))
    a, b = f"r_{uuid.uuid4().hex[:8]}", f"r_{uuid.uuid4().hex[:8]}"
    try:
        replay(in_order, clickhouse_url, a)
        first = read(clickhouse_url, a)
        replay(in_order, clickhouse_url, a)                     # the same telemetry again, same database
        again = read(clickhouse_url, a)
        replay(shuffled, clickhouse_url, b)
        other = read(clickhouse_url, b)
    finally:
        for db in (a, b):
            Store.connect(clickhouse_url, db, create=True).drop()
    assert len(first["ledger"]) > 100 and first["reconciliation"] == []
    estimated, unbilled = 19, 20                              # columns of billing_ledger
    assert any(float(r[estimated]) > 0 for r in first["ledger"]) and any(float(r[unbilled]) > 0
                                                                      for r in first["ledger"]), \
        "the fleet has estimated and unbilled gaps"
    assert again == first                                     # nothing stored twice, not even before a merge
    assert first["stored rows"] == len(first["ledger"])
    assert other == first
