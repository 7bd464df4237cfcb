"""Commitments, the daily and unsold-capacity views and the FOCUS export (issue 51, items 1, 4 and 5), on the
ClickHouse server over the known ledger of test_finance_views, with the amounts worked out by hand here.

acme's January: g1 and g2 rented for two hours (4 GPU-hours, 8.00 on demand, 2.00 a GPU-hour). A commitment of
1 GPU at 744.00 a GPU-month (January has 744 hours: 1.00 an hour amortized) covers one GPU in each of the two hours:
the usage it covers is 4.00 (half of each hour's 4.00), its amortized cost 2.00, the unused commitment 742.00; acme
owes 8.00 - 4.00 + 744.00 = 748.00.
"""
import csv
import datetime as dt
import io
import json
import os
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from test_finance_views import JAN, RECORDS, ROLLUP_COLUMNS, minutes, record

from gpufleet.cli import main
from gpufleet.streams.sink import LEDGER, ledger_row

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
H = 3600
D = Decimal

CONFIG = """
[billing]
spot_interruption_pct = {spot_pct}
[[billing.prices]]
match = "*"
per_gpu_hour = "2"
[[billing.prices]]
match = "*"
mode = "reserved"
per_gpu_month = "{reserved}"
{commitments}
"""
COMMITMENT = """
[[billing.commitments]]
tenant = "acme"
gpus = 1
start = "2026-01"
term_months = 3
per_gpu_month = "744"
"""
# initech: an hour on spot at 1.00 (2.00 on demand) in February
SPOT = [record("g7", "initech", "s1", int(dt.datetime(2026, 2, 2, 5, tzinfo=dt.UTC).timestamp()), 3600.0, 0.0,
               "2.000000", "0.000000", 90.0, 90.0, {"on_demand": "2.000000", "spot": "1.000000"})]


@pytest.fixture
def cli(capsys, tmp_path, server_store, clickhouse_url):
    server_store.write("billing_ledger", LEDGER.columns, [ledger_row(e) for e in RECORDS + SPOT])

    def run(*args, commitments=True, reserved="1000", spot_pct=5):
        cfg = tmp_path / "prices.toml"
        cfg.write_text(CONFIG.format(commitments=COMMITMENT if commitments else "", reserved=reserved,
                                     spot_pct=spot_pct))
        code = main(["--config", str(cfg), *args, "--dsn", clickhouse_url, "--database", server_store.database])
        out = capsys.readouterr()
        assert code == 0, out.err
        return out.out
    run.store = server_store
    return run


def invoice(cli, month, tenant=None, **kw):
    got = json.loads(cli("bill", "--month", month, "--format", "json", *(("--tenant", tenant) if tenant else ()),
                         **kw))
    return {inv["tenant"]: inv for inv in got["invoices"]}


def test_a_commitment_is_billed_used_or_not_with_its_amortized_and_unused_cost(cli):
    acme = invoice(cli, "2026-01")["acme"]
    (c,) = acme["commitments"]
    assert c == {"commitment": "acme/*/2026-01", "pool": "*", "gpus": 1, "committed_hours": "744.000000",
                 "used_hours": "2.000000", "billed_amount": "744.000000", "amortized_amount": "2.000000",
                 "unused_amount": "742.000000", "covered_amount": "4.000000"}
    assert acme["due"] == {"usage": "8.000000", "covered_by_commitments": "-4.000000", "commitments": "744.000000",
                           "adjustments": "0.000000", "total": "748.000000"}
    # February (672 hours): an hour used, 2.50, covered; the fee is billed all the same, most of it unused
    (c,) = invoice(cli, "2026-02")["acme"]["commitments"]
    assert (c["billed_amount"], c["amortized_amount"], c["unused_amount"], c["covered_amount"]) == (
        "744.000000", "1.107143", "742.892857", "2.500000")                  # 744 x 1 / 672
    assert invoice(cli, "2026-02")["acme"]["due"]["total"] == "744.000000"
    # March: nothing used, billed whole and unused whole; April is past its three months
    march = invoice(cli, "2026-03")["acme"]
    assert (march["commitments"][0]["unused_amount"], march["due"]["total"]) == ("744.000000", "744.000000")
    assert "acme" not in invoice(cli, "2026-04")
    globex = invoice(cli, "2026-01")["globex"]
    assert globex["commitments"] == [] and globex["due"]["total"] == "1.500000"


def test_compare_modes_gives_the_commitment_that_costs_least_and_spot_with_its_interruptions(cli):
    # at 2.00 a committed GPU-month, 2 GPUs cost 4.00 and cover all of acme's 8.00 on demand: 4.00 saved
    acme = invoice(cli, "2026-01", "acme", commitments=False, reserved="2")["acme"]
    modes = {m["mode"]: m for m in json.loads(cli("bill", "--month", "2026-01", "--tenant", "acme", "--format",
                                                  "json", "--compare-modes", commitments=False, reserved="2"))
             ["invoices"][0]["modes"]}
    assert acme["due"]["total"] == "8.000000" and "reserved" not in modes
    assert (modes["commitment"]["amount"], modes["commitment"]["saving"]) == ("4.000000", "4.000000")
    assert "2 GPUs at 2 a GPU-month" in modes["commitment"]["detail"]
    assert (modes["on_demand"]["amount"], modes["usage"]["amount"]) == ("8.000000", "4.500000")
    assert modes["commitment"]["cheapest"] and not modes["usage"]["cheapest"]
    # at 1000.00 a GPU-month no commitment pays: 0 GPUs, the cost on demand
    modes = {m["mode"]: m for m in json.loads(cli("bill", "--month", "2026-01", "--tenant", "acme", "--format",
                                                  "json", "--compare-modes", commitments=False))
             ["invoices"][0]["modes"]}
    assert modes["commitment"]["amount"] == "8.000000" and "0 GPUs" in modes["commitment"]["detail"]
    # spot, 1.00 as priced, with 20 % of its hours expected to be interrupted and run again: 1.25, and it says so
    text = cli("bill", "--month", "2026-02", "--tenant", "initech", "--compare-modes", spot_pct=20)
    assert "20 % of its GPU-hours expected to be interrupted" in text
    spot = next(m for m in json.loads(cli("bill", "--month", "2026-02", "--tenant", "initech", "--format", "json",
                                          "--compare-modes", spot_pct=20))["invoices"][0]["modes"]
                if m["mode"] == "spot")
    assert spot["amount"] == "1.250000" and spot["cheapest"]


def test_revenue_per_tenant_pool_and_day(cli):
    names, rows = cli.store.select("SELECT day, tenant, pool, rented_hours, ledger_amount, adjustment_amount, "
                                   "amount FROM billing_revenue_daily WHERE month = '2026-01-01' ORDER BY tenant")
    assert [tuple(r) for r in rows] == [
        (dt.date(2026, 1, 5), "acme", "east", D(4), D(8), D(0), D(8)),
        (dt.date(2026, 1, 5), "globex", "west", D("0.5"), D("1.5"), D(0), D("1.5"))]


def test_unsold_capacity_per_pool_and_hour_priced_at_list(cli):
    # g1 and g2 rented for two hours; g4 installed beside them and never rented
    cli.store.write("gpu_rollup_1m", ROLLUP_COLUMNS, minutes("g1", JAN, 120) + minutes("g2", JAN, 120)
                    + minutes("g4", JAN, 120, rented_ms=0))
    names, rows = cli.store.select("SELECT hour, pool, gpus, installed_gpu_hours, rented_gpu_hours, "
                                   "unsold_gpu_hours FROM billing_capacity_hourly ORDER BY hour")
    assert [tuple(r[1:]) for r in rows] == [("east", 3, D(3), D(2), D(1))] * 2
    got = json.loads(cli("bill", "capacity", "--month", "2026-01", "--format", "json"))
    assert got["pools"] == [{"pool": "east", "when": "2026-01", "gpus": 3, "installed_gpu_hours": "6.000000",
                             "rented_gpu_hours": "4.000000", "unsold_gpu_hours": "2.000000",
                             "unsold_amount": "4.000000"}]
    assert "unsold at list" in cli("bill", "capacity", "--month", "2026-01")


def validator() -> str | None:
    found = os.environ.get("GPUFLEET_FOCUS_VALIDATOR") or str(ROOT / ".venv-focus" / "bin" / "focus-validator")
    found = shutil.which(found) or found
    return os.path.abspath(found) if os.path.exists(found) else None        # it runs in another directory


# focus-validator 1.0.0's rule set for FOCUS 1.0 still names two things as FOCUS 0.5 did: ResourceID (1.0:
# ResourceId) and ChargeType (1.0: ChargeCategory, in the SkuPriceId rule). Those rules are skipped there and
# checked here, by the 1.0 names.
OVERRIDES = ["ResourceID_Required", "ResourceID_Nullable", "ResourceID_IsString", "SkuPriceId_Nullable"]


def run_validator(path: Path, tmp_path: Path) -> str:
    exe = validator()
    if exe is None:
        pytest.skip("no FOCUS validator: `make focus-validator` installs it (make test does)")
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text("overrides:\n" + "".join(f"  - {o}\n" for o in OVERRIDES))
    # the validator reads its list of currency codes from a path relative to the working directory: its own
    # site-packages, where focus_validator/ is
    site = subprocess.run([str(Path(exe).parent / "python"), "-c", "import focus_validator, os; "
                           "print(os.path.dirname(os.path.dirname(focus_validator.__file__)))"],
                          capture_output=True, text=True, timeout=120).stdout.strip()
    out = subprocess.run([exe, "--data-file", str(path), "--validate-version", "1.0", "--override-file",
                          str(overrides)], capture_output=True, text=True, timeout=600, cwd=site)
    return out.stdout + out.stderr


def test_the_focus_export_passes_the_validator_and_adds_up_to_the_invoices(cli, tmp_path):
    for month in ("2026-01", "2026-02"):
        due = sum(Decimal(inv["due"]["total"]) for inv in invoice(cli, month).values())
        path = tmp_path / f"focus-{month}.csv"
        cli("bill", "export", "--month", month, "--format", "focus-csv", "-o", str(path))
        rows = list(csv.DictReader(io.StringIO(path.read_text())))
        assert sum(Decimal(r["BilledCost"]) for r in rows) == due
        assert sum(Decimal(r["EffectiveCost"]) for r in rows) == due
        said = run_validator(path, tmp_path)
        assert "Validation succeeded." in said and "failed" not in said, said
        # the two rules checked here by their FOCUS 1.0 names
        assert all(r["ResourceId"] for r in rows)
        assert all(r["SkuPriceId"] for r in rows if r["ChargeCategory"] in ("Usage", "Purchase"))
        parquet = tmp_path / f"focus-{month}.parquet"
        cli("bill", "export", "--month", month, "--format", "focus-parquet", "-o", str(parquet))
        said = run_validator(parquet, tmp_path)
        assert "Validation succeeded." in said and "failed" not in said, said
        import pyarrow.parquet as pq
        table = pq.read_table(parquet).to_pylist()
        assert len(table) == len(rows)
        assert round(sum(r["BilledCost"] for r in table), 6) == float(due)
    # January: the purchase, the covered usage and the unused commitment, as the invoice has them
    rows = list(csv.DictReader(io.StringIO((tmp_path / "focus-2026-01.csv").read_text())))
    acme = [r for r in rows if r["BillingAccountId"] == "acme"]
    purchase = [r for r in acme if r["ChargeCategory"] == "Purchase"]
    used = [r for r in acme if r["CommitmentDiscountStatus"] == "Used"]
    unused = [r for r in acme if r["CommitmentDiscountStatus"] == "Unused"]
    assert [(r["BilledCost"], r["EffectiveCost"]) for r in purchase] == [("744.000000", "0.000000")]
    assert sum(Decimal(r["EffectiveCost"]) for r in used) == 2 and all(Decimal(r["BilledCost"]) == 0 for r in used)
    assert [(r["BilledCost"], r["EffectiveCost"]) for r in unused] == [("0.000000", "742.000000")]
    assert {r["ChargePeriodStart"] for r in used} == {"2026-01-05T00:00:00Z"}
    assert sum(Decimal(r["ListCost"]) for r in acme if r["ResourceType"] == "GPU") == 8


def test_the_export_creates_nothing_in_the_store_and_quotes_a_bad_path(cli, capsys, tmp_path, clickhouse_url):
    before = cli.store.query("SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name")
    cli("bill", "export", "--month", "2026-01", "--format", "focus-csv", "-o", str(tmp_path / "x.csv"))
    assert cli.store.query("SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name") == before
    assert main(["bill", "export", "--month", "2026-01", "--format", "focus-csv", "-o", "/no/such/dir/x.csv",
                 "--dsn", clickhouse_url, "--database", cli.store.database]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'/no/such/dir/x.csv'" in err, err

