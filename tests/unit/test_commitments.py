"""Commitments and re-pricing as pure logic (issue 51, items 1 and 2): a commitment's month (fee, amortized,
unused, covered usage), the least-cost commitment size, a ledger row priced again equal to metering's, the price
book's versions, FOCUS rounding that keeps totals, and commitment settings refused in one line."""
import datetime as dt
from decimal import Decimal
from fractions import Fraction

import pytest

from gpufleet.cli import main
from gpufleet.streams.billing.commitments import Commitment, allocate, best_size
from gpufleet.streams.billing.focus import _round
from gpufleet.streams.billing.prices import BillingConfig, Price, Tariff
from gpufleet.streams.billing.rerate import differs, reprice

JAN = dt.date(2026, 1, 1)
T0 = int(dt.datetime(2026, 1, 5, tzinfo=dt.UTC).timestamp())
F = Fraction


def test_a_commitment_covers_its_gpus_in_each_period_and_the_rest_is_unused():
    c = Commitment(tenant="acme", gpus=2, start="2026-01", per_gpu_month=Decimal("744"))
    # three GPUs busy in one hour (10,800 GPU-s, 6.00), one GPU in the next (3,600 GPU-s, 2.00)
    usage = {("east", T0): (F(10_800), F(6)), ("east", T0 + 3600): (F(3600), F(2))}
    (m,) = allocate([c], "acme", JAN, 3600, usage)
    assert m.fee == 1488 and m.committed_s == 2 * 744 * 3600
    assert m.used_s == 7200 + 3600 and m.covered == F(4) + F(2)          # two thirds of the first hour, all the next
    assert m.amortized == F(1488) * (10_800) / (2 * 744 * 3600) == 3 and m.unused == 1485
    assert allocate([c], "globex", JAN, 3600, usage) == []                  # another tenant's
    assert allocate([c], "acme", dt.date(2027, 1, 1), 3600, usage) == []    # after its twelve months


def test_a_pools_own_commitment_comes_before_a_catch_all_and_pools_are_kept_apart():
    east = Commitment(tenant="acme", pool="east", gpus=1, start="2026-01", per_gpu_month=Decimal("100"))
    anywhere = Commitment(tenant="acme", gpus=1, start="2026-01", per_gpu_month=Decimal("50"))
    usage = {("east", T0): (F(7200), F(4)), ("west", T0): (F(3600), F(3))}
    first, second = allocate([anywhere, east], "acme", JAN, 3600, usage)
    assert first.commitment is east and first.covered == 2 and first.by_pool == {"east": 2}
    assert second.commitment is anywhere and second.used_s == 3600 and second.covered == 2   # east's other GPU


def test_the_least_cost_commitment_size():
    usage = {T0 + 3600 * i: (F(3600 * n), F(2 * n)) for i, n in enumerate([3, 3, 1, 0, 2])}   # 2.00 a GPU-hour
    assert best_size(F(1000), 3600, usage) == (0, F(18))            # nothing pays at 1,000 a GPU-month
    assert best_size(F(5), 3600, usage) == (2, F(10) + F(4))        # 2 x 5 + the third GPU for two hours
    assert best_size(F(1), 3600, usage) == (3, F(3))


def test_a_row_priced_again_is_what_metering_priced_and_a_price_change_is_seen():
    old = Tariff(BillingConfig(prices=[Price(per_gpu_hour=Decimal("2")),
                                       Price(mode="usage", per_gpu_hour=Decimal("3"), weight="utilization")],
                               tenants={"acme": "usage"}))
    row = {"gpu_uuid": "g", "tenant": "acme", "job": "", "period_start": dt.datetime.fromtimestamp(T0, dt.UTC),
           "period_end": dt.datetime.fromtimestamp(T0 + 3600, dt.UTC), "pool": "east", "gpu_model": "H100",
           "mig_profile": "", "rented_s": Decimal("3600"), "busy_s": Decimal("3000"), "idle_s": Decimal("600"),
           "minimum_topup_s": Decimal(0), "busy_weighted_s": Decimal("1500.00000000"),
           "idle_weighted_s": Decimal("6.00000000"), "estimated_idle_s": Decimal(0), "price_version": "x",
           "util_pct": 42.0, "busy_util_pct": 50.0}
    priced = reprice(old, row)
    assert (priced["billing_mode"], priced["amount"], priced["idle_amount"]) == ("usage", Decimal("1.255000"),
                                                                                Decimal("0.005000"))
    assert priced["mode_amounts"] == {"on_demand": Decimal("2.000000"), "usage": Decimal("1.255000")}
    assert not differs({**row, **priced}, reprice(old, row))
    new = Tariff(BillingConfig(prices=[Price(per_gpu_hour=Decimal("2")),
                                       Price(mode="usage", per_gpu_hour=Decimal("4"), weight="utilization")],
                               tenants={"acme": "usage"}))
    again = reprice(new, row)
    assert again["amount"] == Decimal("1.673333") and again["price_version"] != priced["price_version"]
    assert differs({**row, **priced}, again)


def test_the_price_version_changes_with_what_prices_the_gpu_and_not_with_other_entries():
    base = [Price(per_gpu_hour=Decimal("2")), Price(match="east", per_gpu_hour=Decimal("3"))]
    v = Tariff(BillingConfig(prices=base)).version("acme", "east", "H100", T0)
    later = Tariff(BillingConfig(prices=[*base, Price(match="east", per_gpu_hour=Decimal("4"),
                                                      **{"from": T0 + 7200})]))
    assert later.version("acme", "east", "H100", T0) == v              # a change from later on: not yet
    assert later.version("acme", "east", "H100", T0 + 7200) != v
    other_pool = Tariff(BillingConfig(prices=[*base, Price(match="west", per_gpu_hour=Decimal("9"))]))
    assert other_pool.version("acme", "east", "H100", T0) == v
    corrected = Tariff(BillingConfig(prices=[base[0], Price(match="east", per_gpu_hour=Decimal("3.10"))]))
    assert corrected.version("acme", "east", "H100", T0) != v
    moved = Tariff(BillingConfig(prices=[*base, Price(mode="usage", per_gpu_hour=Decimal("3"))],
                                 tenants={"acme": "usage"}))
    assert moved.version("acme", "east", "H100", T0) != moved.version("globex", "east", "H100", T0)


def test_rounding_a_split_keeps_its_total_to_the_micro_unit():
    thirds = [F(1, 3)] * 3
    assert _round(thirds, F(1)) == [Decimal("0.333334"), Decimal("0.333333"), Decimal("0.333333")]
    assert sum(_round([F(2, 3)] * 7, F(14, 3))) == Decimal("4.666667")
    assert sum(_round([F(1, 7)] * 5, F(4, 7))) == Decimal("0.571429")    # a total below the parts' sum


@pytest.mark.parametrize("entry, setting, quoted", [
    ('tenant = "acme"\ngpus = 2\nstart = "2026-1"\nper_gpu_month = "9"', "billing.commitments.0.start", "'2026-1'"),
    ('tenant = "acme"\ngpus = 2\nstart = 2026-01-15\nper_gpu_month = "9"', "billing.commitments.0.start",
     "'2026-01-15'"),
    ('tenant = "acme"\ngpus = 0\nstart = "2026-01"\nper_gpu_month = "9"', "billing.commitments.0.gpus", "0"),
    ('tenant = "acme"\ngpus = 2\nstart = "2026-01"\nper_gpu_month = "nine"', "billing.commitments.0.per_gpu_month",
     "'nine'"),
    ('tenant = "acme"\ngpus = 2\nstart = "2026-01"\nper_gpu_month = "9"\nseats = 3', "billing.commitments.0.seats",
     "seats"),
])
def test_a_bad_commitment_names_the_setting_and_quotes_the_value(tmp_path, capsys, entry, setting, quoted):
    cfg = tmp_path / "commitments.toml"
    cfg.write_text(f"[[billing.commitments]]\n{entry}\n")
    assert main(["--config", str(cfg), "bill", "--month", "2026-01"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and setting in err and quoted in err and "Traceback" not in err, err


def test_two_commitments_of_one_name_are_refused(tmp_path, capsys):
    one = 'tenant = "acme"\ngpus = 2\nstart = "2026-01"\nper_gpu_month = "9"\n'
    cfg = tmp_path / "commitments.toml"
    cfg.write_text(f"[[billing.commitments]]\n{one}\n[[billing.commitments]]\n{one}")
    assert main(["--config", str(cfg), "bill", "--month", "2026-01"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'acme/*/2026-01' names another commitment too" in err, err
