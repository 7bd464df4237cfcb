"""Underuse, by its one definition (gpufleet/contracts/waste.py): a rental held below 60 % is paged once (low
severity) while it lasts, and its billing records carry the underused time and money that every surface sums."""
from decimal import Decimal

from helpers import gpu, message

from gpufleet.contracts.events import Alert, Billing
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.pipeline import Pipeline

T0 = 1_800_000_000 - 1_800_000_000 % 3600         # on the hour


def fleet(hours: float = 6, util_n1: float = 5.6, until_n1: float | None = None) -> list[dict]:
    """n1: a service of 4 GPUs at ``util_n1`` (rented by acme, job svc-1); n2: training at 90 %."""
    out = []
    for k in range(int(hours * 3600 // 10)):
        t = T0 + 10 * k
        if until_n1 is None or t - T0 < until_n1:
            out.append(message(t, "n1", [gpu(i, f"n1-{i}", util_pct=util_n1 + (k + i) % 3 * 0.2, job="svc-1")
                                         for i in range(4)], interval_s=10.0))
        else:                                       # handed back: nobody rents its GPUs
            out.append(message(t, "n1", [gpu(i, f"n1-{i}", util_pct=0.0, tenant=None, job=None) for i in range(4)],
                               interval_s=10.0))
        out.append(message(t, "n2", [gpu(i, f"n2-{i}", util_pct=90.0, job="train-1") for i in range(4)],
                           interval_s=10.0))
    return out


def run(messages) -> list[dict]:
    p = Pipeline(StreamConfig(), detect=False)
    for i, m in enumerate(messages):
        p.submit(m, f"t:{i}")
    p.flush()
    return p.out.events


def test_a_rental_held_below_60_percent_is_one_low_severity_incident_with_its_money():
    events = run(fleet())
    under = [e for e in events if e.get("kind") == "underuse"]
    # one incident: its firing, then an update a period decided (its numbers now, no new page), never resolved
    assert {(e["status"], e["node"], e["job"], e["id"]) for e in under} == {("firing", "n1", "svc-1", under[0]["id"])}
    assert [e["revision"] for e in under] == list(range(len(under))) and len(under) == 5
    assert [e.get("change") for e in under] == [None] + ["updated"] * 4
    fire, last = under[0], under[-1]
    Alert.model_validate(fire)
    assert fire["severity"] == "info" and fire["gpu_uuid"] is None and fire["tenant"] == "acme"
    # detected when the stream decided it: its first period (an hour) ended, and a period and an idle window after
    assert fire["started_at"] == T0 and 3600 + 3600 + 600 <= fire["detected_at"] - T0 <= 3 * 3600
    ev = fire["evidence"]
    assert ev["gpus"] == 4 and 5.5 < ev["util_pct"] < 6 and ev["threshold_pct"] == 60.0
    assert ev["price_per_gpu_hour"] == "2.000000" and ev["currency"] == "USD"
    assert "underused for 1.0 h" in fire["summary"] and "below 60%" in fire["summary"]
    # the money is the billing records': each underused GPU-hour left about 94 % of its 2.00 unused
    billing = [e for e in events if e["schema"] == "gpufleet.billing.v1"]
    for b in billing:
        Billing.model_validate(b)
    n1 = [b for b in billing if b["node"] == "n1"]
    n2 = [b for b in billing if b["node"] == "n2"]
    assert all(b["underused_s"] == b["busy_s"] > 0 for b in n1)
    assert all(b["underused_s"] == 0 and b["unused_amount"] == "0.000000" for b in n2)
    unused = sum(Decimal(b["unused_amount"]) for b in n1)
    amount = sum(Decimal(b["amount"]) for b in n1)
    assert amount == Decimal("48.000000") and Decimal("44.8") < unused < Decimal("45.4")      # 24 GPU-hours
    # each event's money is the ledger's for the periods it has counted, through the end of the last
    for e in under:
        assert Decimal(e["evidence"]["unused_amount"]) == sum(Decimal(b["unused_amount"]) for b in n1
                                                              if b["period_end"] <= e["evidence"]["through"])
    assert ev["through"] == T0 + 3600 and last["evidence"]["through"] == T0 + 6 * 3600
    assert "underused for 6.0 h" in last["summary"] and last["detected_at"] == fire["detected_at"]


def test_the_incident_resolves_when_the_rental_ends_or_works_again():
    ended = [e for e in run(fleet(until_n1=3 * 3600)) if e.get("kind") == "underuse"]
    assert [(e["status"], e.get("change")) for e in ended] == [("firing", None), ("firing", "updated"),
                                                               ("firing", "updated"), ("resolved", None)]
    assert ended[-1]["evidence"]["resolution"] == "rental_ended" and ended[-1]["resolved_at"] == T0 + 3 * 3600
    assert ended[-1]["evidence"]["hours"] == 3.0
    busy = fleet(hours=6, util_n1=75.0)
    assert not [e for e in run(busy) if e.get("kind") == "underuse"]
    gone = [m for m in fleet() if m["node"] != "n1" or m["ts"] < T0 + 4 * 3600]     # n1 stops reporting
    silent = [e for e in run(gone) if e.get("kind") == "underuse"]
    assert [e["status"] for e in silent if e["status"] == "resolved" or not e["revision"]] == ["firing", "resolved"]
    assert silent[-1]["evidence"]["resolution"] == "no_telemetry"
    assert silent[-1]["resolved_at"] > silent[0]["detected_at"]       # told as it happened: it was firing first


def test_an_underuse_over_before_it_could_be_decided_is_never_told_as_firing_and_resolved_at_once():
    # an hour below 60 %, then busy, and the input ends: both periods are decided in one pass at the end; the
    # incident opened and ended within it is not paged at all (its waste is in the ledger all the same)
    short = [m for m in fleet(hours=2) if m["ts"] < T0 + 3600 or m["node"] == "n2"]
    short += [message(T0 + 3600 + 10 * k, "n1", [gpu(i, f"n1-{i}", util_pct=80.0, job="svc-1") for i in range(4)],
                      interval_s=10.0) for k in range(360)]
    events = run(sorted(short, key=lambda m: m["ts"]))
    assert not [e for e in events if e.get("kind") == "underuse"]
    unused = sum(Decimal(e["unused_amount"]) for e in events if e["schema"] == "gpufleet.billing.v1")
    assert unused > Decimal("7")                # the first hour's 4 GPU-hours at 2.00, about 94 % unused


def test_a_gap_shorter_than_silent_after_never_resolves_or_refires():
    """A node that sends nothing for 513 s (under stream.silent_after_s, 600 s), at several moments of a long
    underuse: one incident throughout, told once, then only updates; nothing resolves."""
    gaps = [(T0 + h * 3600 + 1500, T0 + h * 3600 + 1500 + 513) for h in range(6)]
    messages = [m for m in fleet(hours=7) if not any(lo <= m["ts"] < hi for lo, hi in gaps)]
    under = [e for e in run(messages) if e.get("kind") == "underuse"]
    assert len({e["id"] for e in under}) == 1
    assert [e["status"] for e in under] == ["firing"] * len(under)
    assert [e["revision"] for e in under] == list(range(len(under)))
