"""What each receiver sends, field by field against the published formats, and how it reads answers.

PagerDuty Events API v2 ("Send an Alert Event"): routing_key, event_action, dedup_key (<= 255),
payload.summary (<= 1024), payload.source, payload.severity (critical, error, warning, info),
payload.timestamp, component, group, class, custom_details; 202 accepted, 400 not retried.
Slack incoming webhooks with Block Kit: text fallback, <= 50 blocks, header plain_text <= 150,
section text <= 3000, <= 10 fields of <= 2000 each, context <= 10 elements.
"""
import datetime as dt
import json

import pytest
from notify_helpers import make

from gpufleet.streams.notify.http import Response
from gpufleet.streams.notify.receivers import Notification
from gpufleet.streams.notify.receivers.base import retry_after
from gpufleet.streams.notify.receivers.webhook import signature, verify
from gpufleet.streams.notify.routing import Routes

PD_KEY = "0123456789abcdef0123456789abcdef"
SLACK_URL = "https://hooks.slack.test/services/T0/B0/XYZsecret"


@pytest.fixture
def receivers(monkeypatch):
    monkeypatch.setenv("T_PD_KEY", PD_KEY)
    monkeypatch.setenv("T_SLACK_URL", SLACK_URL)
    monkeypatch.setenv("T_SIGNING_KEY", "signing-key")
    r = Routes.parse({"route": {"receiver": "pd"}, "operator_url": "https://ops.test/n/{node}",
                      "receivers": {
                          "pd": {"type": "pagerduty", "routing_key_env": "T_PD_KEY", "severity": {"info": "error"}},
                          "slack": {"type": "slack", "url_env": "T_SLACK_URL"},
                          "am": {"type": "alertmanager", "url": "http://am.test:9093/", "resend_interval": "1m"},
                          "hook": {"type": "webhook", "url": "https://hooks.test/in",
                                   "signing_key_env": "T_SIGNING_KEY"}}})
    return r.receivers


def iso_ok(text):
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).tzinfo is not None


def test_pagerduty_trigger_has_every_published_field(receivers):
    a = make("straggler", "GPU-7", severity="critical", gpu="GPU-7", node="node-3", pool="h100-east", job="train-1")
    (req,) = receivers["pd"].requests(Notification("pd", {}, [a]))
    body = json.loads(req.body)
    assert req.url == "https://events.pagerduty.com/v2/enqueue" and req.headers["Content-Type"] == "application/json"
    assert set(body) == {"routing_key", "event_action", "dedup_key", "payload", "client", "client_url", "links"}
    assert body["routing_key"] == PD_KEY and body["event_action"] == "trigger"
    assert body["dedup_key"] == a["dedup_key"] == "straggler:GPU-7"
    p = body["payload"]
    assert set(p) == {"summary", "source", "severity", "timestamp", "component", "group", "class", "custom_details"}
    assert p["summary"] == a["summary"] and p["source"] == "node-3" and p["severity"] == "critical"
    assert iso_ok(p["timestamp"]) and p["timestamp"].startswith("1970-01-01T00:26:40")   # detected_at 1600
    assert (p["component"], p["group"], p["class"]) == ("GPU-7", "h100-east", "straggler")
    assert p["custom_details"] == a["evidence"]
    assert body["client"] == "gpufleet" and body["client_url"] == "https://ops.test/n/node-3"
    assert body["links"] == [{"href": "https://ops.test/n/node-3", "text": "Operator view"}]


def test_pagerduty_resolve_and_limits(receivers):
    a = make("idle", "GPU-1", status="resolved")
    (req,) = receivers["pd"].requests(Notification("pd", {}, [a]))
    assert json.loads(req.body) == {"routing_key": PD_KEY, "event_action": "resolve", "dedup_key": "idle:GPU-1"}
    long = make("idle", "G" * 400, severity="info", gpu=None, job=None, pool=None)
    long["summary"] = "s" * 5000
    body = json.loads(receivers["pd"].requests(Notification("pd", {}, [long]))[0].body)
    assert len(body["dedup_key"]) == 255 and len(body["payload"]["summary"]) == 1024
    assert body["payload"]["severity"] == "error"                 # mapped by the receiver's setting
    assert "component" not in body["payload"] and "group" not in body["payload"]
    several = receivers["pd"].requests(Notification("pd", {}, [make(target="a"), make(target="b")]))
    assert [r.alerts for r in several] == [[0], [1]]               # one event per request


@pytest.mark.parametrize("severity, expected", [("critical", "critical"), ("warning", "warning")])
def test_pagerduty_severity_map(receivers, severity, expected):
    body = json.loads(receivers["pd"].requests(Notification("pd", {}, [make(severity=severity)]))[0].body)
    assert body["payload"]["severity"] == expected


def test_pagerduty_answers(receivers):
    pd = receivers["pd"]
    assert pd.verdict(Response(202, {}, b'{"status":"success"}')).outcome == "delivered"
    bad = pd.verdict(Response(400, {}, json.dumps({"status": "invalid event", "message": "Event object is invalid",
                                                   "errors": ["'payload.source' is missing"]}).encode()))
    assert bad.outcome == "rejected" and "Event object is invalid" in bad.detail and "payload.source" in bad.detail
    limited = pd.verdict(Response(429, {"retry-after": "30"}, b""))
    assert (limited.outcome, limited.retry_after_s) == ("rate_limited", 30.0)
    assert pd.verdict(Response(502, {}, b"bad gateway")).outcome == "retry"
    assert pd.verdict(Response(403, {}, b"")).outcome == "rejected"
    assert pd.rate == (2.0, 10)


def blocks_text(blocks):
    return sum(len(json.dumps(b)) for b in blocks)


def test_slack_message_is_block_kit_with_a_fallback(receivers):
    a, b = make("idle", "GPU-1"), make("idle", "GPU-2", gpu="GPU-2", status="resolved")
    (req,) = receivers["slack"].requests(Notification("slack", {"kind": "idle", "pool": "h100-east"}, [a, b]))
    assert req.url == SLACK_URL and req.alerts == [0, 1]
    msg = json.loads(req.body)
    assert set(msg) == {"text", "blocks"}
    assert msg["text"].startswith("[FIRING:1, RESOLVED:1] gpufleet: idle h100-east")
    header, s1, c1, s2, c2 = msg["blocks"]
    assert header == {"type": "header", "text": {"type": "plain_text", "text": "[FIRING:1, RESOLVED:1] gpufleet: "
                                                                                 "idle h100-east", "emoji": False}}
    assert s1["type"] == "section" and s1["text"]["type"] == "mrkdwn" and "*FIRING*" in s1["text"]["text"]
    assert s1["fields"] == [{"type": "mrkdwn", "text": "*x*\n1"}]             # the evidence as a table
    assert "*RESOLVED*" in s2["text"]["text"]
    link = "<https://ops.test/n/n1|Open in the operator view>"
    assert c1["type"] == "context" and c1["elements"][-1] == {"type": "mrkdwn", "text": link}
    assert "resolved 1970" in c2["elements"][0]["text"]


def test_slack_stays_within_its_limits_and_shows_every_alert_of_a_huge_group(receivers):
    alerts = []
    for i in range(80):
        a = make("straggler", f"GPU-{i}", gpu=f"GPU-{i}")
        a["summary"] = "<slow> & " + "x" * 4000
        a["evidence"] = {f"k{j}": "v" * 3000 for j in range(15)}
        alerts.append(a)
    requests = receivers["slack"].requests(Notification("slack", {"kind": "straggler" * 30}, alerts))
    assert len(requests) > 1
    assert sorted(i for r in requests for i in r.alerts) == list(range(80))       # every alert, once
    for k, req in enumerate(requests, 1):
        msg = json.loads(req.body)
        blocks = msg["blocks"]
        assert len(blocks) <= 50 and blocks_text(blocks) <= 11_000
        assert len(blocks[0]["text"]["text"]) <= 150 and blocks[0]["text"]["text"].endswith(f"({k} of {len(requests)})")
        shown = [b for b in blocks if b["type"] == "section"]
        assert len(shown) == len(req.alerts)                                       # each in full, none as a cut line
        for b in blocks:
            if b["type"] == "section":
                assert len(b["text"]["text"]) <= 3000 and len(b.get("fields", [])) <= 10
                assert all(len(f["text"]) <= 2000 for f in b.get("fields", []))
                assert "&lt;slow&gt; &amp;" in b["text"]["text"]          # mrkdwn control characters escaped
            if b["type"] == "context":
                assert len(b["elements"]) <= 10 and all(len(e["text"]) <= 3000 for e in b["elements"])
        assert len(msg["text"]) <= 3000


def test_slack_counts_each_alert_once_in_its_latest_state_and_shows_evidence_in_readable_units(receivers):
    fired = [make("idle", f"GPU-{i}", gpu=f"GPU-{i}") for i in range(60)]
    gone = [dict(a, status="resolved") for a in fired]
    (req,) = receivers["slack"].requests(Notification("slack", {"kind": "idle"}, fired[:3] + gone[:3]))
    assert json.loads(req.body)["blocks"][0]["text"]["text"].startswith("[RESOLVED:3]")
    leak = make("memory_leak", "GPU-1")
    leak["evidence"] = {"rate_bytes_per_h": 14685240297, "slope_gb_per_h": 14.685, "used_gb": 40.0, "util_pct": 5.0}
    (req,) = receivers["slack"].requests(Notification("slack", {}, [leak]))
    fields = [f["text"] for f in json.loads(req.body)["blocks"][1]["fields"]]
    assert fields == ["*rate*\n13.68 GiB/h", "*slope*\n13.68 GiB/h", "*used*\n37.3 GiB", "*util*\n5.0%"][:1] + \
        fields[1:] and "14685240297" not in req.body.decode()


def test_slack_reminder_says_still_firing(receivers):
    msg = json.loads(receivers["slack"].requests(Notification("slack", {}, [make()], reminder=True))[0].body)
    assert msg["blocks"][0]["text"]["text"].startswith("[STILL FIRING:1]")
    assert receivers["slack"].verdict(Response(404, {}, b"channel_not_found")).detail == "HTTP 404: channel_not_found"
    assert receivers["slack"].rate == (1.0, 3)


def test_alertmanager_alerts(receivers):
    am = receivers["am"]
    am.clock = lambda: 10_000.0
    firing, resolved = make("idle", "GPU-1", gpu="GPU-1"), make("idle", "GPU-2", gpu="GPU-2", status="resolved")
    (req,) = am.requests(Notification("am", {}, [firing, resolved]))
    assert req.url == "http://am.test:9093/api/v2/alerts"
    one, two = json.loads(req.body)
    assert one["labels"] == {"alertname": "idle", "node": "n1", "gpu": "GPU-1", "tenant_job": "j1", "tenant": "acme",
                             "pool": "h100-east", "severity": "warning"}
    assert one["annotations"] == {"summary": firing["summary"], "evidence": '{"x": 1}', "incident": firing["id"]}
    assert one["startsAt"] == "1970-01-01T00:16:40.000Z"
    assert one["endsAt"] == "1970-01-01T02:50:40.000Z"             # now + 4 resend intervals
    assert two["endsAt"] == "1970-01-01T00:31:40.000Z"             # when it resolved
    assert one["generatorURL"] == "https://ops.test/n/n1"
    assert am.repeat_s(4 * 3600) == 60 and am.repeat_s(30) == 30
    no_gpu = json.loads(am.requests(Notification("am", {}, [make(gpu=None, job=None)]))[0].body)[0]
    assert "gpu" not in no_gpu["labels"] and "job" not in no_gpu["labels"]


def test_webhook_body_is_the_event_and_the_signature_verifies(receivers):
    hook = receivers["hook"]
    hook.clock = lambda: 1_700_000_000
    a = make()
    (req,) = hook.requests(Notification("hook", {}, [a]))
    assert json.loads(req.body) == a
    assert req.headers["X-Gpufleet-Delivery"] == f"{a['id']}:firing"
    assert req.headers["X-Gpufleet-Event"] == "gpufleet.alert.v1"
    signed = hook.sign(req)
    assert signed["X-Gpufleet-Timestamp"] == "1700000000"
    ts, sig = signed["X-Gpufleet-Timestamp"], signed["X-Gpufleet-Signature"]
    now = lambda: 1_700_000_010
    assert verify("signing-key", req.body, ts, sig, now=now)
    assert not verify("other-key", req.body, ts, sig, now=now)
    assert not verify("signing-key", req.body + b" ", ts, sig, now=now)                 # body changed
    assert not verify("signing-key", req.body, "1700000001", sig, now=now)              # timestamp changed
    assert not verify("signing-key", req.body, ts, sig, now=lambda: 1_700_000_000 + 301)  # too old: a replay
    assert sig == signature("signing-key", ts, req.body) and sig.startswith("v1=") and len(sig) == 67


def test_secrets_are_masked_in_errors(receivers):
    slack = receivers["slack"]
    assert slack.mask(f"cannot reach {SLACK_URL}: refused") == "cannot reach ***: refused"
    assert receivers["pd"].mask(f"key {PD_KEY} refused") == "key *** refused"


def test_retry_after_seconds_or_a_date():
    assert retry_after("7") == 7.0
    assert retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=lambda: 1445412480.0) == 10.0
    assert retry_after("soon") is None and retry_after(None) is None
