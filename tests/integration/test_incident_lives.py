"""Whole incident lives, played against local HTTP receivers through the shipped routing file
(deploy/notify/routes.toml with its receivers pointed here): every payload at every step of a leak that warns,
escalates and ends in an out-of-memory; an underuse that lasts six hours; a straggler that flaps; a node that goes
silent and comes back; a receiver down for longer than its retry budget during a storm (the ten minutes of the
field, scaled down to seconds: the same states in the same order)."""
from __future__ import annotations

import json
import queue
import time
import tomllib
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from helpers import gpu, message

from gpufleet.contracts.output import Output
from gpufleet.models.detectors import memory_leak, straggler
from gpufleet.models.detectors.base import JobContext, JobItem
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.notify.outbox import Outbox, read_status
from gpufleet.streams.notify.router import Router
from gpufleet.streams.notify.routing import Routes
from gpufleet.streams.notify.sender import RetryPolicy, Sender
from gpufleet.streams.notify.testing import RecordingReceiver
from gpufleet.streams.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[2]
MANUAL = "http://127.0.0.1:8080/manual/runbooks/"


@pytest.fixture
def receiver():
    with RecordingReceiver() as r:
        yield r


@pytest.fixture
def shipped(receiver, tmp_path, monkeypatch):
    """The shipped routing file, each receiver pointed at the local one (a path per receiver)."""
    raw = tomllib.loads((ROOT / "deploy" / "notify" / "routes.toml").read_text())
    r = raw["receivers"]
    monkeypatch.setenv("SLACK_WEBHOOK_URL", receiver.url("/slack"))
    monkeypatch.setenv("ACME_SIGNING_KEY", "acme-key")
    key = tmp_path / "pagerduty-routing-key"
    key.write_text("routing-key\n")
    r["oncall"].update(routing_key_file=str(key), url=receiver.url("/pagerduty"))
    r["acme-webhook"]["url"] = receiver.url("/webhook")
    r["alertmanager"]["url"] = receiver.url("/alertmanager")
    return raw


class Desk:
    """The router and its senders over a delivery log, delivering by HTTP."""

    def __init__(self, raw: dict, directory: Path, policy: RetryPolicy | None = None):
        self.routes = Routes.parse(raw)
        self.outbox = Outbox(str(directory), fsync=False)
        self.results: queue.Queue = queue.Queue()
        policy = policy or RetryPolicy(retry_for_s=10, backoff_s=0.05, backoff_max_s=0.2, timeout_s=5)
        self.senders = {n: Sender(r, self.outbox, policy, self.results, seed=1)
                        for n, r in self.routes.receivers.items()}
        self.router = Router(self.routes, self.outbox, self.senders, self.results)
        for s in self.senders.values():
            s.start()

    def tell(self, events: list[dict], each: bool = True, timeout_s: float = 60) -> None:
        """Offer the alert events in stream order, delivering what each owes before the next (``each``)."""
        for e in events:
            self.router.offer([(e, None, -1)])
            if each:
                self.settle(timeout_s)
        self.settle(timeout_s)

    def settle(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self.router.tick(flush_all=True)
            if not self.router.owed():
                return
            assert time.monotonic() < deadline, f"{self.router.owed()} deliveries still owed"
            time.sleep(0.01)

    def close(self) -> None:
        for s in self.senders.values():
            s.stop()
        for s in self.senders.values():
            s.join(timeout=10)
        self.outbox.close()


@pytest.fixture
def desk(shipped, tmp_path):
    made = Desk(shipped, tmp_path / "outbox")
    yield made
    made.close()


def bodies(receiver, path):
    return [r.json() for r in receiver.received(path, accepted_only=True)]


def alerts_only(events):
    return [e for e in events if e.get("schema") == "gpufleet.alert.v1"]


# -- a leak: warns, escalates, ends in an out-of-memory ------------------------------------------------------------
def leak_events() -> list[dict]:
    """One GPU of 24 GB sampled every 5 s: its process grows 0.1 GB a minute from 8 GB from minute 10, reaches the
    limit at about minute 163 and dies there at minute 166; the job restarts it a minute later. Windows of a
    process 30 minutes old or more score 0.99 (the trained trees are judged elsewhere: this is its life)."""
    span = memory_leak.FEATURES.index("span")
    decider = NS(threshold=0.9, persist_on=1, persist_off=2, hold_down_s=None, urgent_score=None,
                 score_many=lambda xs: [0.99 if x[span] >= 0.5 else 0.0 for x in xs])
    detector, out = memory_leak.Detector(), Output()
    ctx = NS(out=out, recorder=None, flags=NS(quiet=set(), starved=set()))
    for k in range(12 * 190):
        m = k / 12
        used, pid = min(8e9 + 0.1e9 * max(0.0, m - 10), 23.6e9), 100
        if 166 <= m < 167:
            used, pid = 1e9, None
        elif m >= 167:
            used, pid = 8e9, 101
        g = NS(uuid="GPU-leak", index=0, util_pct=50.0, mem_used_bytes=used, mem_total_bytes=24e9,
               processes=[NS(pid=pid)] if pid is not None else [], job="svc-7", tenant="stark")
        detector.add(NS(ts=1.8e9 + 5 * k, node="node-3", pool="h100-east", gpus=[g]), decider, ctx)
    return alerts_only(out.events)


def test_a_leak_warns_escalates_pages_and_ends_in_its_out_of_memory(desk, receiver):
    events = leak_events()
    steps = [(e["status"], e["severity"], e.get("change")) for e in events]
    fired, *later, ended = events
    assert steps[0] == ("firing", "warning", None) and steps[-1][0] == "resolved"
    escalated = [e for e in later if e.get("change") == "escalated"]
    assert len(escalated) == 1 and escalated[0]["previous_severity"] == "warning"
    assert escalated[0]["evidence"]["minutes_to_oom"] <= 30 < fired["evidence"]["minutes_to_oom"]
    assert ended["evidence"]["resolution"] == "out_of_memory" and ended["severity"] == "critical"
    assert len({e["id"] for e in events}) == 1
    desk.tell(events)
    # PagerDuty: nothing while it warned; the trigger at the escalation, under the incident's key; then its resolve
    pd = bodies(receiver, "/pagerduty")
    assert [(b["event_action"], b["dedup_key"]) for b in pd] == [("trigger", fired["dedup_key"]),
                                                                 ("resolve", fired["dedup_key"])]
    assert pd[0]["payload"]["severity"] == "critical" and pd[0]["payload"]["custom_details"]["change"] == "escalated"
    assert pd[0]["links"][0]["href"] == MANUAL + "memory_leak/"
    # Alertmanager: every step; at the escalation the warning label set resolved beside the critical one firing
    am = bodies(receiver, "/alertmanager")
    assert len(am) == len(events)
    assert [len(b) for b in am] == [2 if e.get("change") == "escalated" else 1 for e in events]
    for body, e in zip(am, events, strict=True):
        now = body[0]
        assert now["labels"]["severity"] == e["severity"] and now["labels"]["tenant_job"] == "svc-7"
        assert "job" not in now["labels"] and now["annotations"]["runbook_url"] == MANUAL + "memory_leak/"
        assert json.loads(now["annotations"]["evidence"]) == e["evidence"]      # the numbers of that step
        if e.get("change") == "escalated":
            old = body[1]
            assert old["labels"]["severity"] == "warning" and old["endsAt"] <= now["endsAt"]
    minutes = [json.loads(b[0]["annotations"]["evidence"])["minutes_to_oom"] for b in am[:-1]]
    assert minutes == sorted(minutes, reverse=True) and minutes[0] > minutes[-1]     # current at every step
    assert "out of memory" in am[-1][0]["annotations"]["summary"]
    assert bodies(receiver, "/slack") == [] and bodies(receiver, "/webhook") == []


# -- an underuse that lasts six hours --------------------------------------------------------------------------------
def underuse_events() -> tuple[list[dict], list[dict]]:
    """A service of 4 GPUs at about 6 % for six hours, then handed back: its alerts and its billing records."""
    t0 = 1_800_000_000 - 1_800_000_000 % 3600
    p = Pipeline(StreamConfig(), detect=False)
    for k in range(int(7.5 * 3600 // 10)):
        t = t0 + 10 * k
        rented = t - t0 < 6 * 3600
        p.submit(message(t, "node-5", [gpu(i, f"n5-{i}", util_pct=5.6 + (k + i) % 3 * 0.2 if rented else 0.0,
                                           job="svc-1" if rented else None, tenant="globex" if rented else None)
                                       for i in range(4)], interval_s=10.0), f"u:{k}")
    p.flush()
    events = [e for e in p.out.events if e.get("kind") == "underuse"]
    return events, [e for e in p.out.events if e.get("schema") == "gpufleet.billing.v1"]


def test_an_underuse_of_six_hours_is_one_chat_message_whose_resolve_has_the_bills_numbers(desk, receiver):
    events, billing = underuse_events()
    assert [e["status"] for e in events] == ["firing"] * 6 + ["resolved"]
    assert [e.get("revision") for e in events[:6]] == list(range(6)) and len({e["id"] for e in events}) == 1
    for e in events:                           # each step's money is the ledger's up to the periods it counted
        through = e["evidence"]["through"]
        assert Decimal(e["evidence"]["unused_amount"]) == sum(Decimal(b["unused_amount"]) for b in billing
                                                              if b["period_end"] <= through)
    desk.tell(events)
    slack = bodies(receiver, "/slack")
    # the route for underuse is chat only: told once as it fired, then its resolve; the updates are not chat's
    heads = [b["blocks"][0]["text"]["text"] for b in slack]
    assert [h.split("]")[0] for h in heads] == ["[FIRING:1", "[RESOLVED:1"]
    first, last = (b["blocks"][1]["text"]["text"] for b in slack)
    assert "underused for 1.0 h" in first and "was underused for 6.0 h" in last and "rental ended" in last
    total = sum(Decimal(b["unused_amount"]) for b in billing)
    assert f"{total:.6f}" in last                     # the amount the bill says, at the end
    assert f"<{MANUAL}underuse/|Runbook>" in json.dumps(slack[0])
    assert bodies(receiver, "/pagerduty") == [] and bodies(receiver, "/alertmanager") == []


# -- a straggler that flaps ------------------------------------------------------------------------------------------
def straggler_events() -> list[dict]:
    """A 4-GPU job sampled every 5 s: GPU 3 slow (68 %, SM clock 1200 MHz) for 5 minutes, level for 2, slow for 5
    again, then level: within the kind's hold-down (5 minutes), one incident."""
    decider = NS(threshold=0.2, persist_on=1, persist_off=1, hold_down_s=300.0, urgent_score=None,
                 score_many=lambda xs: [x[straggler.FEATURES.index("slowdown")] for x in xs])
    d, out = straggler.Detector(), Output()
    for k in range(12 * 40):
        m = k / 12
        slow = 10 <= m < 15 or 17 <= m < 22
        gpus = [[f"u{i}", i, 68.0 if (i == 3 and slow) else 95.0, 1200 if (i == 3 and slow) else 1800, 1980, 500.0,
                 700.0, 60.0, 0, 1e9, 8e10] for i in range(4)]
        d.add(JobItem(1.8e9 + 5 * k, "node-9", {"interval": 5.0, "gpus": gpus}), decider,
              JobContext("train-4", "acme", "h100-east", out, None))
    return alerts_only(out.events)


def test_a_flapping_straggler_is_one_incident_told_once_and_resolved_once(desk, receiver):
    events = straggler_events()
    assert [e["status"] for e in events if not e.get("revision")] == ["firing", "resolved"]
    assert len({e["id"] for e in events}) == 1 and events[-1]["evidence"]["flaps"] == 1
    desk.tell(events)
    routed = {m.receiver for m in desk.routes.match(events[0])}
    # tenant acme: its webhook hears straggler? no (idle, memory_leak, underuse only); Alertmanager does
    assert "alertmanager" in routed and "acme-webhook" not in routed
    am = bodies(receiver, "/alertmanager")
    assert len(am) == len(events)                     # the firing, its updates if any, its one resolve
    ended = ["resolution" in json.loads(b[0]["annotations"]["evidence"]) for b in am]
    assert ended == [False] * (len(am) - 1) + [True]
    assert json.loads(am[-1][0]["annotations"]["evidence"])["flaps"] == 1
    assert len({b[0]["annotations"]["incident"] for b in am}) == 1
    pd = bodies(receiver, "/pagerduty")
    if events[0]["severity"] == "critical":
        assert [b["event_action"] for b in pd] == ["trigger", "resolve"]
    else:
        assert pd == []


# -- a node that goes silent and comes back ------------------------------------------------------------------------
def silent_node_events() -> list[dict]:
    """An idle rented GPU on node-2, every 5 s; the node is silent from minute 30 to minute 66, then reports again,
    still idle."""
    p = Pipeline(StreamConfig(), detect=False)
    for k in range(int(5400 // 5)):
        t = 1.8e9 + 5 * k
        if not 1800 <= t - 1.8e9 < 4000:
            p.submit(message(t, "node-2", [gpu(0, "GPU-2", util_pct=0.0, job="j2", tenant="acme")]), f"s:{k}")
        p.submit(message(t, "node-1", [gpu(0, "GPU-1", util_pct=60.0, job="j1")]), f"o:{k}")
    p.flush()
    return [e for e in p.out.events if e.get("kind") == "idle" and e["gpu_uuid"] == "GPU-2"]


def test_a_silent_node_resolves_with_no_telemetry_and_comes_back_as_a_new_incident(desk, receiver):
    events = silent_node_events()
    first = [e for e in events if not e.get("revision")]
    assert [e["status"] for e in first] == ["firing", "resolved", "firing"]
    assert first[1]["evidence"]["resolution"] == "no_telemetry" and first[0]["id"] != first[2]["id"]
    desk.tell(events)
    hook = receiver.received("/webhook", accepted_only=True)       # tenant acme's idle alerts: its signed webhook
    steps = [(r.json()["id"], r.headers["x-gpufleet-delivery"].split(":")[1]) for r in hook]
    assert [s for _, s in steps] == [("firing.1" if e.get("revision") else e["status"]) for e in events]
    assert [i for i, _ in steps] == [e["id"] for e in events]
    assert hook[1].json()["summary"].startswith(events[1]["summary"][:20])
    assert all(r.json()["runbook_url"] == MANUAL + "idle/" for r in hook)
    assert "no telemetry since" in hook[1].json()["summary"]
    assert bodies(receiver, "/alertmanager") == []    # acme's route takes its idle alerts, and does not continue


# -- a receiver down during a storm ------------------------------------------------------------------------------------
def test_a_receiver_down_past_its_budget_in_a_storm_is_marked_down_and_holds_no_one(shipped, tmp_path):
    """A storm of 200 critical incidents while PagerDuty's port is closed for longer than its retry budget (scaled:
    a budget of 2 s, a probe every 3 s, an outage of 6 s): the first delivery is retried through its budget, the
    receiver is marked down, the rest are dead-lettered at once; Alertmanager, on the same storm, takes every one
    meanwhile; once PagerDuty is back a probe gets through and it is marked up."""
    from gpufleet.contracts.events import Facts, Told, Where, alert
    with RecordingReceiver() as pd_side, RecordingReceiver() as am_side:
        shipped["receivers"]["oncall"]["url"] = pd_side.url("/pagerduty")
        shipped["receivers"]["alertmanager"]["url"] = am_side.url("/alertmanager")
        pd_port = pd_side.port
        pd_side.down()
        policy = RetryPolicy(retry_for_s=2, backoff_s=0.1, backoff_max_s=0.5, timeout_s=2, probe_every_s=3)
        desk = Desk(shipped, tmp_path / "outbox", policy)
        try:
            storm = [alert("memory_leak", f"node-{i}:GPU-0:pid:1", Facts(
                status="firing", severity="critical", where=Where(node=f"node-{i}", gpu_uuid=f"GPU-{i}", job="j",
                                                                 tenant="t", pool="h100-east"),
                started_at=1.8e9, detected_at=1.8e9 + 60, resolved_at=None, score=0.99,
                told=Told("leak", {"minutes_to_oom": 12.0}))) for i in range(200)]
            started = time.monotonic()
            desk.tell(storm, each=False, timeout_s=60)
            took = time.monotonic() - started
            assert len(am_side.received("/alertmanager", accepted_only=True)) >= 1
            told_am = sum(len(r.json()) for r in am_side.received("/alertmanager", accepted_only=True))
            assert told_am == 200
            states = desk.outbox.states(a["id"] for a in storm)
            pd = [states[(a["id"], "firing", "oncall")] for a in storm]
            assert pd == ["dead"] * 200 and took < 30
            status = read_status(str(tmp_path / "outbox"))
            assert status["oncall"]["breaker"] == "down" and status["alertmanager"]["breaker"] == "up"
            assert not desk.senders["oncall"].up
            # it comes back on its port; after the probe interval the next delivery is the probe, and gets through
            back = RecordingReceiver(port=pd_port).up()
            try:
                time.sleep(3.1)
                late = alert("memory_leak", "node-x:GPU-0:pid:1", Facts(
                    status="firing", severity="critical", where=Where(node="node-x", gpu_uuid="GPU-x", job="j",
                                                                     tenant="t", pool="h100-east"),
                    started_at=1.8e9, detected_at=1.8e9 + 60, resolved_at=None, score=0.99,
                    told=Told("leak", {"minutes_to_oom": 12.0})))
                desk.tell([late])
                assert [r.json()["dedup_key"] for r in back.received("/pagerduty")] == [late["dedup_key"]]
                assert desk.senders["oncall"].up
                assert read_status(str(tmp_path / "outbox"))["oncall"]["breaker"] == "up"
            finally:
                back.down()
        finally:
            desk.close()
