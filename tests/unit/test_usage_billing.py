"""Usage-billing semantics (issue 51, item 3): time billed across a telemetry gap is priced at its neighbours'
utilization, never as full use; a gap between two idle samples stays idle (for pricing and idle cost); the
underused time of a tenant billed by use is the provider's unsold capacity, not the tenant's waste."""
from decimal import ROUND_HALF_UP, Decimal

from helpers import gpu, message

from gpufleet.contracts.events import Billing
from gpufleet.streams.billing.prices import BillingConfig, Price
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.pipeline import Driver, Pipeline

CFG = StreamConfig(lateness_s=0, idle_window_s=600)
T0 = 1767571200            # 2026-01-05 00:00 UTC
LIST = Price(per_gpu_hour=Decimal("4.00"))


def prices(weight="utilization", tenant_mode="usage"):
    return BillingConfig(prices=[LIST, Price(mode="usage", per_gpu_hour=Decimal("3.20"), weight=weight)],
                         tenants={"acme": tenant_mode})


def money(x) -> str:
    return str(Decimal(x).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP))


def gap(util_before, util_after, billing, gap_s=600.0):
    """One GPU sampled every 5 s for 10 minutes, then a gap its collector reports (seq jumps), then 10 minutes."""
    before = [(T0 + 5 * i, util_before) for i in range(120)]
    resume = T0 + 595 + gap_s
    after = [(resume + 5 * i, util_after) for i in range(120)]
    p = Pipeline(CFG, detect=False, billing=billing, driver=Driver(route_jobs=False))
    for n, (ts, util) in enumerate(before + after):
        seq = n if ts < resume else n + int(gap_s // 5)
        p.submit(message(ts, gpus=[gpu(0, util_pct=util)], collector_id="c1", seq=seq), f"t:{n}")
    p.flush()
    (e,) = [e for e in p.out.events if e["schema"] == "gpufleet.billing.v1"]
    Billing.model_validate(e)
    return e


def test_a_gap_between_idle_samples_is_priced_at_their_utilization_not_as_full_use():
    e = gap(2.0, 2.0, prices())
    assert (e["rented_s"], e["estimated_s"], e["estimated_idle_s"]) == (1795.0, 595.0, 595.0)
    # every rented second at 2 %, the 595 s of the gap too: 3.20 x 1,795 s x 2 % (it was 3.20 x (1,200 s x 2 % +
    # 595 s) / 3,600 = 0.550222 when the gap counted as full use)
    assert e["amount"] == money(Decimal("3.20") * Decimal(1795) * Decimal("0.02") / 3600) == "0.031911"
    assert Decimal(e["busy_weighted_s"]) + Decimal(e["idle_weighted_s"]) == Decimal("35.9")


def test_a_gap_between_busy_samples_costs_their_mean_utilization():
    e = gap(40.0, 60.0, prices())
    assert e["estimated_s"] == 595.0 and e["estimated_idle_s"] == 0
    weighted = Decimal(600) * Decimal("0.4") + Decimal(595) * Decimal("0.5") + Decimal(600) * Decimal("0.6")
    assert e["amount"] == money(Decimal("3.20") * weighted / 3600)
    assert Decimal(e["busy_weighted_s"]) == weighted and e["unused_amount"] == "0.000000"


def test_billed_by_busy_time_a_gap_between_idle_samples_is_not_billed():
    e = gap(2.0, 2.0, prices(weight="busy"))
    # the idle windows (each side of the gap) and the gap between them are idle: nothing is busy
    assert Decimal(str(e["busy_s"])) - Decimal(str(e["estimated_idle_s"])) == 0 and e["amount"] == "0.000000"


def test_on_demand_the_gap_between_idle_samples_stays_in_the_idle_cost():
    e = gap(2.0, 2.0, prices(tenant_mode="on_demand"))
    assert e["amount"] == money(Decimal(4) * Decimal(1795) / 3600)
    # the idle windows' time and the gap between them: the idle cost does not drop by the gap
    idle = Decimal(str(e["idle_s"])) + Decimal(595)
    assert Decimal(str(e["idle_s"])) == 1200 and e["idle_amount"] == money(Decimal(4) * idle / 3600) == "1.994444"


def test_one_missing_sample_in_an_idle_run_is_priced_at_its_neighbours_utilization():
    p = Pipeline(CFG, detect=False, billing=prices(), driver=Driver(route_jobs=False))
    for i in range(360):
        if i != 150:
            p.submit(message(T0 + 5 * i, gpus=[gpu(0, util_pct=2.0)]), f"t:{i}")
    p.flush()
    (e,) = [e for e in p.out.events if e["schema"] == "gpufleet.billing.v1"]
    assert e["estimated_s"] == 5.0 and e["amount"] == money(Decimal("3.20") * 1800 * Decimal("0.02") / 3600)


def test_the_underused_time_of_a_tenant_billed_by_use_is_the_providers_not_the_tenants():
    def hour(tenant_mode, weight="busy"):
        p = Pipeline(CFG, detect=False, billing=prices(weight, tenant_mode),
                     driver=Driver(route_jobs=False))
        for i in range(720):
            p.submit(message(T0 + 5 * i, gpus=[gpu(0, util_pct=20.0)]), f"t:{i}")
        p.flush()
        (e,) = [e for e in p.out.events if e["schema"] == "gpufleet.billing.v1"]
        return e
    by_use = hour("usage")                   # billed its busy hour at 3.20, at 20 % utilization
    assert (by_use["amount"], by_use["underused_s"]) == ("3.200000", 3600.0)
    assert (by_use["unused_amount"], by_use["unsold_amount"]) == ("0.000000", "3.200000")   # 80 % of 4.00 list
    by_util = hour("usage", "utilization")
    assert (by_util["amount"], by_util["unused_amount"], by_util["unsold_amount"]) == ("0.640000", "0.000000",
                                                                                       "3.200000")
    on_demand = hour("on_demand")            # paid 4.00 for it: the unused 80 % is the tenant's waste
    assert (on_demand["amount"], on_demand["unused_amount"], on_demand["unsold_amount"]) == (
        "4.000000", "3.200000", "0.000000")
