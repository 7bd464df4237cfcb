"""`gpufleet bill` on the ClickHouse server over the known ledger of test_finance_views: the invoice lines, totals,
waste and the billing modes compared, as a table, CSV and JSON, with the amounts worked out there."""
import csv
import io
import json

import pytest
from test_finance_views import RECORDS

from gpufleet.cli import main
from gpufleet.streams.sink import LEDGER, ledger_row

pytestmark = pytest.mark.integration


@pytest.fixture
def ledger(server_store, clickhouse_url):
    server_store.write("billing_ledger", LEDGER.columns, [ledger_row(e) for e in RECORDS])
    return ["--dsn", clickhouse_url, "--database", server_store.database]


def bill(capsys, ledger, *args):
    assert main(["bill", *args, *ledger]) == 0
    return capsys.readouterr().out


def test_the_invoice_as_json_has_lines_totals_and_waste_in_decimal_strings(capsys, ledger):
    got = json.loads(bill(capsys, ledger, "--month", "2026-01", "--format", "json"))
    acme, globex = got["invoices"]
    assert (acme["tenant"], acme["currency"], got["month"]) == ("acme", "USD", "2026-01")
    assert acme["lines"] == [{"pool": "east", "gpu_model": "H100", "gpus": 2, "rented_hours": "4.000",
                              "busy_hours": "1.500", "idle_hours": "2.500", "idle_amount": "5.000000",
                              "estimated_hours": "0.000", "amount": "8.000000"}]
    assert acme["total"]["amount"] == "8.000000" and acme["total"]["idle_amount"] == "5.000000"
    assert acme["waste"]["low_utilization"] == {"rentals": 1, "busy_hours": "1.500", "unused_amount": "1.620000",
                                                 "unsold_amount": "0.000000"}
    assert acme["waste"]["overprovisioned"] == [{"job": "j1", "gpus": 2, "idle_gpus": 1, "idle_gpu_hours": "2.000000",
                                                 "idle_gpu_amount": "4.000000"}]
    assert globex["lines"][0]["estimated_hours"] == "0.083" and globex["total"]["amount"] == "1.500000"
    assert "modes" not in acme


def test_the_modes_compared_name_the_cheapest_complete_one(capsys, ledger):
    got = json.loads(bill(capsys, ledger, "--month", "2026-01", "--tenant", "acme", "--format", "json",
                          "--compare-modes"))
    (acme,) = got["invoices"]
    assert [(m["mode"], m["amount"], m["difference"], m["cheapest"]) for m in acme["modes"]] == [
        ("usage", "4.500000", "-3.500000", True), ("on_demand", "8.000000", "0.000000", False)]


def test_the_table_and_csv(capsys, ledger):
    text = bill(capsys, ledger, "--month", "2026-02", "--compare-modes")
    assert text.startswith("acme: 2026-02, USD") and "globex: 2026-02, USD" in text
    assert "2.500000" in text and "waste beyond idle:\n  none" in text and "cheapest" in text
    rows = list(csv.DictReader(io.StringIO(bill(capsys, ledger, "--month", "2026-01", "--format", "csv"))))
    assert [(r["tenant"], r["pool"], r["rented_hours"], r["amount"]) for r in rows] == [
        ("acme", "east", "4.000", "8.000000"), ("globex", "west", "0.500", "1.500000")]
    rows = list(csv.DictReader(io.StringIO(bill(capsys, ledger, "--month", "2026-01", "--format", "csv",
                                                "--compare-modes"))))
    assert [(r["tenant"], r["mode"], r["amount"], r["cheapest"]) for r in rows] == [
        ("acme", "usage", "4.500000", "true"), ("acme", "on_demand", "8.000000", "false"),
        ("globex", "on_demand", "1.500000", "true")]


def test_a_month_without_records_says_so(capsys, ledger):
    assert bill(capsys, ledger, "--month", "2025-12").strip() == "no billing records for 2025-12"
    assert json.loads(bill(capsys, ledger, "--month", "2026-01", "--tenant", "nobody", "--format", "json")) == {
        "month": "2026-01", "invoices": []}
