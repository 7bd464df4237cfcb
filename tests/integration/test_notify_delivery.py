"""Alert delivery with real parts: a local HTTP receiver that records every request, the real Kafka broker and
ClickHouse server, a real Prometheus Alertmanager. Faults count what arrived: the receiver down for 60 s during
a storm of 500 incidents, a 429 storm, ``gpufleet notify`` killed with SIGKILL mid-storm and restarted."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter

import pytest
from notify_helpers import incident, make

from gpufleet.contracts.telemetry import end_of_stream
from gpufleet.settings import load_settings
from gpufleet.sql.store import Store
from gpufleet.streams.kafka import consume, ensure_topics, group_progress, produce
from gpufleet.streams.notify import service
from gpufleet.streams.notify.receivers.webhook import verify
from gpufleet.streams.notify.routing import Routes
from gpufleet.streams.notify.testing import RecordingReceiver

pytestmark = [pytest.mark.integration]

SIGNING_KEY = "whsec-test-signing-key-0001"
PD_KEY = "R0UTINGKEY0123456789abcdef012345"
SLACK_TOKEN = "XYZslacktokenSECRET"


@pytest.fixture(autouse=True)
def secrets(monkeypatch):
    monkeypatch.setenv("T_SIGNING_KEY", SIGNING_KEY)
    monkeypatch.setenv("T_PD_KEY", PD_KEY)


@pytest.fixture
def receiver():
    with RecordingReceiver() as r:
        yield r


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def routes_toml(path, receiver, *, slack=False, am_url=None, wait="0s", interval="0s", extra="", root="hook"):
    text = f"""
[route]
receiver = "{root}"
group_by = ["kind"]
group_wait = "{wait}"
group_interval = "{interval}"
{extra}
[receivers.hook]
type = "webhook"
url = "{receiver.url('/hook')}"
signing_key_env = "T_SIGNING_KEY"

[receivers.pd]
type = "pagerduty"
url = "{receiver.url('/pagerduty')}"
routing_key_env = "T_PD_KEY"
rate_per_s = 0
"""
    if slack:
        text += '\n[receivers.slack]\ntype = "slack"\nurl_env = "T_SLACK_URL"\nrate_per_s = 0\n'
    if am_url:
        text += f'\n[receivers.am]\ntype = "alertmanager"\nurl = "{am_url}"\nresend_interval = "1s"\n'
    path.write_text(text)
    return str(path)


BOTH = """
[[route.routes]]
receiver = "hook"
continue = true
[[route.routes]]
receiver = "pd"
"""


def settings_for(tmp_path, database, clickhouse_url, bootstrap="127.0.0.1:9", prefix="n", **notify):
    values = {"outbox_dir": str(tmp_path / "outbox"), "outbox_fsync": False, "backoff_s": 0.2, "backoff_max_s": 2.0,
              "retry_for_s": 300, "silence_refresh_s": 0.3, "ledger_interval_s": 0.3, "session_timeout_s": 6,
              "group_id": f"notify-{uuid.uuid4().hex[:8]}", **notify}
    return load_settings(None, notify=values, store={"dsn": clickhouse_url, "database": database},
                         kafka={"bootstrap": bootstrap, "topic_prefix": prefix})


def wait_until(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def keys(receiver, path):
    """What a receiver saw, in arrival order, as the receiver dedups it: the webhook's delivery id,
    PagerDuty's (dedup_key, action)."""
    out = []
    for r in receiver.received(path, accepted_only=True):
        if path == "/hook":
            out.append(r.headers["x-gpufleet-delivery"])
        else:
            body = r.json()
            out.append(f"{body['dedup_key']}:{body['event_action']}")
    return out


def in_order(seen, pairs, hook=True):
    first = {}
    for i, k in enumerate(seen):
        first.setdefault(k, i)
    for f, _ in pairs:
        fk, rk = (f"{f['id']}:firing", f"{f['id']}:resolved") if hook else \
            (f"{f['dedup_key']}:trigger", f"{f['dedup_key']}:resolve")
        assert first[fk] < first[rk], f"{f['dedup_key']}: resolved arrived before firing"


def storm(n, kind="idle"):
    return [incident(kind, f"GPU-{i:04d}", gpu=f"GPU-{i:04d}", node=f"node-{i // 8:03d}",
                     pool=("h100-east", "a100-west")[i % 2], started=1_700_000_000.0 + i) for i in range(n)]


def publish(bootstrap, topic, events):
    produce(bootstrap, topic, [(e["dedup_key"], json.dumps(e).encode()) for e in events])


def scrape(port) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = Counter()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] += float(value)
    return out


class Router:
    """``service.run`` (what ``gpufleet notify`` runs) in a thread, until stopped."""

    def __init__(self, settings, routes_path, clickhouse_url, topic):
        self.store = Store.connect(clickhouse_url, settings.store.database)
        self.stop_event = threading.Event()
        routes = Routes.load(routes_path)
        self.thread = threading.Thread(target=service.run, args=(settings, routes, self.store, topic, self.stop_event))
        self.thread.start()

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        self.store.close()


def deliveries(store, where=""):
    return store.query("SELECT receiver, alert_status, status, count(), max(attempts) FROM alert_deliveries FINAL "
                       f"{where} GROUP BY ALL ORDER BY ALL")


# -- what arrives -----------------------------------------------------------------------------------
def test_payloads_as_received_and_who_was_told_what_when(tmp_path, receiver, server_store, clickhouse_url, monkeypatch):
    monkeypatch.setenv("T_SLACK_URL", receiver.url(f"/slack/services/T0/B0/{SLACK_TOKEN}"))
    path = routes_toml(tmp_path / "routes.toml", receiver, slack=True, extra="""
[[route.routes]]
match = { severity = "critical" }
receiver = "pd"
continue = true
[[route.routes]]
receiver = "slack"
continue = true
[[route.routes]]
receiver = "hook"
""")
    settings = settings_for(tmp_path, server_store.database, clickhouse_url)
    notifier = service.LocalNotifier(settings, Routes.load(path), Store.connect(clickhouse_url, server_store.database))
    notifier.start()
    f, r = incident("straggler", "GPU-7", severity="critical", gpu="GPU-7", node="node-3")
    notifier.offer([f])
    wait_until(lambda: len(receiver.received()) == 3, 10, "the firing at three receivers")
    notifier.offer([r])
    counts = notifier.finish()
    assert counts == {"sent": 6}

    trigger, resolve = (x.json() for x in receiver.received("/pagerduty"))
    assert trigger["event_action"] == "trigger" and resolve == {"routing_key": PD_KEY, "event_action": "resolve",
                                                                  "dedup_key": "straggler:GPU-7"}
    assert trigger["routing_key"] == PD_KEY and trigger["dedup_key"] == "straggler:GPU-7"
    assert {k: trigger["payload"][k] for k in ("source", "severity", "component", "group", "class")} == \
        {"source": "node-3", "severity": "critical", "component": "GPU-7", "group": "h100-east", "class": "straggler"}
    assert trigger["payload"]["summary"] == f["summary"] and trigger["payload"]["custom_details"] == f["evidence"]

    fired, solved = receiver.received("/slack")
    assert fired.path.endswith(SLACK_TOKEN) and fired.headers["content-type"] == "application/json"
    assert fired.json()["blocks"][0]["type"] == "header" and fired.json()["text"].startswith("[FIRING:1]")
    assert solved.json()["blocks"][0]["text"]["text"].startswith("[RESOLVED:1]")

    for hook in receiver.received("/hook"):
        h = hook.headers
        assert verify(SIGNING_KEY, hook.body, h["x-gpufleet-timestamp"], h["x-gpufleet-signature"])
        event = json.loads(hook.body)
        assert event in (f, r) and h["x-gpufleet-delivery"] == f"{f['id']}:{event['status']}"

    told = server_store.query("SELECT receiver, alert_status, status, attempts, sent_at IS NOT NULL "
                              "FROM alert_deliveries FINAL WHERE id = %(id)s ORDER BY receiver, alert_status",
                              {"id": f["id"]})
    assert told == [("hook", "firing", "sent", 1, True), ("hook", "resolved", "sent", 1, True),
                    ("pd", "firing", "sent", 1, True), ("pd", "resolved", "sent", 1, True),
                    ("slack", "firing", "sent", 1, True), ("slack", "resolved", "sent", 1, True)]


def test_rejected_and_retried_out_deliveries_are_dead_lettered_with_reason_and_count(tmp_path, server_store,
                                                                                     clickhouse_url):
    def answer(rec, path, headers, body):
        if path.startswith("/pagerduty"):
            return 400, {}, json.dumps({"status": "invalid event", "message": "Event object is invalid",
                                        "errors": ["'payload.source' is missing or blank"]}).encode()
        return 503, {}, b"overloaded"
    with RecordingReceiver(answer=answer) as receiver:
        path = routes_toml(tmp_path / "routes.toml", receiver, extra=BOTH)
        settings = settings_for(tmp_path, server_store.database, clickhouse_url, retry_for_s=1.5, backoff_s=0.1,
                                backoff_max_s=0.2)
        notifier = service.LocalNotifier(settings, Routes.load(path),
                                         Store.connect(clickhouse_url, server_store.database))
        notifier.start()
        notifier.offer([make()])
        assert notifier.finish() == {"dead": 2}
        assert len(receiver.received("/pagerduty")) == 1                  # a 400 is never retried
        tries = len(receiver.received("/hook"))
        assert tries >= 5
    rows = dict((r[0], r[1:]) for r in server_store.query(
        "SELECT receiver, status, reason, attempts, last_error FROM alert_deliveries FINAL"))
    assert rows["pd"][:3] == ("dead", "rejected", 1) and "'payload.source' is missing" in rows["pd"][3]
    assert rows["hook"][:3] == ("dead", "retry_limit", tries) and "HTTP 503: overloaded" in rows["hook"][3]


# -- Alertmanager ------------------------------------------------------------------------------------
AM_BINARY = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


@pytest.fixture
def alertmanager(tmp_path, receiver):
    """A real Alertmanager on a free loopback port, its webhook receiver pointed at the recording receiver."""
    if AM_BINARY is None:
        pytest.skip("needs prometheus-alertmanager (Debian package; .ci/run installs it)")
    port = free_port()
    config = tmp_path / "am.yml"
    config.write_text(f"""
route:
  receiver: recorder
  group_by: [alertname, pool]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: recorder
    webhook_configs:
      - url: {receiver.url('/am')}
        send_resolved: true
""")
    log = open(tmp_path / "am.log", "w")
    proc = subprocess.Popen([AM_BINARY, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def ready():
        try:
            return urllib.request.urlopen(f"{base}/-/ready", timeout=1).status == 200
        except OSError:
            return False
    try:
        wait_until(ready, 30, "Alertmanager to be ready")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_alertmanager_groups_and_resolves_what_gpufleet_sends(tmp_path, receiver, alertmanager, server_store,
                                                              clickhouse_url):
    path = routes_toml(tmp_path / "routes.toml", receiver, am_url=alertmanager, root="am")
    settings = settings_for(tmp_path, server_store.database, clickhouse_url)
    notifier = service.LocalNotifier(settings, Routes.load(path), Store.connect(clickhouse_url, server_store.database))
    notifier.start()
    idle = [incident("idle", f"GPU-{i}", gpu=f"GPU-{i}", pool="h100-east", started=time.time() - 600)
            for i in range(3)]
    straggler = incident("straggler", "GPU-9", gpu="GPU-9", pool="a100-west", severity="critical",
                         started=time.time() - 600)
    notifier.offer([f for f, _ in idle] + [straggler[0]])
    idle_key, straggler_key = (("alertname", "idle"), ("pool", "h100-east")), (("alertname", "straggler"),
                                                                                ("pool", "a100-west"))

    def groups() -> dict:
        """Each group's latest notification (on a busy machine the three may reach Alertmanager over more than its
        group_wait: the group is then notified with the first, and again with all three a group_interval later)."""
        return {tuple(sorted(n.json()["groupLabels"].items())): n.json() for n in receiver.received("/am")}

    def all_in(latest: dict) -> bool:
        return len(latest.get(idle_key, {}).get("alerts", ())) == 3 and straggler_key in latest
    wait_until(lambda: all_in(groups()), 20, "Alertmanager's grouped notifications")
    firing = groups()
    idle_group = firing[idle_key]
    assert idle_group["status"] == "firing" and len(idle_group["alerts"]) == 3        # grouped end to end
    one = next(a for a in idle_group["alerts"] if a["labels"]["gpu"] == "GPU-0")
    assert one["labels"] == {"alertname": "idle", "node": "n1", "gpu": "GPU-0", "tenant_job": "j1", "tenant": "acme",
                             "pool": "h100-east", "severity": "warning"}
    assert one["annotations"]["summary"] == "idle on GPU-0" and json.loads(one["annotations"]["evidence"]) == {"x": 1}
    assert len(firing[straggler_key]["alerts"]) == 1

    time.sleep(6)          # endsAt is 4 resends (4 s) ahead: without the resend Alertmanager would resolve them now
    live = json.loads(urllib.request.urlopen(f"{alertmanager}/api/v2/alerts", timeout=5).read())
    assert len([a for a in live if a["status"]["state"] == "active"]) == 4
    assert not [n for n in receiver.received("/am") if n.json()["status"] == "resolved"]

    notifier.offer([r for _, r in idle])
    wait_until(lambda: groups()[idle_key]["status"] == "resolved", 20, "the resolved notification")
    notifier.finish()
    resolved = groups()[idle_key]
    assert resolved["groupLabels"] == {"alertname": "idle", "pool": "h100-east"}
    assert {a["labels"]["gpu"] for a in resolved["alerts"]} == {"GPU-0", "GPU-1", "GPU-2"}
    assert all(a["status"] == "resolved" for a in resolved["alerts"])


# -- silences and inhibition ------------------------------------------------------------------------------
def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_silences_from_the_command_line_apply_and_expire(tmp_path, receiver, server_store, clickhouse_url):
    db = ["--dsn", clickhouse_url, "--database", server_store.database]
    added = cli("silence", "add", "--match", "kind=idle", "--match", "tenant=acme", "--for", "2h",
                "--comment", "maintenance", *db)
    assert added.returncode == 0, added.stderr
    sid = added.stdout.split()[1]
    listed = cli("silence", "list", *db)
    assert sid in listed.stdout and "kind=idle, tenant=acme" in listed.stdout and "active" in listed.stdout

    path = routes_toml(tmp_path / "routes.toml", receiver)
    settings = settings_for(tmp_path, server_store.database, clickhouse_url)
    notifier = service.LocalNotifier(settings, Routes.load(path), Store.connect(clickhouse_url, server_store.database))
    notifier.start()
    acme = incident("idle", "GPU-1")
    globex = incident("idle", "GPU-2", gpu="GPU-2", tenant="globex")
    node = incident("straggler", "node-3", gpu=None, node="node-3")
    on_node = incident("straggler", "GPU-31", gpu="GPU-31", node="node-3")
    notifier.offer([acme[0], globex[0], node[0], on_node[0]])
    wait_until(lambda: len(receiver.received("/hook")) == 2, 10, "the two alerts told")
    time.sleep(1)
    assert sorted(keys(receiver, "/hook")) == sorted([f"{globex[0]['id']}:firing", f"{node[0]['id']}:firing"])

    expired = cli("silence", "expire", sid[:8], *db)
    assert expired.returncode == 0 and "expired" in expired.stdout, expired.stderr
    wait_until(lambda: f"{acme[0]['id']}:firing" in keys(receiver, "/hook"), 10, "the acme alert, still firing")
    notifier.offer([node[1]])                     # the node-level incident resolves; the GPU one still fires
    wait_until(lambda: f"{on_node[0]['id']}:firing" in keys(receiver, "/hook"), 10, "the GPU-level alert")
    notifier.offer([acme[1], globex[1], on_node[1]])
    notifier.finish()
    assert Counter(keys(receiver, "/hook")) == Counter(f"{e['id']}:{e['status']}" for pair in
                                                        (acme, globex, node, on_node) for e in pair)
    history = server_store.query("SELECT status, reason FROM alert_deliveries WHERE id = %(id)s AND "
                                 "alert_status = 'firing' ORDER BY updated_at", {"id": acme[0]["id"]})
    assert history == [("silenced", f"silence {sid}"), ("sent", "")]           # who was told what, when
    assert "expired" in cli("silence", "list", "--all", *db).stdout


def test_an_inhibition_rule_sees_incidents_only_the_store_holds(tmp_path, receiver, server_store, clickhouse_url):
    from gpufleet.streams.sink import ALERTS, alert_row
    rule = ('[[inhibit_rules]]\nsource_matchers = ["severity=critical"]\ntarget_matchers = ["severity=warning"]\n'
            'equal = ["node"]\n')
    path = routes_toml(tmp_path / "routes.toml", receiver, extra=rule)
    critical = incident("memory_leak", "GPU-7", gpu="GPU-7", node="n1", severity="critical",
                        started=time.time() - 900)          # the store keeps a week of firing incidents in view
    server_store.write(ALERTS.name, ALERTS.columns, [alert_row(critical[0])], dedup=ALERTS.dedup)  # another router's
    settings = settings_for(tmp_path, server_store.database, clickhouse_url)
    notifier = service.LocalNotifier(settings, Routes.load(path), Store.connect(clickhouse_url, server_store.database))
    notifier.start()
    same_node = incident("idle", "GPU-1", node="n1")
    other_node = incident("idle", "GPU-2", gpu="GPU-2", node="n2")
    notifier.offer([same_node[0], other_node[0]])
    wait_until(lambda: len(receiver.received("/hook")) == 1, 10, "the alert on the other node")
    time.sleep(1)
    assert keys(receiver, "/hook") == [f"{other_node[0]['id']}:firing"]
    server_store.write(ALERTS.name, ALERTS.columns, [alert_row(critical[1])], dedup=ALERTS.dedup)   # it resolves
    wait_until(lambda: f"{same_node[0]['id']}:firing" in keys(receiver, "/hook"), 10, "the muted alert, told now")
    notifier.offer([same_node[1], other_node[1]])
    notifier.finish()
    history = server_store.query("SELECT status, reason FROM alert_deliveries WHERE id = %(id)s AND "
                                 "alert_status = 'firing' ORDER BY updated_at", {"id": same_node[0]["id"]})
    assert history[0][0] == "inhibited" and critical[0]["id"] in history[0][1], history
    assert history[-1] == ("sent", "")


# -- faults ---------------------------------------------------------------------------------------------------
@pytest.fixture
def alerts_topic(kafka_bootstrap):
    prefix = f"n{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, {f"{prefix}.alerts": 4})
    return prefix, f"{prefix}.alerts"


def committed_all(bootstrap, group, topic):
    return all(c == e for _, _, c, e in group_progress(bootstrap, group, [topic]) if e)


def test_receiver_down_60_s_during_a_storm_of_500_incidents(tmp_path, receiver, server_store, clickhouse_url,
                                                            kafka_bootstrap, alerts_topic):
    prefix, topic = alerts_topic
    port = free_port()
    settings = settings_for(tmp_path, server_store.database, clickhouse_url, kafka_bootstrap, prefix,
                            metrics_port=port)
    router = Router(settings, routes_toml(tmp_path / "routes.toml", receiver, extra=BOTH), clickhouse_url, topic)
    pairs = storm(500)
    try:
        publish(kafka_bootstrap, topic, [f for f, _ in pairs])
        wait_until(lambda: len(receiver.received("/hook")) >= 50, 60, "the storm to start arriving")
        receiver.down()
        at_down = len(receiver.received("/hook"))
        down_at = time.monotonic()
        publish(kafka_bootstrap, topic, [r for _, r in pairs])
        time.sleep(max(0.0, 60 - (time.monotonic() - down_at)))
        during = len(receiver.received())
        receiver.up()
        wait_until(lambda: len(receiver.received(accepted_only=True)) >= 2000, 120, "every delivery")
        wait_until(lambda: committed_all(kafka_bootstrap, settings.notify.group_id, topic), 30, "offsets committed")
        metrics = scrape(port)
    finally:
        router.stop()
    hook, pd = keys(receiver, "/hook"), keys(receiver, "/pagerduty")
    assert len(hook) == len(set(hook)) == 1000 and len(pd) == len(set(pd)) == 1000     # each exactly once
    assert set(hook) == {f"{e['id']}:{e['status']}" for pair in pairs for e in pair}
    in_order(hook, pairs)
    in_order(pd, pairs, hook=False)
    assert at_down < 500 and during < 2000 and metrics["gpufleet_notify_retried_total"] > 0
    assert metrics["gpufleet_notify_sent_total"] == 2000 and metrics["gpufleet_notify_failed_total"] == 0
    rows = deliveries(server_store)
    assert [r[:4] for r in rows] == [("hook", "firing", "sent", 500), ("hook", "resolved", "sent", 500),
                                     ("pd", "firing", "sent", 500), ("pd", "resolved", "sent", 500)]
    assert max(r[4] for r in rows) > 1                                                   # retried through the outage


def test_poison_on_the_alert_topic_is_dead_lettered_and_every_alert_around_it_delivered(
        tmp_path, receiver, server_store, clickhouse_url, kafka_bootstrap, alerts_topic):
    prefix, topic = alerts_topic
    port = free_port()
    settings = settings_for(tmp_path, server_store.database, clickhouse_url, kafka_bootstrap, prefix,
                            metrics_port=port)
    ensure_topics(kafka_bootstrap, {service.dead_letter_topic(topic): 4})
    router = Router(settings, routes_toml(tmp_path / "routes.toml", receiver), clickhouse_url, topic)
    pairs = storm(20)
    good = [json.dumps(f).encode() for f, _ in pairs]
    poison = [b'{"a":' * 50_000 + b"}" * 50_000, b"\xff\xfe", b"[]", json.dumps({**pairs[0][0], "id": 7}).encode(),
              json.dumps({**pairs[1][0], "evidence": "text", "id": "x1"}).encode(),
              # another producer's: a tombstone, a control message of an unknown kind, an end-of-stream marker
              None, json.dumps({"schema": "gpufleet.control.v1", "kind": "rewind"}).encode(), end_of_stream(1.0)]
    try:
        produce(kafka_bootstrap, topic, [("k", v) for v in good[:10] + poison + good[10:]])
        wait_until(lambda: len(receiver.received("/hook")) >= 20, 60, "every good alert")
        wait_until(lambda: committed_all(kafka_bootstrap, settings.notify.group_id, topic), 30, "offsets committed")
        metrics = scrape(port)
    finally:
        router.stop()
    assert sorted(keys(receiver, "/hook")) == sorted(f"{f['id']}:firing" for f, _ in pairs)
    dead = [json.loads(v) for _, v in consume(kafka_bootstrap, service.dead_letter_topic(topic),
                                              f"check-{uuid.uuid4().hex[:6]}", idle_timeout_s=5, to_end=True)]
    assert len(dead) == len(poison) and {d["reason_code"] for d in dead} == {"invalid"}
    assert sum("tombstone" in d["reason"] for d in dead) == 1
    assert all(d["source"].startswith(f"{topic}/") and d["reason"] for d in dead)
    assert metrics["gpufleet_notify_dead_letters_total"] == len(poison)


def test_a_429_storm_is_waited_out_as_retry_after_says(tmp_path, server_store, clickhouse_url, kafka_bootstrap,
                                                      alerts_topic):
    prefix, topic = alerts_topic
    storm_until = []

    def answer(rec, path, headers, body):
        now = time.monotonic()
        if not storm_until:
            storm_until.append(now + 4)
        if now < storm_until[0]:
            return 429, {"Retry-After": "1"}, b"slow down"
        return 200, {}, b"ok"
    port = free_port()
    with RecordingReceiver(answer=answer) as receiver:
        settings = settings_for(tmp_path, server_store.database, clickhouse_url, kafka_bootstrap, prefix,
                                metrics_port=port)
        router = Router(settings, routes_toml(tmp_path / "routes.toml", receiver), clickhouse_url, topic)
        pairs = storm(200)
        try:
            publish(kafka_bootstrap, topic, [f for f, _ in pairs])
            wait_until(lambda: len(receiver.received(accepted_only=True)) >= 200, 60, "every delivery")
            wait_until(lambda: committed_all(kafka_bootstrap, settings.notify.group_id, topic), 30, "offsets committed")
            metrics = scrape(port)
        finally:
            router.stop()
        seen = receiver.received("/hook")
    limited = [i for i, r in enumerate(seen) if r.status == 429]
    assert len(limited) >= 3                            # about one a second for 4 s
    for i in limited:                                   # the next request came no sooner than Retry-After said
        assert seen[i + 1].at - seen[i].at >= 0.95, (i, seen[i + 1].at - seen[i].at)
    accepted = keys(receiver, "/hook")
    assert len(accepted) == len(set(accepted)) == 200
    assert metrics["gpufleet_notify_rate_limited_total"] == len(limited)
    assert deliveries(server_store)[0][:4] == ("hook", "firing", "sent", 200)


def test_notify_killed_mid_storm_and_restarted_loses_nothing_and_sends_nothing_twice(
        tmp_path, server_store, clickhouse_url, kafka_bootstrap, alerts_topic):
    prefix, topic = alerts_topic
    with RecordingReceiver(delay_s=0.004) as receiver:
        path = routes_toml(tmp_path / "routes.toml", receiver, extra=BOTH)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
        env.update({"GPUFLEET_KAFKA__BOOTSTRAP": kafka_bootstrap, "GPUFLEET_KAFKA__TOPIC_PREFIX": prefix,
                    "GPUFLEET_STORE__DSN": clickhouse_url, "GPUFLEET_STORE__DATABASE": server_store.database,
                    "GPUFLEET_NOTIFY__OUTBOX_DIR": str(tmp_path / "outbox"), "GPUFLEET_NOTIFY__GROUP_ID": prefix,
                    "GPUFLEET_NOTIFY__SESSION_TIMEOUT_S": "6", "GPUFLEET_NOTIFY__LEDGER_INTERVAL_S": "0.3",
                    "T_SIGNING_KEY": SIGNING_KEY, "T_PD_KEY": PD_KEY})
        cmd = [sys.executable, "-m", "gpufleet", "notify", "--routes", path]
        pairs = storm(500)
        publish(kafka_bootstrap, topic, [e for pair in pairs for e in pair])
        logs = [open(tmp_path / f"notify-{i}.log", "w+") for i in range(2)]
        first = subprocess.Popen(cmd, env=env, stdout=logs[0], stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: len(receiver.received("/hook")) >= 400, 90, "the storm under way")
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
            at_kill = len(receiver.received())
            second = subprocess.Popen(cmd, env=env, stdout=logs[1], stderr=subprocess.STDOUT)
            wait_until(lambda: len(set(keys(receiver, "/hook"))) == 1000 and len(set(keys(receiver, "/pagerduty")))
                       == 1000, 120, "every delivery after the restart")
            wait_until(lambda: committed_all(kafka_bootstrap, prefix, topic), 30, "offsets committed")
            time.sleep(1)                          # the ledger's last copy to the store
        finally:
            for p in (first, locals().get("second")):
                if p is not None and p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=60)
        assert second.returncode == 0
        output = "".join(open(log.name).read() for log in logs)
    assert at_kill < 2000, "the kill should land mid-storm"
    expected = {f"{e['id']}:{e['status']}" for pair in pairs for e in pair}
    for path_, hook in (("/hook", True), ("/pagerduty", False)):
        seen = keys(receiver, path_)
        twice = [k for k, n in Counter(seen).items() if n > 1]
        assert len(twice) <= 1, f"{path_}: sent twice: {twice}"   # at most the one request in flight at the kill
        assert len(set(seen)) == 1000                               # nothing lost
        in_order(seen, pairs, hook=hook)
    assert set(keys(receiver, "/hook")) == expected
    rows = deliveries(server_store)
    assert [r[:4] for r in rows] == [("hook", "firing", "sent", 500), ("hook", "resolved", "sent", 500),
                                     ("pd", "firing", "sent", 500), ("pd", "resolved", "sent", 500)]
    assert SIGNING_KEY not in output and PD_KEY not in output                # secrets never logged
