"""Output a finance tool reads (issue 51, item 6): `gpufleet sql` prints decimals as decimals and floats to the
digits their type holds, always with a header (TSV too) and "0 rows" for an empty result; the bill's CSV writes
booleans as true/false; a bad price file names the setting and quotes the value as the user wrote it."""
from decimal import Decimal

import pytest

from gpufleet.cli import main
from gpufleet.commands.sql import render, value_text
from gpufleet.streams.billing import invoice as bill


def test_decimals_print_as_decimals_inside_maps_and_arrays_too():
    assert value_text(Decimal("0.909583"), "Decimal(18, 6)") == "0.909583"
    assert value_text(Decimal("0E-6"), "Decimal(18, 6)") == "0.000000"
    assert value_text({"on_demand": Decimal("2.000000"), "usage": Decimal("1.5")}, "Map(String, Decimal(18, 6))") \
        == "{'on_demand':2.000000,'usage':1.5}"
    assert value_text([Decimal("1.25"), None], "Array(Nullable(Decimal(9, 2)))") == "[1.25,]"
    assert "Decimal(" not in render(["m"], ["Map(String, Decimal(18, 6))"], [({"a": Decimal("1.000000")},)], True)


def test_floats_are_rounded_to_the_digits_of_their_type():
    assert value_text(5.442999839782715, "Float32") == "5.443"               # a Float32 5.443 widened to 64 bits
    assert value_text(18.249999999999996, "Float64") == "18.25"
    assert value_text(0.1 + 0.2, "Float64") == "0.3"
    assert value_text(1234567.0, "Nullable(Float32)") == "1234567"
    assert value_text(1.5e-5, "Float32") == "0.000015"
    assert value_text(1.0e20, "Float64") == "1e+20"
    assert value_text(float("nan"), "Float64") == "nan"
    assert value_text(True, "Bool") == "true" and value_text(None, "Nullable(Float64)") == ""


def test_there_is_always_a_header_and_an_empty_result_says_0_rows():
    assert render(["tenant", "amount"], ["String", "Decimal(18, 6)"], [], tsv=True) == "tenant\tamount"
    table = render(["tenant", "amount"], ["String", "Decimal(18, 6)"], [], tsv=False)
    assert table.splitlines()[0].split() == ["tenant", "amount"] and table.splitlines()[-1] == "0 rows"
    assert render([], [], [], tsv=False) == "0 rows"
    got = render(["tenant", "amount"], ["String", "Decimal(18, 6)"], [("acme", Decimal("8.000000"))], tsv=False)
    assert got.splitlines()[2].split() == ["acme", "8.000000"] and got.splitlines()[-1] == "1 row"
    tsv = render(["tenant", "util"], ["String", "Float32"], [("a\tb", 5.442999839782715)], tsv=True)
    assert tsv.splitlines() == ["tenant\tutil", "a\\tb\t5.443"]


def test_the_bill_csv_writes_booleans_as_true_and_false():
    invoices = {"month": "2026-01", "invoices": [{"tenant": "acme", "currency": "USD", "modes": [
        {"mode": "usage", "amount": Decimal("4.5"), "billed_amount": Decimal(8), "difference": Decimal("-3.5"),
         "priced_hours": Decimal(4), "rented_hours": Decimal(4), "cheapest": True},
        {"mode": "on_demand", "amount": Decimal(8), "billed_amount": Decimal(8), "difference": Decimal(0),
         "priced_hours": Decimal(4), "rented_hours": Decimal(4), "cheapest": False}]}]}
    rows = [line.split(",") for line in bill.as_csv(invoices, compare_modes=True).splitlines()]
    cheapest = rows[0].index("cheapest")
    assert [r[cheapest] for r in rows[1:]] == ["true", "false"]


@pytest.mark.parametrize("entry, setting, quoted", [
    ('from = 2026-03-01T00:30:00Z', "billing.prices.1.from", "'2026-03-01T00:30:00Z' is not a whole hour"),
    ('from = 1772421000', "billing.prices.1.from", "1772421000 is not a whole hour"),
    ('from = "2026-03-01T00:30"', "billing.prices.1.from", "'2026-03-01T00:30' is not a whole hour"),
    ('from = "soon"', "billing.prices.1.from", "'soon'"),
    ('per_gpu_hour = "2.x"', "billing.prices.1.per_gpu_hour", "'2.x'"),
    ('per_gpu_hour = "-3"', "billing.prices.1.per_gpu_hour", "'-3'"),
])
def test_a_bad_price_names_the_setting_and_quotes_the_value_as_written(tmp_path, capsys, entry, setting, quoted):
    cfg = tmp_path / "prices.toml"
    body = entry if entry.startswith("per_gpu_hour") else f'per_gpu_hour = "3"\n{entry}'
    cfg.write_text(f'[[billing.prices]]\nmatch = "*"\nper_gpu_hour = "2"\n\n[[billing.prices]]\nmatch = "east"\n'
                   f"{body}\n")
    assert main(["--config", str(cfg), "bill", "--month", "2026-01"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and setting in err and quoted in err and "e+09" not in err, err
