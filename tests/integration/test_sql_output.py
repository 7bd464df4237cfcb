"""`gpufleet sql` on the ClickHouse server prints what finance reads: decimals exactly, Float32 columns rounded to
their digits, a header in TSV too, and "0 rows" for an empty result (issue 51, item 6)."""
import pytest

from gpufleet.cli import main

pytestmark = pytest.mark.integration


def sql(capsys, server_store, clickhouse_url, query, *flags):
    assert main(["sql", query, *flags, "--dsn", clickhouse_url, "--database", server_store.database]) == 0
    return capsys.readouterr().out


def test_sql_prints_decimals_and_rounded_floats_with_a_header(capsys, server_store, clickhouse_url):
    q = ("SELECT toDecimal64('0.909583', 6) AS amount, toFloat32(5.443) AS util, "
         "map('on_demand', toDecimal64('2', 6)) AS modes")
    tsv = sql(capsys, server_store, clickhouse_url, q, "--tsv").splitlines()
    assert tsv == ["amount\tutil\tmodes", "0.909583\t5.443\t{'on_demand':2.000000}"]
    table = sql(capsys, server_store, clickhouse_url, q)
    assert "Decimal(" not in table and "5.442999" not in table and table.splitlines()[-1] == "1 row"


def test_an_empty_result_has_its_header_and_says_0_rows(capsys, server_store, clickhouse_url):
    q = "SELECT tenant, amount FROM billing_ledger WHERE tenant = 'nobody'"
    assert sql(capsys, server_store, clickhouse_url, q, "--tsv").splitlines() == ["tenant\tamount"]
    table = sql(capsys, server_store, clickhouse_url, q).splitlines()
    assert table[0].split() == ["tenant", "amount"] and table[-1] == "0 rows"
