"""The price table and the billing modes: lookups by pool, model and time, each mode's formula in Decimal, MIG
shares, rounding, and settings errors that name the setting."""
import datetime as dt
from decimal import Decimal
from fractions import Fraction

import pytest

from gpufleet.settings import SettingsError, load_settings
from gpufleet.streams.billing import MODES
from gpufleet.streams.billing.metered import Metered
from gpufleet.streams.billing.prices import BillingConfig, Price, Tariff, money
from gpufleet.streams.billing.reserved import month_ms

JAN = int(dt.datetime(2026, 1, 5, tzinfo=dt.UTC).timestamp())        # a Monday, 00:00 UTC
FEB = int(dt.datetime(2026, 2, 5, tzinfo=dt.UTC).timestamp())
CATCH_ALL = Price(match="*", mode="on_demand", per_gpu_hour=Decimal("2"))


def metered(start=JAN, rented=3_600_000, busy=None, idle=0, topup=0, busy_w=None, idle_w=None):
    busy = rented - idle if busy is None else busy
    return Metered(start, 3600, rented, busy, idle, topup, Decimal(busy if busy_w is None else busy_w),
                   Decimal(idle if idle_w is None else idle_w))


def bill_of(t, rented, price):
    t = Tariff(BillingConfig(prices=[Price(per_gpu_hour=Decimal(price))]))
    return t.bill(metered(rented=rented), "a", "p", "m", Fraction(1))["amount"]


def test_the_default_table_prices_every_gpu_at_2_an_hour_on_demand():
    t = Tariff()
    assert t.price("on_demand", "any-pool", "any-model", JAN).per_gpu_hour == Decimal("2.0")
    assert t.price("reserved", "any-pool", "any-model", JAN) is None
    bill = t.bill(metered(rented=1_800_000, idle=900_000), "acme", "p", "m", t.share("m", None))
    assert bill == {"billing_mode": "on_demand", "price_per_gpu_hour": "2.000000", "amount": "1.000000",
                    "idle_amount": "0.500000", "amounts_by_mode": {"on_demand": "1.000000"},
                    "underused_ms": 0, "unused_amount": "0.000000", "unsold_amount": "0.000000"}


def test_waste_as_its_one_definition_says_with_its_worked_example():
    # an hour at 4.00: 10 minutes idle, 50 minutes busy at 20 %
    busy, idle = 50 * 60_000, 10 * 60_000
    m = metered(rented=busy + idle, idle=idle, busy_w=busy // 5, idle_w=0)
    by_time = Tariff(BillingConfig(prices=[Price(per_gpu_hour=Decimal(4))]))
    bill = by_time.bill(m, "acme", "p", "m", Fraction(1))
    assert (bill["amount"], bill["idle_amount"]) == ("4.000000", "0.666667")
    assert (bill["underused_ms"], bill["unused_amount"], bill["unsold_amount"]) == (busy, "2.666667", "0.000000")
    by_use = Tariff(BillingConfig(prices=[Price(per_gpu_hour=Decimal(4)),
                                          Price(mode="usage", per_gpu_hour=Decimal(4), weight="utilization")],
                                  default_mode="usage"))
    bill = by_use.bill(m, "acme", "p", "m", Fraction(1))
    assert (bill["amount"], bill["idle_amount"]) == ("0.666667", "0.000000")
    assert (bill["unused_amount"], bill["unsold_amount"]) == ("0.000000", "3.333333")   # the provider's loss
    # at 60 % or more the busy time is not underused; idle is still idle, never counted twice
    fair = by_time.bill(metered(rented=busy + idle, idle=idle, busy_w=busy * 3 // 5, idle_w=0), "a", "p", "m",
                        Fraction(1))
    assert (fair["underused_ms"], fair["unused_amount"], fair["idle_amount"]) == (0, "0.000000", "0.666667")
    strict = Tariff(BillingConfig(prices=[Price(per_gpu_hour=Decimal(4))], underuse_pct=70))
    assert strict.bill(metered(rented=busy + idle, idle=idle, busy_w=busy * 3 // 5, idle_w=0), "a", "p", "m",
                       Fraction(1))["unused_amount"] == "1.333333"                   # 40 % of 3.33


def test_a_pool_entry_beats_a_model_entry_beats_the_catch_all_and_a_change_applies_from_its_hour_on():
    prices = [CATCH_ALL,
              Price(match="NVIDIA H100", mode="on_demand", per_gpu_hour=Decimal("3")),
              Price(match="east", mode="on_demand", per_gpu_hour=Decimal("4"), **{"from": "2026-01-05T02:00"}),
              Price(match="east", mode="on_demand", per_gpu_hour=Decimal("5"), **{"from": "2026-01-05T05:00"})]
    t = Tariff(BillingConfig(prices=prices))
    at = lambda h: t.price("on_demand", "east", "NVIDIA H100", JAN + h * 3600).per_gpu_hour  # noqa: E731
    assert [at(h) for h in (0, 1, 2, 4, 5, 9)] == [3, 3, 4, 4, 5, 5]        # before the pool's first entry: model
    assert t.price("on_demand", "west", "NVIDIA H100", JAN).per_gpu_hour == 3
    assert t.price("on_demand", "west", "L40S", JAN).per_gpu_hour == 2


def test_effective_from_takes_dates_times_and_unix_seconds_and_must_be_a_whole_hour():
    assert Price(per_gpu_hour=1, **{"from": dt.date(2026, 1, 5)}).effective_from == JAN
    assert Price(per_gpu_hour=1, **{"from": JAN + 7200}).effective_from == JAN + 7200
    with pytest.raises(ValueError, match="not a whole hour"):
        Price(per_gpu_hour=1, **{"from": "2026-01-05T02:30"})


@pytest.mark.parametrize("entry, problem", [
    ({"mode": "reserved", "per_gpu_hour": "1"}, "needs per_gpu_month"),
    ({"mode": "on_demand"}, "needs per_gpu_hour"),
    ({"mode": "auction", "per_gpu_hour": "1"}, "not one of"),
    ({"mode": "spot", "per_gpu_hour": "1", "hour_discounts": {"0-6": "0.4", "6": "0.1"}}, "overlaps"),
    ({"mode": "spot", "per_gpu_hour": "1", "hour_discounts": {"22-25": "0.4"}}, "not an hour"),
    ({"mode": "spot", "per_gpu_hour": "1", "hour_discounts": {"3": "1.5"}}, "between 0 and 1"),
])
def test_an_entry_a_mode_cannot_price_is_refused(entry, problem):
    with pytest.raises(ValueError, match=problem):
        Price(**entry)


def test_the_table_needs_a_catch_all_on_demand_price_and_known_modes():
    with pytest.raises(ValueError, match='match = "\\*"'):
        BillingConfig(prices=[Price(match="east", per_gpu_hour=1)])
    with pytest.raises(ValueError, match="not one of"):
        BillingConfig(tenants={"acme": "barter"})
    with pytest.raises(ValueError, match="divide an hour"):
        BillingConfig(period_s=7200)


def test_each_mode_charges_by_its_formula_in_decimal():
    t = Tariff(BillingConfig(prices=[
        CATCH_ALL,
        Price(mode="reserved", per_gpu_month=Decimal("1488")),
        Price(mode="spot", per_gpu_hour=Decimal("1.5"), hour_discounts={"0-5": Decimal("0.4"), "22-23": "0.25"}),
        Price(mode="usage", per_gpu_hour=Decimal("3"), weight="utilization")]))
    # half an hour idle at 2 %, half busy at 50 %: weighted 0.01 h + 0.25 h
    m = metered(idle=1_800_000, busy_w=900_000, idle_w=36_000)
    bill = t.bill(m, "acme", "p", "m", t.share("m", None))
    assert bill["amounts_by_mode"] == {
        "on_demand": "2.000000",                      # 2 x 1 h
        "reserved": "2.000000",                       # 1488 / (31 x 24 h)
        "spot": "0.900000",                           # 1.5 x (1 - 0.4) at 00:00
        "usage": "0.780000",                          # 3 x 0.26 h
    }
    later = t.bill(metered(start=JAN + 12 * 3600), "acme", "p", "m", t.share("m", None))["amounts_by_mode"]
    assert later["spot"] == "1.500000"                # no discount at noon
    feb = t.bill(metered(start=FEB), "acme", "p", "m", t.share("m", None))["amounts_by_mode"]
    assert feb["reserved"] == money(Fraction(1488 * 3_600_000, month_ms(FEB))) == "2.214286"   # 28 days


def test_usage_by_busy_seconds_leaves_idle_time_free():
    t = Tariff(BillingConfig(prices=[CATCH_ALL, Price(mode="usage", per_gpu_hour=Decimal("3"))],
                             default_mode="usage"))
    bill = t.bill(metered(idle=2_400_000), "acme", "p", "m", t.share("m", None))
    assert (bill["billing_mode"], bill["amount"], bill["idle_amount"]) == ("usage", "1.000000", "0.000000")


def test_a_tenant_whose_mode_has_no_entry_for_the_gpu_pays_on_demand():
    t = Tariff(BillingConfig(prices=[CATCH_ALL, Price(match="east", mode="reserved", per_gpu_month=1000)],
                             tenants={"acme": "reserved"}))
    assert t.bill(metered(), "acme", "west", "m", t.share("m", None))["billing_mode"] == "on_demand"
    assert t.bill(metered(), "acme", "east", "m", t.share("m", None))["billing_mode"] == "reserved"
    assert t.bill(metered(), "globex", "east", "m", t.share("m", None))["billing_mode"] == "on_demand"


def test_mig_shares_and_rounding_once_half_up():
    t = Tariff()
    assert t.share("NVIDIA H100 80GB HBM3", "1g.10gb") == Fraction(1, 7)
    assert t.share("NVIDIA A30", "2g.12gb") == Fraction(2, 4)                   # A30s have 4 slices
    assert t.share("m", None) == 1 and t.share("m", "weird") == 1
    bill = t.bill(metered(rented=1_000), "a", "p", "m", t.share("m", "3g.40gb"))
    # 2 x 1 s / 3600 x 3/7 = 0.000238095...: rounded once, half up
    assert bill["amount"] == "0.000238"
    assert money(Decimal("0.0000005")) == "0.000001" and money(Decimal("2.0000004999")) == "2.000000"
    assert money(Fraction(-1, 2_000_000)) == "-0.000001" and money(Fraction(-1, 3_000_000)) == "0.000000"
    # 2.10 an hour for 1079.202 s is 0.6295345 exactly: half up, not a digit lost on the way
    assert bill_of(t, rented=1_079_202, price="2.10") == "0.629535"


def test_teams_by_tenant_or_tenant_and_job_prefix_longest_first():
    t = Tariff(BillingConfig(teams={"acme": "platform", "acme/train-": "research", "acme/train-llm": "llm"}))
    assert [t.team_of("acme", j) for j in ("infer-1", "train-7", "train-llm-2")] == ["platform", "research", "llm"]
    assert t.team_of("globex", "train-1") == ""


def test_every_mode_is_registered_with_its_words():
    assert set(MODES) == {"on_demand", "reserved", "spot", "usage"}
    assert all(m.WORDS and m.check and m.charge and m.hourly for m in MODES.values())


def test_billing_settings_from_toml_and_environment(tmp_path, monkeypatch):
    cfg = tmp_path / "gpufleet.toml"
    cfg.write_text('[billing]\ncurrency = "EUR"\ngap_policy = "bill"\ntenants = {acme = "reserved"}\n'
                   '[[billing.prices]]\nmatch = "*"\nper_gpu_hour = 2.9\n'
                   '[[billing.prices]]\nmatch = "*"\nmode = "reserved"\nper_gpu_month = "1500"\nfrom = 2026-02-01\n')
    s = load_settings(str(cfg))
    assert s.billing.currency == "EUR" and s.billing.prices[0].per_gpu_hour == Decimal("2.9")     # never a float
    assert s.billing.prices[1].effective_from == dt.datetime(2026, 2, 1, tzinfo=dt.UTC).timestamp()
    monkeypatch.setenv("GPUFLEET_BILLING__PERIOD_S", "900")
    assert load_settings(str(cfg)).billing.period_s == 900


@pytest.mark.parametrize("toml, names", [
    ('[billing]\nperiod_s = 7000\n', "billing.period_s"),
    ('[[billing.prices]]\nmatch = "*"\nmode = "reserved"\nper_gpu_hour = 1\n', "billing.prices.0"),
    ('[stream]\nprices = {east = 2.5}\n', "billing.prices"),
    ('[stream]\ncurrency = "EUR"\n', "billing.currency"),
])
def test_bad_billing_settings_name_the_setting_in_one_line(tmp_path, toml, names):
    cfg = tmp_path / "gpufleet.toml"
    cfg.write_text(toml)
    with pytest.raises(SettingsError) as err:
        load_settings(str(cfg))
    assert names in str(err.value) and "\n" not in str(err.value)


def test_the_default_flat_price_says_so_and_a_price_list_does_not():
    from gpufleet.streams.billing.prices import BillingConfig
    note = BillingConfig().default_price_note()
    assert note == ("every amount uses the default price, a flat 2.00 USD per GPU-hour for every GPU model and pool: "
                    "set billing.prices to your price list")
    assert BillingConfig(prices=[{"match": "*", "per_gpu_hour": "2.50"}]).default_price_note() is None
