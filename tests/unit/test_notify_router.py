"""The router's decisions, on an in-process endpoint: once per (incident, status, receiver) across
restarts, acknowledgements only when all is final, groups and their timers, silences, inhibition,
a firing never after its resolve, reminders, the embedded outbox, partitions moving away."""
import time

import pytest
from notify_helpers import WEBHOOK, Endpoint, FakeClock, Rig, incident, make, unreachable

from gpufleet.streams.notify.matchers import Matcher
from gpufleet.streams.notify.silences import Silence


@pytest.fixture(autouse=True)
def secrets(monkeypatch):
    monkeypatch.setenv("T_SIGNING_KEY", "k")
    monkeypatch.setenv("T_SLACK_URL", "http://slack.test/hook")
    monkeypatch.setenv("T_PD_KEY", "pdkey")


ONE = {"route": {"receiver": "hook", "group_wait": 0}, "receivers": {"hook": WEBHOOK}}
TWO = {"route": {"receiver": "hook", "group_wait": 0, "routes": [
    {"match": {"severity": "critical"}, "receiver": "pd", "continue": True}, {"receiver": "hook"}]},
    "receivers": {"hook": WEBHOOK, "pd": {"type": "pagerduty", "routing_key_env": "T_PD_KEY", "url": "http://pd.test/",
                                          "rate_per_s": 0}}}


@pytest.fixture
def rigs(tmp_path):
    made = []

    def build(raw=ONE, **kw):
        rig = Rig(tmp_path / "outbox", raw, **kw)
        made.append(rig)
        return rig
    yield build
    for rig in made:
        rig.close()


def delivered(endpoint, part=""):
    return [(b["id"], b["status"]) if "id" in b else (b["dedup_key"], b["event_action"]) for b in endpoint.bodies(part)]


def test_told_once_per_incident_status_and_receiver_across_restarts(rigs):
    f, r = incident()
    first = rigs()
    first.offer(f, ref=("a", 1))
    first.offer(r, ref=("a", 2))
    assert first.settle() == [("a", 1), ("a", 2)]
    assert delivered(first.endpoint) == [(f["id"], "firing"), (f["id"], "resolved")]
    first.close()
    again = rigs()                                 # a restart: the same alerts come again
    again.offer(f, ref=("a", 1))
    again.offer(r, ref=("a", 2))
    assert again.router.owed() == 0 and again.settle() == [("a", 1), ("a", 2)]
    assert again.endpoint.calls == []


def test_an_input_is_acknowledged_only_once_every_delivery_it_owes_is_final(rigs):
    state = {"pd": 503}
    endpoint = Endpoint(lambda url, body: state["pd"] if "pd.test" in url else 200)
    rig = rigs(TWO, endpoint=endpoint)
    rig.offer(make(severity="critical"), ref="m1")
    deadline = time.monotonic() + 5
    while rig.router.owed() > 1 and time.monotonic() < deadline:
        rig.acked += rig.router.tick(flush_all=True)
    assert rig.acked == [] and rig.router.owed() == 1     # the webhook is told, PagerDuty still failing
    state["pd"] = 202
    assert rig.settle() == ["m1"]
    assert rig.outbox.counts() == {"sent": 2}


def test_the_same_alert_twice_while_under_way_is_told_once(rigs):
    gate = {"open": False}
    endpoint = Endpoint(lambda url, body: 200 if gate["open"] else 503)
    rig = rigs(endpoint=endpoint)
    a = make()
    rig.offer(a, ref="m1")
    rig.router.tick(flush_all=True)
    rig.offer(dict(a), ref="m2")                   # at-least-once topics repeat messages
    gate["open"] = True
    assert sorted(rig.settle()) == ["m1", "m2"]                  # both acknowledged...
    assert rig.outbox.counts() == {"sent": 1}                     # ...by one delivery
    assert endpoint.bodies() and all(b == a for b in endpoint.bodies())     # retries of that one delivery


def test_group_wait_then_group_interval(rigs):
    clock = FakeClock()
    raw = {"route": {"receiver": "slack", "group_by": ["kind"], "group_wait": "30s", "group_interval": "5m"},
           "receivers": {"slack": {"type": "slack", "url_env": "T_SLACK_URL", "rate_per_s": 0}}}
    rig = rigs(raw, clock=clock)
    rig.offer(make(target="GPU-1"), make(target="GPU-2", gpu="GPU-2"))
    clock.t += 29
    rig.router.tick()
    assert rig.router.owed() == 2 and rig.endpoint.calls == []
    clock.t += 1
    rig.settle(flush_all=False)
    (msg,) = rig.endpoint.bodies()
    assert msg["blocks"][0]["text"]["text"].startswith("[FIRING:2]")       # one message for the group
    rig.offer(make(target="GPU-3", gpu="GPU-3"))
    clock.t += 299
    rig.router.tick()
    assert len(rig.endpoint.calls) == 1
    clock.t += 1
    rig.settle(flush_all=False)
    assert len(rig.endpoint.calls) == 2
    rig.offer(make("straggler", "GPU-9", gpu="GPU-9"))          # another group: its own group_wait
    rig.router.tick()
    assert len(rig.endpoint.calls) == 2


def test_a_silenced_alert_is_recorded_not_sent_and_told_if_the_silence_ends_while_it_fires(rigs):
    silence = Silence("s-1", (Matcher("kind", "=", "idle"), Matcher("tenant", "=", "acme")), 0, 1e12)
    rig = rigs(silences=[silence])
    f, r = incident()
    other = make(target="GPU-2", gpu="GPU-2", tenant="globex")
    rig.offer(f, other)
    rig.settle()
    assert delivered(rig.endpoint) == [(other["id"], "firing")]
    assert rig.outbox.states([f["id"]]) == {(f["id"], "firing", "hook"): "silenced"}
    rig.silence_list.clear()                       # expired: the alert still fires, so it is told now
    rig.settle()
    rig.router.tick(flush_all=True)
    rig.settle()
    assert delivered(rig.endpoint)[-1] == (f["id"], "firing")
    rig.offer(r)
    rig.settle()
    assert delivered(rig.endpoint)[-1] == (f["id"], "resolved")


def test_the_resolve_of_a_silenced_firing_is_muted_too(rigs):
    rig = rigs(silences=[Silence("s-2", (Matcher("kind", "=", "idle"),), 0, 1e12)])
    f, r = incident()
    rig.offer(f)
    rig.settle()
    rig.offer(r)
    rig.settle()
    assert rig.endpoint.calls == []
    assert set(rig.outbox.states([f["id"]]).values()) == {"silenced"}


def test_a_node_level_incident_inhibits_gpu_level_ones_of_its_kind_on_its_node(rigs):
    rig = rigs()
    node = make("straggler", "node-3", node="node-3", gpu=None)
    gpu = make("straggler", "GPU-31", node="node-3", gpu="GPU-31")
    elsewhere = make("straggler", "GPU-41", node="node-4", gpu="GPU-41")
    other_kind = make("memory_leak", "GPU-32", node="node-3", gpu="GPU-32")
    rig.offer(node, gpu, elsewhere, other_kind)
    rig.settle()
    assert sorted(delivered(rig.endpoint)) == sorted([(node["id"], "firing"), (elsewhere["id"], "firing"),
                                                      (other_kind["id"], "firing")])
    assert rig.outbox.states([gpu["id"]])[(gpu["id"], "firing", "hook")] == "inhibited"
    rig.offer(make("straggler", "node-3", status="resolved", node="node-3", gpu=None))
    rig.settle()
    rig.router.tick(flush_all=True)
    rig.settle()
    assert delivered(rig.endpoint)[-2:] == [(node["id"], "resolved"), (gpu["id"], "firing")]   # still slow: told


def test_inhibition_from_node_level_incidents_another_router_saw(rigs):
    rig = rigs(firing={"n3": {"kind": "straggler", "severity": "warning", "tenant": "", "pool": "", "node": "node-3",
                              "job": "", "gpu": ""}})
    rig.offer(make("straggler", "GPU-31", node="node-3", gpu="GPU-31"))
    rig.settle()
    assert rig.endpoint.calls == [] and rig.outbox.counts() == {"inhibited": 1}


CRITICAL_OVER_WARNING = {**ONE, "inhibit_rules": [
    {"source_matchers": ["severity=critical"], "target_matchers": ["severity=warning"], "equal": ["node"]}]}


def test_a_general_inhibition_rule_mutes_targets_sharing_its_equal_labels(rigs):
    rig = rigs(CRITICAL_OVER_WARNING)
    crit = make("memory_leak", "GPU-1", severity="critical", node="n1", gpu="GPU-1")
    warn_same_node = make("idle", "GPU-2", node="n1", gpu="GPU-2")
    warn_other_node = make("idle", "GPU-9", node="n9", gpu="GPU-9")
    rig.offer(crit, warn_same_node, warn_other_node)
    rig.settle()
    assert sorted(delivered(rig.endpoint)) == sorted([(crit["id"], "firing"), (warn_other_node["id"], "firing")])
    state = rig.outbox.states([warn_same_node["id"]])
    assert state[(warn_same_node["id"], "firing", "hook")] == "inhibited"
    rig.offer(make("memory_leak", "GPU-1", status="resolved", severity="critical", node="n1", gpu="GPU-1"))
    rig.settle()
    rig.router.tick(flush_all=True)
    rig.settle()
    assert delivered(rig.endpoint)[-2:] == [(crit["id"], "resolved"), (warn_same_node["id"], "firing")]


def test_a_general_rule_uses_incidents_another_router_saw(rigs):
    other = {"x1": {"kind": "memory_leak", "severity": "critical", "tenant": "", "pool": "", "node": "n1",
                    "job": "", "gpu": "GPU-7"}}
    rig = rigs(CRITICAL_OVER_WARNING, firing=other)
    rig.offer(make("idle", "GPU-2", node="n1", gpu="GPU-2"), make("idle", "GPU-3", node="n3", gpu="GPU-3"))
    rig.settle()
    assert rig.outbox.counts() == {"inhibited": 1, "sent": 1}


def test_a_firing_is_never_told_after_its_own_resolve(rigs):
    f, r = incident()
    first = rigs()
    first.offer(r)                                 # the resolve alone (its firing was read elsewhere, or lost)
    first.settle()
    first.close()
    again = rigs()
    again.offer(f)                                 # then the firing turns up: never told after its resolve
    again.settle()
    assert delivered(again.endpoint) == []
    assert again.outbox.states([f["id"]])[(f["id"], "firing", "hook")] == "superseded"


def test_firing_and_resolve_queued_behind_an_outage_go_in_order(rigs):
    state = {"down": True}
    endpoint = Endpoint(lambda url, body: unreachable(url, body) if state["down"] else 200)
    rig = rigs(endpoint=endpoint)
    pairs = [incident(target=f"GPU-{i}", gpu=f"GPU-{i}") for i in range(20)]
    for f, _ in pairs:
        rig.offer(f)
    rig.router.tick(flush_all=True)
    for _, r in pairs:
        rig.offer(r)
    rig.router.tick(flush_all=True)
    state["down"] = False
    rig.settle()
    told = [(b["id"], b["status"]) for b in endpoint.bodies()]
    firsts = {}
    for i, key in enumerate(told):
        firsts.setdefault(key, i)
    for f, r in pairs:
        assert firsts[(f["id"], "firing")] < firsts[(r["id"], "resolved")]
    assert len(set(told)) == 40


def test_reminders_while_firing_and_none_after_the_resolve(rigs):
    wall = FakeClock(time.time())
    raw = {"route": {"receiver": "slack", "group_wait": 0, "repeat_interval": "1h"},
           "receivers": {"slack": {"type": "slack", "url_env": "T_SLACK_URL", "rate_per_s": 0}}}
    rig = rigs(raw, wall=wall)
    f, r = incident()
    rig.offer(f)
    rig.settle()
    wall.t += 3599
    rig.settle()
    assert len(rig.endpoint.calls) == 1
    wall.t += 2
    rig.router.tick()
    deadline = time.monotonic() + 5
    while len(rig.endpoint.calls) < 2 and time.monotonic() < deadline:
        rig.router.tick()
    reminder = rig.endpoint.bodies()[1]
    assert reminder["blocks"][0]["text"]["text"].startswith("[STILL FIRING:1]")
    rig.offer(r)
    rig.settle()
    wall.t += 7200
    rig.router.tick()
    rig.settle()
    assert [b["blocks"][0]["text"]["text"][:10] for b in rig.endpoint.bodies()] == \
        ["[FIRING:1]", "[STILL FIR", "[RESOLVED:"]


def test_reminder_state_survives_a_restart(rigs):
    wall = FakeClock(time.time())
    raw = {"route": {"receiver": "am", "group_wait": 0},
           "receivers": {"am": {"type": "alertmanager", "url": "http://am.test", "resend_interval": "1m"}}}
    first = rigs(raw, wall=wall)
    first.offer(make())
    first.settle()
    first.close()
    again = rigs(raw, wall=wall)
    again.router.load()
    wall.t += 61
    again.router.tick()
    again.settle()
    deadline = time.monotonic() + 5
    while not again.endpoint.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    (resent,) = again.endpoint.bodies()
    assert resent[0]["labels"]["alertname"] == "idle"          # re-sent so Alertmanager keeps it firing


def test_the_embedded_outbox_keeps_what_a_run_cut_short_still_owes(rigs):
    f, r = incident()
    cut_short = rigs(keep_pending=True, start=False)         # senders never ran: the process died first
    cut_short.offer(f, r)
    assert cut_short.outbox.counts() == {"pending": 2}
    cut_short.close()
    next_run = rigs(keep_pending=True)
    assert next_run.router.resume() == 2
    next_run.settle()
    assert delivered(next_run.endpoint) == [(f["id"], "firing"), (f["id"], "resolved")]
    assert next_run.outbox.counts() == {"sent": 2}


def test_deliveries_of_partitions_moved_away_are_dropped(rigs):
    state = {"down": True}
    rig = rigs(endpoint=Endpoint(lambda url, body: unreachable(url, body) if state["down"] else 200))
    rig.offer(make(target="GPU-1", gpu="GPU-1"), ref=(0, 5), partition=0)
    rig.offer(make(target="GPU-2", gpu="GPU-2"), ref=(1, 7), partition=1)
    rig.router.revoke({1})
    state["down"] = False
    assert rig.settle() == [(0, 5)]
    assert [b["gpu_uuid"] for b in rig.endpoint.bodies()] == ["GPU-1"]


def test_events_that_are_not_alerts_are_counted_and_acknowledged(rigs):
    rig = rigs()
    rig.router.offer([(None, "bad-json", 0), ({"schema": "gpufleet.billing.v1"}, "billing", 0)])
    assert rig.settle() == ["bad-json", "billing"]
    assert rig.router.counts["invalid"] == 2 and rig.endpoint.calls == []


def test_send_resolved_false_owes_no_resolve(rigs):
    raw = {"route": {"receiver": "hook", "group_wait": 0}, "receivers": {"hook": {**WEBHOOK, "send_resolved": False}}}
    rig = rigs(raw)
    f, r = incident()
    rig.offer(f, ref=1)
    rig.offer(r, ref=2)
    assert rig.settle() == [2, 1] or sorted(rig.acked) == [1, 2]
    assert delivered(rig.endpoint) == [(f["id"], "firing")]
