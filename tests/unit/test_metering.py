"""Metering by the rules of streams/billing/metering.py, on hand-made telemetry: what each sample covers, idle exactly
as the idle windows, when a period's record goes out, gaps by policy, minimum charges, MIG shares, restarts."""
import json
from decimal import Decimal

import pytest
from helpers import gpu, message

from gpufleet.contracts.events import Billing
from gpufleet.streams.billing.prices import BillingConfig, Price
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.idle import IDLE_WINDOWS
from gpufleet.streams.node import NodeProcessor
from gpufleet.streams.pipeline import Driver, Pipeline

CFG = StreamConfig(lateness_s=0, idle_window_s=600)
T0 = 1767571200            # 2026-01-05 00:00 UTC, an hour boundary


def run(samples, billing=None, cfg=CFG, flush=True, node="n1"):
    """samples: (ts, gpus, extra message fields); returns the pipeline (events and rows in its output)."""
    p = Pipeline(cfg, detect=False, billing=billing, driver=Driver(route_jobs=False))
    for ts, gpus, extra in samples:
        p.submit(message(ts, node=node, gpus=gpus, **extra), f"t:{ts}")
    if flush:
        p.flush()
    return p


def bills(p):
    out = [e for e in p.out.events if e["schema"] == "gpufleet.billing.v1"]
    for e in out:
        Billing.model_validate(e)
    return out


def steady(start, end, step=5.0, **g):
    return [(t, [gpu(0, **g)], {}) for t in _range(start, end, step)]


def _range(start, end, step):
    t = start
    while t < end:
        yield t
        t = round(t + step, 3)


def test_a_rental_across_periods_is_cut_at_the_boundary_and_every_second_counted():
    # 2 h 10 min rented, 30 min into the first hour: samples at :30:00 ... 02:39:55, each covering 5 s
    p = run(steady(T0 + 1800, T0 + 1800 + 7800, util_pct=70.0))
    b = bills(p)
    assert [(e["period_start"], e["rented_s"]) for e in b] == [(T0, 1800.0), (T0 + 3600, 3600.0),
                                                                (T0 + 7200, 2400.0)]
    for e in b:
        assert e["busy_s"] + e["idle_s"] == e["rented_s"] and e["idle_s"] == 0
        assert Decimal(e["amount"]) == (Decimal("2.0") * Decimal(str(e["rented_s"])) / 3600).quantize(
            Decimal("0.000001"))
        assert e["data_quality"] == "measured" and e["estimated_s"] == 0 and e["util_pct"] == 70.0
    assert b[0]["samples"] == 360 and b[0]["price_per_gpu_hour"] == "2.000000" and b[0]["billing_mode"] == "on_demand"


def test_a_period_goes_out_once_the_node_has_passed_its_end_not_before():
    p = run(steady(T0 + 3000, T0 + 3600), flush=False)
    assert bills(p) == []                                    # the last sample's time may run past 01:00
    p.submit(message(T0 + 3600, gpus=[gpu(0)]), "x")
    assert bills(p) == []                                    # the watermark is at 01:00, not past it
    p.submit(message(T0 + 3605, gpus=[gpu(0)]), "y")           # now the 01:00 sample is processed
    (e,) = bills(p)
    assert (e["period_start"], e["rented_s"]) == (T0, 600.0)


def test_a_sample_covers_its_interval_and_up_to_the_next_when_jittered():
    # the collector ticks 5 s apart give or take 20 ms: the time runs from sample to sample, no holes or overlaps
    ts = [T0 + 10, T0 + 15.02, T0 + 19.99, T0 + 25.01]
    p = run([(t, [gpu(0)], {}) for t in ts])
    (e,) = bills(p)
    assert e["rented_s"] == pytest.approx(25.01 + 5 - 10, abs=1e-9) and e["estimated_s"] == 0


def jitter(i):
    return (0.013, -0.008, 0.0)[i % 3]             # collectors tick 5 s apart, give or take a few ms


def idle_then_busy(n_idle, start=T0 + 3000, tenant="acme"):
    s = [(round(start + 5 * i + jitter(i), 3), [gpu(0, util_pct=1.0, tenant=tenant)], {}) for i in range(n_idle)]
    return s + [(round(start + 5 * (n_idle + i) + jitter(n_idle + i), 3), [gpu(0, util_pct=80.0, tenant=tenant)], {})
                for i in range(60)]


def window_ms(p):
    rows = p.out.rows.get(IDLE_WINDOWS, [])
    return sum(r[2] - r[1] for r in rows), rows


@pytest.mark.parametrize("n_idle", [121, 120, 200])
def test_idle_seconds_are_the_idle_windows_seconds_even_across_a_period_boundary(n_idle):
    samples = idle_then_busy(n_idle)
    p = run(samples)
    b = bills(p)
    idle_ms = sum(round(e["idle_s"] * 1000) for e in b)
    windows, rows = window_ms(p)
    assert idle_ms == windows
    assert (len(rows) == 1) == (n_idle > 120)       # 120 jittered samples come 13 ms short of the 600 s window
    # one continuous rental: its time runs from the first sample to the last one's end, no hole, no overlap
    first, last = samples[0][0], samples[-1][0]
    assert sum(round(e["rented_s"] * 1000) for e in b) == round((last + 5) * 1000) - round(first * 1000)
    for e in b:
        assert Decimal(str(e["busy_s"])) + Decimal(str(e["idle_s"])) == Decimal(str(e["rented_s"]))


def test_a_period_waits_for_an_idle_run_that_started_in_it_to_be_decided():
    # idle from 00:55: at 01:00 the run is 300 s long, not yet a window; the first hour is held until the
    # run reaches the window at 01:05 (its idle time then counted in both hours)
    samples = [(T0 + 3300 + 5 * i, [gpu(0, util_pct=0.0)], {}) for i in range(125)]
    p = run(samples[:70], flush=False)
    assert bills(p) == []
    for ts, gpus, _ in samples[70:]:
        p.submit(message(ts, gpus=gpus), "x")
    (first,) = bills(p)
    assert first["period_start"] == T0 and first["idle_s"] == 300.0 and first["busy_s"] == 0


def test_a_run_that_ends_short_of_the_window_is_busy():
    samples = [(T0 + 3300 + 5 * i, [gpu(0, util_pct=0.0)], {}) for i in range(100)]
    samples += [(T0 + 3800 + 5 * i, [gpu(0, util_pct=90.0)], {}) for i in range(10)]
    p = run(samples)
    b = bills(p)
    assert [e["idle_s"] for e in b] == [0, 0] and [e["busy_s"] for e in b] == [300.0, 250.0]
    assert b[0]["busy_util_pct"] == 0.0


def test_a_tenant_change_mid_period_gives_two_records_each_covering_its_samples():
    samples = [(T0 + 5 * i, [gpu(0, tenant="acme", job="a")], {}) for i in range(100)]
    samples += [(T0 + 500 + 5 * i, [gpu(0, tenant="globex", job="g")], {}) for i in range(100)]
    b = bills(run(samples))
    assert {(e["tenant"], e["job"], e["rented_s"]) for e in b} == {("acme", "a", 500.0), ("globex", "g", 500.0)}


def test_a_job_change_under_the_same_tenant_splits_the_record_not_the_rental():
    samples = [(T0 + 5 * i, [gpu(0, job="a" if i < 50 else "b")], {}) for i in range(100)]
    b = bills(run(samples))
    assert sorted((e["job"], e["rented_s"]) for e in b) == [("a", 250.0), ("b", 250.0)]


def gap(collector_after="c1", seq_jump=True, dropped=0, billing=None, gap_s=600.0):
    """One GPU rented by acme, sampled every 5 s from 00:00 to 00:10 and after a gap until 00:30."""
    before = [(T0 + 5 * i, [gpu(0)], {"collector_id": "c1", "seq": i}) for i in range(120)]
    resume, seq0 = T0 + 595 + gap_s, (120 + int(gap_s // 5) if seq_jump else 120)
    after = [(resume + 5 * i, [gpu(0)], {"collector_id": collector_after, "seq": seq0 + i,
                                           "dropped": dropped if i == 0 else 0}) for i in range(120)]
    return bills(run(before + after, billing=billing))


def test_a_gap_the_collector_reports_is_billed_as_estimated_under_the_evidence_policy():
    (e,) = gap()
    assert e["rented_s"] == 1200.0 + 595.0 and e["estimated_s"] == 595.0 and e["data_quality"] == "estimated"
    assert e["busy_s"] + e["idle_s"] == e["rented_s"] and e["unbilled_s"] == 0
    (e,) = gap(seq_jump=False, dropped=119)                      # a spool that dropped messages says so too
    assert e["estimated_s"] == 595.0


def test_a_gap_after_which_a_new_collector_speaks_is_not_billed_under_the_evidence_policy():
    (e,) = gap(collector_after="c2")                             # the node or its collector restarted
    assert e["rented_s"] == 1200.0 and e["estimated_s"] == 0 and e["unbilled_s"] == 595.0
    assert e["data_quality"] == "incomplete"
    (e,) = gap(seq_jump=False)                                   # same collector, nothing lost: no evidence
    assert e["unbilled_s"] == 595.0


def test_gap_policies_bill_skip_and_the_longest_gap_billed():
    (e,) = gap(collector_after="c2", billing=BillingConfig(gap_policy="bill"))
    assert e["estimated_s"] == 595.0
    (e,) = gap(billing=BillingConfig(gap_policy="skip"))
    assert e["estimated_s"] == 0 and e["unbilled_s"] == 595.0
    (e,) = gap(billing=BillingConfig(gap_policy="bill", max_gap_s=500))
    assert e["estimated_s"] == 0 and e["unbilled_s"] == 595.0


def test_one_missing_sample_is_estimated_and_kept_in_the_rental():
    samples = [(T0 + 5 * i, [gpu(0)], {}) for i in range(100) if i != 50]
    (e,) = bills(run(samples))
    assert e["rented_s"] == 500.0 and e["estimated_s"] == 5.0 and e["samples"] == 99


def test_a_gpu_missing_from_messages_that_arrive_is_not_billed_for_its_absence():
    samples = [(T0 + 5 * i, [gpu(0), gpu(1)] if not 20 <= i < 80 else [gpu(1)], {"collector_id": "c", "seq": i})
               for i in range(100)]
    b = {e["gpu_uuid"]: e for e in bills(run(samples, billing=BillingConfig(gap_policy="bill")))}
    assert b["GPU-1"]["rented_s"] == 500.0
    assert b["GPU-0"]["rented_s"] == 200.0 and b["GPU-0"]["estimated_s"] == 0 and b["GPU-0"]["unbilled_s"] == 0


def test_a_rental_shorter_than_the_on_demand_minimum_is_billed_the_minimum_where_it_ends():
    prices = [Price(match="*", mode="on_demand", per_gpu_hour=Decimal("3.6"), minimum_s=60)]
    samples = [(T0 + 3590 + 5 * i, [gpu(0)], {}) for i in range(4)] + [(T0 + 3610, [gpu(0, tenant=None)], {})]
    b = bills(run(samples, billing=BillingConfig(prices=prices)))
    assert [(e["period_start"], e["rented_s"], e["minimum_topup_s"]) for e in b] == [
        (T0, 10.0, 0.0), (T0 + 3600, 10.0, 40.0)]
    assert [e["amount"] for e in b] == ["0.010000", "0.050000"]      # 10 s, then 10 s + 40 s at 0.001/s
    # still rented when the input ends: no minimum (the rental has not ended)
    (e,) = bills(run(samples[:2], billing=BillingConfig(prices=prices)))
    assert e["minimum_topup_s"] == 0


def test_a_mig_instance_pays_its_share_of_the_physical_gpu():
    mig = dict(uuid="MIG-a", parent_uuid="GPU-0", mig_profile="3g.40gb", model="NVIDIA H100 80GB HBM3")
    (e,) = bills(run([(T0 + 5 * i, [gpu(0, **mig)], {}) for i in range(720)]))
    assert e["rented_s"] == 3600.0 and e["gpu_share"] == "0.428571" and e["mig_profile"] == "3g.40gb"
    assert e["amount"] == "0.857143"                                # 2.0 x 3/7, rounded once


def test_the_tenants_mode_bills_and_every_priced_mode_is_shown():
    prices = [Price(match="*", mode="on_demand", per_gpu_hour=Decimal("2")),
              Price(match="p1", mode="usage", per_gpu_hour=Decimal("3"), weight="busy"),
              Price(match="p1", mode="reserved", per_gpu_month=Decimal("1240"))]
    cfg = BillingConfig(prices=prices, tenants={"acme": "usage"}, teams={"acme/train-": "research"})
    samples = [(T0 + 5 * i, [gpu(0, util_pct=0.0 if i < 360 else 50.0, job="train-1")], {}) for i in range(720)]
    (e,) = bills(run(samples, billing=cfg))
    assert (e["idle_s"], e["busy_s"]) == (1800.0, 1800.0)
    assert e["billing_mode"] == "usage" and e["amount"] == "1.500000" and e["idle_amount"] == "0.000000"
    assert e["team"] == "research"
    # reserved: 1240 a month of 31 days = 1240 / 744 per hour
    assert e["amounts_by_mode"] == {"on_demand": "2.000000", "reserved": "1.666667", "usage": "1.500000"}


def test_the_end_of_input_emits_the_partial_period():
    b = bills(run(steady(T0, T0 + 100)))
    assert [(e["period_start"], e["rented_s"]) for e in b] == [(T0, 100.0)]


def test_no_billing_records_when_metering_is_off():
    assert bills(run(steady(T0, T0 + 7200), billing=BillingConfig(enabled=False))) == []


def test_a_node_restored_mid_run_from_its_saved_state_bills_what_the_running_one_bills():
    cfg = StreamConfig(lateness_s=10, idle_window_s=600)
    samples = idle_then_busy(150, start=T0 + 3200) + [(T0 + 4300 + 5 * i, [gpu(0, tenant="globex")], {})
                                                      for i in range(30)]
    msgs = [message(ts, gpus=gpus, **extra) for ts, gpus, extra in samples]
    whole = Pipeline(cfg, detect=False, driver=Driver(route_jobs=False))
    for i, m in enumerate(msgs):
        whole.submit(m, str(i))
    whole.flush()
    for cut in (40, 70, 100, 190):
        first = Pipeline(cfg, detect=False, driver=Driver(route_jobs=False))
        for i, m in enumerate(msgs[:cut]):
            first.submit(m, str(i))
        saved = json.loads(json.dumps(first.nodes["n1"].to_state()))
        second = Pipeline(cfg, detect=False, driver=Driver(route_jobs=False))
        second.nodes["n1"] = NodeProcessor.from_state("n1", saved)
        for i, m in enumerate(msgs[cut - 3:], cut - 3):           # the unacknowledged ones come again
            second.submit(m, str(i))
        second.flush()
        assert bills(first) + bills(second) == bills(whole), cut


def test_a_saved_billing_record_keeps_its_fields_by_name_and_counters_that_are_not_integers_are_refused():
    from gpufleet.contracts.state import StateError
    from gpufleet.streams.billing.metering import COUNTERS, Record

    rec = Record(1_796_083_200, "acme", "train-1", "pool-a", "H100", 3, None)
    rec.rented, rec.util_sum = 3_600_000, 100_000 * 3_600_000
    rec.settle(idle=False)
    saved = json.loads(json.dumps(rec.to_state()))
    assert saved["rented"] == 3_600_000 and saved["util_sum"] == 360_000_000_000 and saved["index"] == 3
    assert sorted(saved) == sorted(["period_start", "tenant", "job", "pool", "model", "index", "mig_profile",
                                    *COUNTERS])
    assert Record.from_state(saved).to_state() == saved
    with pytest.raises(StateError, match="64-bit integers"):
        Record.from_state({**saved, "busy": 1.5})
    with pytest.raises(StateError, match=r"lacks \['topup'\]"):
        Record.from_state({k: v for k, v in saved.items() if k != "topup"})
    with pytest.raises(OverflowError):          # never wraps around
        rec.util_sum += 2**63
