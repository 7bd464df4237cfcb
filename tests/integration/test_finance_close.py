"""Re-rating with its audit trail, month close and adjustments (issue 51, items 2 and 4), on the ClickHouse server
over a simulated fleet with tenant changes and gaps (tests/billing_fleet.py) metered at known prices:

- `bill rerate` prices stored usage again: the ledger then equals, row for row, a fresh replay at the new prices;
  every changed row is in billing_rerate_audit; a second run changes nothing;
- a replay at prices other than the ledger's says so and keeps the ledger's amounts;
- `bill close` freezes a month: re-ratings of it and data that arrives for it later go to billing_adjustments,
  and the next month's invoice shows them; closing again changes nothing; a month not over is refused.
"""
import datetime as dt
import json
import os
import subprocess
import sys
import uuid
from decimal import Decimal

import pytest
from billing_fleet import fleet

from gpufleet.cli import main
from gpufleet.collectors.simulator import FleetSpec
from gpufleet.sql.store import Store
from gpufleet.streams.billing.prices import BillingConfig, Price
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.pipeline import Driver, Pipeline
from gpufleet.streams.sink import Sink

pytestmark = pytest.mark.integration

START = dt.datetime(2026, 1, 5, tzinfo=dt.UTC).timestamp()
PRICES = """
[billing]
tenants = {{ acme-ai = "usage", globex = "spot" }}
[[billing.prices]]
match = "*"
per_gpu_hour = "2.10"
minimum_s = 300
[[billing.prices]]
match = "h100-sxm-east"
per_gpu_hour = "{east}"
[[billing.prices]]
match = "*"
mode = "spot"
per_gpu_hour = "1.40"
hour_discounts = {{ "0-2" = "0.3" }}
[[billing.prices]]
match = "*"
mode = "usage"
per_gpu_hour = "3.20"
weight = "utilization"
"""


def billing(east: str) -> BillingConfig:
    return BillingConfig(prices=[Price(match="*", per_gpu_hour=Decimal("2.10"), minimum_s=300),
                                 Price(match="h100-sxm-east", per_gpu_hour=Decimal(east)),
                                 Price(match="*", mode="spot", per_gpu_hour=Decimal("1.40"),
                                       hour_discounts={"0-2": Decimal("0.3")}),
                                 Price(match="*", mode="usage", per_gpu_hour=Decimal("3.20"), weight="utilization")],
                         tenants={"acme-ai": "usage", "globex": "spot"})


def messages(seed=4):
    return [m for m, _ in fleet(FleetSpec(nodes=3, gpus_per_node=4, hours=5, seed=seed, faults_per_kind=0,
                                          start=START))]


def meter(store, east: str, seed=4) -> Sink:
    """The fleet metered at these prices into the store, as a replay writes it."""
    p = Pipeline(StreamConfig(raw_samples=False), detect=False, billing=billing(east),
                 driver=Driver(route_jobs=False))
    for i, m in enumerate(messages(seed)):
        p.submit(m, f"fleet:{i}")
    p.flush()
    sink = Sink(store)
    sink.add({}, [e for e in p.out.events if e["schema"] == "gpufleet.billing.v1"])
    sink.flush()
    return sink


LEDGER = ("SELECT * EXCEPT rerated_at FROM billing_ledger FINAL ORDER BY gpu_uuid, tenant, job, period_start")


def ledger(store):
    return json.loads(json.dumps(store.query(LEDGER), default=str))


@pytest.fixture
def config(tmp_path):
    def write(east: str) -> str:
        path = tmp_path / f"prices-{east}.toml"
        path.write_text(PRICES.format(east=east))
        return str(path)
    return write


def gpufleet(capsys, config_file, store, *args):
    """A command on ``store`` (whose DSN the ``dsn`` fixture records): exit code, stdout, stderr."""
    code = main(["--config", config_file, *args, "--dsn", store.url, "--database", store.database])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def other_store(clickhouse_url):
    store = Store.connect(clickhouse_url, f"t_{uuid.uuid4().hex[:12]}", create=True)
    store.migrate()
    yield store
    store.drop()
    store.close()


@pytest.fixture
def dsn(clickhouse_url, server_store):
    server_store.url = clickhouse_url
    return clickhouse_url


def test_rerate_equals_a_fresh_replay_at_the_new_prices_records_each_change_and_is_idempotent(
        capsys, server_store, other_store, config, dsn):
    meter(server_store, "2.95")
    before = ledger(server_store)
    changed = [r for r in before if r[6] == "h100-sxm-east"]                 # the east pool's rows
    code, out, err = gpufleet(capsys, config("3.50"), server_store, "bill", "rerate", "--from", "2026-01-05",
                              "--to", "2026-01-06", "--reason", "a look first", "--dry-run")
    assert code == 0 and f"would change {len(changed)} (" in out, err
    assert ledger(server_store) == before and server_store.query("SELECT count() FROM billing_rerate_audit") == [(0,)]
    code, out, err = gpufleet(capsys, config("3.50"), server_store, "bill", "rerate", "--from", "2026-01-05",
                              "--to", "2026-01-06", "--reason", "east price corrected to 3.50")
    assert code == 0, err
    assert f"changed {len(changed)} ({len(changed)} in the ledger" in out, out
    audit = server_store.query("SELECT reason, old_amount, new_amount, old_version, new_version, applied_to "
                               "FROM billing_rerate_audit")
    assert len(audit) == len(changed) > 10
    assert {a[0] for a in audit} == {"east price corrected to 3.50"} and {a[5] for a in audit} == {"ledger"}
    assert all(a[2] > a[1] and a[3] != a[4] for a in audit if a[1]), audit[:3]
    meter(other_store, "3.50")                                               # a fresh replay at 3.50
    assert ledger(server_store) == ledger(other_store)
    code, out, _ = gpufleet(capsys, config("3.50"), server_store, "bill", "rerate", "--from", "2026-01-05",
                            "--to", "2026-01-06", "--reason", "again")
    assert code == 0 and "changed 0 (" in out
    assert server_store.query("SELECT count() FROM billing_rerate_audit") == [(len(changed),)]


def test_a_replay_at_other_prices_says_so_and_keeps_the_ledgers_amounts(tmp_path, server_store, config, dsn):
    meter(server_store, "2.95")
    before = ledger(server_store)
    path = tmp_path / "telemetry.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in messages()))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}, "GPUFLEET_STORE__DSN": dsn,
           "GPUFLEET_STORE__DATABASE": server_store.database}
    out = subprocess.run([sys.executable, "-m", "gpufleet", "--config", config("3.50"), "replay", str(path)],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    east = sum(1 for r in before if r[6] == "h100-sxm-east")
    assert f"warning: {east} billing records are priced differently" in out.stderr, out.stderr
    assert "gpufleet bill rerate" in out.stderr
    assert ledger(server_store) == before                                   # nothing changed silently
    out = subprocess.run([sys.executable, "-m", "gpufleet", "--config", config("2.95"), "replay", str(path)],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0 and "priced differently" not in out.stderr, out.stderr


def test_a_closed_month_is_frozen_and_later_changes_are_on_the_next_invoice(capsys, server_store, config, dsn):
    old, new = config("2.95"), config("3.50")
    meter(server_store, "2.95")
    before = ledger(server_store)
    code, _, err = gpufleet(capsys, old, server_store, "bill", "--month", "2026-01", "--format", "json")
    january = json.loads(_)
    assert code == 0, err
    code, out, err = gpufleet(capsys, old, server_store, "bill", "close", "--month", "2026-01", "--reason", "sent")
    assert code == 0 and "2026-01 closed" in out, err
    code, out, _ = gpufleet(capsys, old, server_store, "bill", "close", "--month", "2026-01")
    assert code == 0 and "closed already" in out
    # a re-rating of the closed month changes no ledger row: its changes are adjustments invoiced in February
    code, out, _ = gpufleet(capsys, new, server_store, "bill", "rerate", "--from", "2026-01", "--to", "2026-02",
                            "--reason", "east corrected")
    east = [r for r in before if r[6] == "h100-sxm-east"]
    assert code == 0 and f"changed {len(east)} (0 in the ledger, {len(east)} as adjustments" in out, out
    assert ledger(server_store) == before
    audit_total = server_store.query("SELECT sum(new_amount - old_amount) FROM billing_rerate_audit "
                                     "WHERE applied_to = 'adjustment'")[0][0]
    assert audit_total > 0
    # data that arrives for January after the close: late usage, not the ledger; once, however often it comes
    late = meter(server_store, "2.95", seed=11)
    assert late.late_rows > 10 and ledger(server_store) == before
    again = meter(server_store, "2.95", seed=11)
    assert again.late_rows == 0
    late_total = server_store.query("SELECT sum(amount_change) FROM billing_adjustments FINAL "
                                    "WHERE kind = 'late usage'")[0][0]
    code, out, _ = gpufleet(capsys, new, server_store, "bill", "--month", "2026-02", "--format", "json")
    february = json.loads(out)
    adjusted = sum(Decimal(a["amount"]) for inv in february["invoices"] for a in inv["adjustments"])
    assert adjusted == audit_total + late_total
    assert sum(Decimal(inv["due"]["total"]) for inv in february["invoices"]) == adjusted
    assert {a["kind"] for inv in february["invoices"] for a in inv["adjustments"]} == {"rerate", "late usage"}
    # January's invoice is what it was when it was closed
    code, out, _ = gpufleet(capsys, new, server_store, "bill", "--month", "2026-01", "--format", "json")
    assert json.loads(out) == january
    # the late usage came at the old prices: a re-rating prices it (as adjustments too), then nothing is left
    late_east = server_store.query("SELECT count() FROM billing_adjustments FINAL WHERE kind = 'late usage' AND "
                                   "pool = 'h100-sxm-east'")[0][0]
    code, out, _ = gpufleet(capsys, new, server_store, "bill", "rerate", "--from", "2026-01", "--to", "2026-02",
                            "--reason", "late usage at the corrected price")
    assert late_east and f"changed {late_east} (0 in the ledger, {late_east} as adjustments" in out, out
    code, out, _ = gpufleet(capsys, new, server_store, "bill", "rerate", "--from", "2026-01", "--to", "2026-02",
                            "--reason", "again")
    assert "changed 0 (" in out and ledger(server_store) == before
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(days=40)).strftime("%Y-%m")
    code, out, err = gpufleet(capsys, new, server_store, "bill", "close", "--month", future)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "is not over yet" in err and future in err
    assert server_store.query("SELECT count() FROM billing_months") == [(1,)]


@pytest.mark.parametrize("args, names", [
    (["bill", "rerate", "--from", "2026-01-05T00:30", "--to", "2026-01-06", "--reason", "x"], "'2026-01-05T00:30'"),
    (["bill", "rerate", "--from", "2026-02", "--to", "2026-01", "--reason", "x"], "--to"),
    (["bill", "rerate", "--from", "soon", "--to", "2026-01", "--reason", "x"], "'soon'"),
    (["bill", "rerate", "--from", "2026-01", "--to", "2026-02", "--reason", " "], "--reason"),
    (["bill", "close", "--month", "2026-1"], "'2026-1'"),
    (["bill", "export", "--month", "2026-01", "--format", "xlsx", "-o", "x"], "--format"),
    (["bill", "capacity", "--month", "26-01"], "'26-01'"),
])
def test_bad_arguments_of_the_finance_actions_give_one_line_and_exit_2(capsys, args, names, server_store, dsn):
    assert main([*args, "--dsn", dsn, "--database", server_store.database]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and names in err and "Traceback" not in err, err
