"""An incident's later steps through the router and the receivers: an escalation pages the routes its new
severity reaches under the same identity, a de-escalation is told to whoever heard of it, updates go only to
receivers that take them, a resolve only to receivers told of the incident; and a receiver that keeps failing
is marked down by its circuit breaker while the others go on."""
import json
import time

import pytest
from notify_helpers import WEBHOOK, Endpoint, Rig, make, unreachable

from gpufleet.streams.notify.outbox import read_status
from gpufleet.streams.notify.receivers import Notification, RoutesError
from gpufleet.streams.notify.routing import Routes
from gpufleet.streams.notify.sender import RetryPolicy


@pytest.fixture(autouse=True)
def secrets(monkeypatch):
    monkeypatch.setenv("T_SIGNING_KEY", "k")
    monkeypatch.setenv("T_SLACK_URL", "http://slack.test/hook")
    monkeypatch.setenv("T_PD_KEY", "pdkey")


PD = {"type": "pagerduty", "routing_key_env": "T_PD_KEY", "url": "http://pd.test/", "rate_per_s": 0}
AM = {"type": "alertmanager", "url": "http://am.test:9093"}
SLACK = {"type": "slack", "url_env": "T_SLACK_URL", "rate_per_s": 0}
# as the shipped example: critical pages and goes on; every alert with a pool to Alertmanager
ROUTES = {"route": {"receiver": "slack", "group_wait": 0, "routes": [
    {"match": {"severity": "critical"}, "receiver": "pd", "continue": True},
    {"match_re": {"pool": ".*"}, "receiver": "am", "continue": True},
    {"match_re": {"pool": ".*"}, "receiver": "hook", "continue": True},
    {"match": {"severity": "critical"}, "receiver": "slack"}]},
    "receivers": {"pd": PD, "am": AM, "hook": WEBHOOK, "slack": SLACK}}


@pytest.fixture
def rig(tmp_path):
    made = Rig(tmp_path / "outbox", ROUTES)
    yield made
    made.close()


def told(rig, part):
    return [json.loads(b) for u, b, _ in rig.endpoint.calls if part in u]


def pd_actions(rig):
    return [(b["event_action"], b.get("payload", {}).get("severity"), b.get("payload", {}).get("summary"))
            for b in told(rig, "pd.test")]


def leak(**kw):
    return make("memory_leak", "n1:GPU-1:pid:7", **kw)


def test_an_escalated_leak_pages_under_the_same_key_and_its_resolve_follows(rig):
    rig.offer(leak(severity="warning"))
    rig.settle()
    assert pd_actions(rig) == []                   # a warning pages nobody
    assert len(told(rig, "am.test")) == 1 and len(told(rig, "hook.test")) == 1
    rig.offer(leak(severity="critical", revision=1, change="escalated", previous="warning"))
    rig.settle()
    rig.offer(leak(severity="critical", status="resolved"))
    rig.settle()
    actions = pd_actions(rig)
    assert [a[0] for a in actions] == ["trigger", "resolve"]    # the trigger before any resolve
    assert actions[0][1] == "critical" and "revision 1" in actions[0][2]
    keys = {b["dedup_key"] for b in told(rig, "pd.test")}
    assert keys == {"memory_leak:n1:GPU-1:pid:7"}
    trigger = told(rig, "pd.test")[0]
    assert trigger["payload"]["custom_details"]["change"] == "escalated"
    assert trigger["payload"]["custom_details"]["previous_severity"] == "warning"
    # Slack takes critical only here: it hears of the escalation, as an escalation
    slack = told(rig, "slack.test")
    assert "ESCALATED (was warning)" in slack[0]["blocks"][1]["text"]["text"]
    # Alertmanager: the warning label set resolved and the critical one firing, in one request
    am = told(rig, "am.test")
    assert len(am) == 3
    severities = sorted((a["labels"]["severity"], a["endsAt"] <= a["startsAt"] or a["labels"]["severity"])
                        for a in am[1])
    assert [s for s, _ in severities] == ["critical", "warning"]
    # the webhook hears every step, each its own delivery id
    ids = [json.loads(b)["id"] + ":" + h["X-Gpufleet-Delivery"].split(":")[1]
           for u, b, h in rig.endpoint.calls if "hook.test" in u]
    assert [i.split(":")[1] for i in ids] == ["firing", "firing.1", "resolved"]


def test_a_resolve_goes_only_to_receivers_told_of_the_incident(rig):
    rig.offer(leak(severity="warning"))
    rig.settle()
    rig.offer(leak(severity="critical", status="resolved"))    # resolved at critical, never told as critical
    rig.settle()
    assert pd_actions(rig) == []                   # no resolve for a key PagerDuty never saw
    assert told(rig, "slack.test") == []
    aid = leak()["id"]
    states = rig.outbox.states([aid])
    assert states[(aid, "resolved", "pd")] == "superseded"
    assert states[(aid, "resolved", "am")] == "sent" and states[(aid, "resolved", "hook")] == "sent"
    rig.offer(leak(severity="critical", revision=1, change="escalated", previous="warning"))
    rig.settle()                                   # an escalation read after its resolve: never told
    assert pd_actions(rig) == []


def test_updates_go_to_receivers_that_take_them_and_a_deescalation_to_all_told(rig):
    rig.offer(leak(severity="critical"))
    rig.settle()
    rig.offer(leak(severity="critical", revision=1, change="updated"))
    rig.settle()
    assert [a[0] for a in pd_actions(rig)] == ["trigger"]       # PagerDuty and Slack take no updates by default
    assert len(told(rig, "slack.test")) == 1
    assert len(told(rig, "am.test")) == 2 and len(told(rig, "hook.test")) == 2
    rig.offer(leak(severity="warning", revision=2, change="deescalated", previous="critical"))
    rig.settle()
    assert [a[0] for a in pd_actions(rig)] == ["trigger", "trigger"]
    assert "DE-ESCALATED (was critical)" in told(rig, "slack.test")[-1]["blocks"][1]["text"]["text"]
    rig.offer(leak(severity="warning", status="resolved"))
    rig.settle()
    assert [a[0] for a in pd_actions(rig)] == ["trigger", "trigger", "resolve"]
    assert "RESOLVED" in told(rig, "slack.test")[-1]["blocks"][0]["text"]["text"]


def test_the_same_revision_twice_is_told_once(rig):
    rig.offer(leak(severity="critical"))
    rig.offer(leak(severity="critical", revision=1, change="updated"))
    rig.offer(leak(severity="critical", revision=1, change="updated"))
    rig.settle()
    assert len(told(rig, "hook.test")) == 2


def test_every_payload_links_its_runbook(rig):
    a = leak(severity="critical")
    a["runbook_url"] = "https://manual.example/runbooks/memory_leak/"
    rig.offer(a)
    rig.settle()
    assert told(rig, "pd.test")[0]["links"][0] == {"href": a["runbook_url"], "text": "Runbook: memory_leak"}
    assert told(rig, "am.test")[0][0]["annotations"]["runbook_url"] == a["runbook_url"]
    assert told(rig, "hook.test")[0]["runbook_url"] == a["runbook_url"]
    assert f"<{a['runbook_url']}|Runbook>" in json.dumps(told(rig, "slack.test")[0])
    assert "job" not in told(rig, "am.test")[0][0]["labels"]              # Prometheus' own label
    assert told(rig, "am.test")[0][0]["labels"]["tenant_job"] == "j1"


def test_a_pagerduty_url_that_is_not_one_is_refused():
    with pytest.raises(RoutesError, match=r"receivers\.pd.*url"):
        Routes.parse({"route": {"receiver": "pd"}, "receivers": {"pd": {**PD, "url": "not a url"}}})
    with pytest.raises(RoutesError, match=r"receivers\.pd.*url"):
        Routes.parse({"route": {"receiver": "pd"}, "receivers": {"pd": {**PD, "url": "ftp://pd.test/"}}})


def test_a_receiver_failing_past_its_budget_is_marked_down_and_the_others_go_on(tmp_path):
    state = {"down": True}
    endpoint = Endpoint(lambda url, body: unreachable(url, body) if state["down"] and "pd.test" in url else 200)
    policy = RetryPolicy(retry_for_s=0.3, backoff_s=0.02, backoff_max_s=0.05, timeout_s=1, probe_every_s=3600)
    rig = Rig(tmp_path / "outbox", ROUTES, endpoint=endpoint, policy=policy)
    try:
        leaks = [make("memory_leak", f"n1:GPU-{i}:pid:7", gpu=f"GPU-{i}", severity="critical") for i in range(30)]
        for a in leaks:
            rig.offer(a)
            rig.router.tick(flush_all=True)
        started = time.monotonic()
        rig.settle(timeout_s=20)
        took = time.monotonic() - started
        sender = rig.senders["pd"]
        assert not sender.up
        states = rig.outbox.states(a["id"] for a in leaks)
        pd = [states[(a["id"], "firing", "pd")] for a in leaks]
        assert pd == ["dead"] * 30
        assert all(states[(a["id"], "firing", "hook")] == "sent" for a in leaks)
        reasons = dict(rig.outbox._db().execute(
            "SELECT reason, count(*) FROM deliveries WHERE receiver = 'pd' GROUP BY reason").fetchall())
        assert reasons.get("retry_limit", 0) >= 1 and reasons["receiver_down"] >= 20
        assert took < 10                           # not 30 budgets one after another
        status = read_status(str(tmp_path / "outbox"))
        assert status["pd"]["breaker"] == "down" and status["hook"]["breaker"] == "up"
        assert status["pd"]["states"] == {"dead": 30}
        # it comes back: the next probe gets through and marks it up
        state["down"] = False
        sender.last_probe = 0.0                    # the probe interval has passed
        rig.offer(make("memory_leak", "n1:GPU-99:pid:7", gpu="GPU-99", severity="critical"))
        rig.settle()
        assert sender.up and read_status(str(tmp_path / "outbox"))["pd"]["breaker"] == "up"
    finally:
        rig.close()


def test_alertmanager_escalation_resolves_the_old_label_set():
    routes = Routes.parse({"route": {"receiver": "am"}, "receivers": {"am": AM}})
    am = routes.receivers["am"]
    am.clock = lambda: 5000.0
    (req,) = am.requests(Notification("am", {}, [leak(severity="critical", revision=1, change="escalated",
                                                      previous="warning")]))
    now, old = json.loads(req.body)
    assert now["labels"]["severity"] == "critical" and old["labels"]["severity"] == "warning"
    assert old["endsAt"] <= "1970-01-01T01:23:20.000Z" and now["annotations"]["change"] == "escalated"
    assert {k: v for k, v in now["labels"].items() if k != "severity"} == \
        {k: v for k, v in old["labels"].items() if k != "severity"}
