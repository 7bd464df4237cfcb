"""The ledger conserves GPU-seconds: a simulated fleet with rentals starting and ending mid-period, tenant
changes and gaps of every kind (tests/billing_fleet.py), checked GPU by GPU and period by period against the
telemetry, the idle windows and a hand computation of every amount. A month of 128 GPUs runs the same checks
in bench/bench_billing.py."""
import datetime as dt
from decimal import Decimal

import pytest
from billing_fleet import Conservation, fleet

from gpufleet.collectors.simulator import FleetSpec
from gpufleet.streams.billing.prices import BillingConfig, Price
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.idle import IDLE_WINDOWS
from gpufleet.streams.pipeline import Driver, Pipeline

START = dt.datetime(2026, 1, 5, tzinfo=dt.UTC).timestamp()
CHANGE = START + 5 * 3600                    # the east pool's price changes at 05:00
PRICES = [Price(match="*", mode="on_demand", per_gpu_hour=Decimal("2.10"), minimum_s=300),
          Price(match="h100-sxm-east", mode="on_demand", per_gpu_hour=Decimal("2.95")),
          Price(match="h100-sxm-east", mode="on_demand", per_gpu_hour=Decimal("3.35"), **{"from": CHANGE})]


def price_of(pool: str, period_start: int) -> Decimal:
    if pool == "h100-sxm-east":
        return Decimal("3.35") if period_start >= CHANGE else Decimal("2.95")
    return Decimal("2.10")


def meter(spec: FleetSpec, billing: BillingConfig) -> Conservation:
    check = Conservation(billing.period_s, price_of, billing.max_gap_s)
    p = Pipeline(StreamConfig(raw_samples=False), detect=False, billing=billing,
                 driver=Driver(route_jobs=False))
    for i, (msg, note) in enumerate(fleet(spec)):
        check.message(msg, note)
        p.submit(msg, f"fleet:{i}")
        if i % 1000 == 0:
            check.events(p.out.events)
            check.idle_windows(p.out.rows.get(IDLE_WINDOWS, []))
            p.out.events, p.out.rows = [], {}
    p.flush()
    check.events(p.out.events)
    check.idle_windows(p.out.rows.get(IDLE_WINDOWS, []))
    assert p.out.counts["dead_invalid"] == 0 and p.out.counts["dead_late"] == 0
    return check


@pytest.mark.parametrize("period_s", [3600, 900])
def test_a_fleet_with_tenant_changes_and_gaps_conserves_every_gpu_second(period_s):
    spec = FleetSpec(nodes=5, gpus_per_node=4, hours=8, seed=3, faults_per_kind=1, start=START)
    check = meter(spec, BillingConfig(prices=PRICES, period_s=period_s))
    check.check()
    # the fleet has what the test is about: estimated gaps, unbilled ones, idle time, many records
    assert sum(check.expect_estimated.values()) > 600_000 and sum(check.expect_unbilled.values()) > 600_000
    assert sum(check.windows.values()) > 3_600_000 and check.records > 40 * 3600 // period_s


def test_the_checks_catch_a_ledger_that_loses_time():
    spec = FleetSpec(nodes=3, gpus_per_node=2, hours=3, seed=3, faults_per_kind=0, start=START)
    check = meter(spec, BillingConfig(prices=PRICES))
    key = next(k for k, v in check.ledger.items() if v > 10_000)
    check.ledger[key] -= 5_100                                   # one interval and a bit
    with pytest.raises(AssertionError, match="ledger"):
        check.check()
