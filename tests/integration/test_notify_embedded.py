"""``--notify`` on replay and demo: the embedded mode's durable outbox survives a killed run, and the next run
tells what it owed, each once; ``silence list`` reads and never creates."""
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.sql.store import Store
from gpufleet.streams.notify.outbox import step_of
from gpufleet.streams.notify.testing import RecordingReceiver

pytestmark = [pytest.mark.integration]


def gpufleet(*args, env, timeout=300):
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory):
    """A small recording with alerts, and the alert events replay makes of it."""
    tmp = tmp_path_factory.mktemp("embedded-notify")
    sim = Simulation(FleetSpec(nodes=4, gpus_per_node=4, hours=1.5, seed=3, faults_per_kind=1, start=1_767_571_200))
    path = tmp / "telemetry.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in sim.messages()))
    out = gpufleet("replay", str(path), "--no-store", "--events", str(tmp / "events.jsonl"), env=clean_env(tmp))
    assert out.returncode == 0, out.stderr
    alerts = [e for e in map(json.loads, (tmp / "events.jsonl").read_text().splitlines())
              if e["schema"] == "gpufleet.alert.v1"]
    assert len(alerts) >= 4
    return path, alerts


def clean_env(tmp, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update({"GPUFLEET_NOTIFY__OUTBOX_DIR": str(tmp / "outbox"), "GPUFLEET_NOTIFY__OUTBOX_FSYNC": "false",
                "T_SIGNING_KEY": "embedded-signing-key", **extra})
    return env


def routes(tmp, receiver_url):
    path = tmp / "routes.toml"
    path.write_text(f'[route]\nreceiver = "hook"\ngroup_wait = "0s"\n[receivers.hook]\ntype = "webhook"\n'
                    f'url = "{receiver_url}"\nsigning_key_env = "T_SIGNING_KEY"\n')
    return str(path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pending(outbox_dir) -> int:
    path = outbox_dir / "outbox.sqlite3"
    if not path.exists():
        return 0
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
        try:
            return db.execute("SELECT count(*) FROM deliveries WHERE state = 'pending'").fetchone()[0]
        except sqlite3.OperationalError:      # not created yet
            return 0


def test_a_killed_replay_leaves_its_deliveries_in_the_outbox_and_the_next_run_tells_each_once(tmp_path, telemetry):
    path, alerts = telemetry
    receiver = RecordingReceiver(port=free_port())            # down: nothing listens on its port yet
    env = clean_env(tmp_path, GPUFLEET_NOTIFY__RETRY_FOR_S="3600", GPUFLEET_NOTIFY__BACKOFF_S="0.2",
                    GPUFLEET_NOTIFY__BACKOFF_MAX_S="0.5")
    route_file = routes(tmp_path, receiver.url("/hook"))
    first = subprocess.Popen([sys.executable, "-m", "gpufleet", "replay", str(path), "--dsn",
                              f"chdb://{tmp_path / 'store-1'}", "--notify", route_file], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while pending(tmp_path / "outbox") < len(alerts):
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            assert time.monotonic() < deadline, "the replay never owed all its deliveries"
            time.sleep(0.2)
        first.send_signal(signal.SIGKILL)                     # receiver still down: nothing was told
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    assert receiver.received() == [] and pending(tmp_path / "outbox") == len(alerts)

    with receiver:
        again = gpufleet("replay", str(path), "--dsn", f"chdb://{tmp_path / 'store-2'}", "--notify", route_file,
                         env=env)
        assert again.returncode == 0, again.stderr
        assert f"{len(alerts)} deliveries a previous run left owed" in again.stderr
        assert "notified:" in again.stdout and f"sent {len(alerts)}" in again.stdout
        told = Counter(r.headers["x-gpufleet-delivery"] for r in receiver.received(accepted_only=True))
        assert told == Counter(f"{a['id']}:{step_of(a)}" for a in alerts)              # each exactly once
        third = gpufleet("replay", str(path), "--no-store", "--notify", route_file, env=env)
        assert third.returncode == 0 and "deliveries nothing" in third.stdout, third.stdout
        assert len(receiver.received()) == len(alerts)                                  # nothing twice
    assert pending(tmp_path / "outbox") == 0


def test_demo_delivers_with_notify_and_otherwise_says_how(tmp_path):
    with RecordingReceiver() as receiver:
        env = clean_env(tmp_path)
        # a fixed start: the demo's default (yesterday) moves the simulated faults with the date
        args = ["demo", "--nodes", "3", "--gpus-per-node", "4", "--hours", "1.5", "--seed", "1",
                "--start", "1764374400", "--save",
                str(tmp_path / "saved"), "--dsn", f"chdb://{tmp_path / 'demo'}"]
        out = gpufleet(*args, "--notify", routes(tmp_path, receiver.url("/hook")), env=env)
        assert out.returncode == 0, out.stderr
        alerts = [e for e in map(json.loads, (tmp_path / "saved" / "events.jsonl").read_text().splitlines())
                  if e["schema"] == "gpufleet.alert.v1"]
        assert alerts and len(receiver.received(accepted_only=True)) == len(alerts)
        assert "notified:" in out.stdout and "gpufleet demo --notify" not in out.stdout
    plain = gpufleet(*args, env=env)
    assert plain.returncode == 0 and "gpufleet demo --notify routes.toml" in plain.stdout


DEMO = ["demo", "--nodes", "3", "--gpus-per-node", "4", "--hours", "1.5", "--seed", "1", "--start", "1764374400"]


def test_demo_notify_with_no_file_delivers_to_a_local_receiver_and_writes_every_payload(tmp_path):
    env = clean_env(tmp_path)
    out = gpufleet(*DEMO, "--dsn", f"chdb://{tmp_path / 'demo'}", "--save", str(tmp_path / "saved"), "--notify",
                   env=env)
    assert out.returncode == 0, out.stderr
    payloads = tmp_path / "outbox" / "payloads.jsonl"
    assert f"every payload is written to {payloads}" in out.stderr and str(payloads) in out.stdout
    got = [json.loads(line) for line in payloads.read_text().splitlines()]
    by = Counter(p["receiver"] for p in got)
    alerts = [e for e in map(json.loads, (tmp_path / "saved" / "events.jsonl").read_text().splitlines())
              if e["schema"] == "gpufleet.alert.v1"]
    assert by["webhook"] == len(alerts)              # every step of every incident, one request each
    assert by["alertmanager"] >= 1 and by["slack"] >= 1
    critical = [a for a in alerts if a["severity"] == "critical"]
    assert (by["pagerduty"] >= 1) == bool(critical)
    hooks = [p for p in got if p["receiver"] == "webhook"]
    assert all(p["body"]["runbook_url"].endswith(f"/runbooks/{p['body']['kind']}/") for p in hooks)
    assert all(p["headers"]["x-gpufleet-signature"].startswith("v1=") for p in hooks)


def test_a_routing_file_that_lacks_a_credential_fails_before_the_demo_database_is_recreated(tmp_path):
    env = clean_env(tmp_path)
    env.pop("SLACK_WEBHOOK_URL", None)
    store = tmp_path / "demo"
    first = gpufleet(*DEMO, "--hours", "0.2", "--dsn", f"chdb://{store}", env=env)
    assert first.returncode == 0, first.stderr
    before = sorted(p.name for p in store.rglob("*") if p.is_file())
    out = gpufleet(*DEMO, "--dsn", f"chdb://{store}", "--notify", "deploy/notify/routes.toml", env=env)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "SLACK_WEBHOOK_URL is not set" in out.stderr and "Traceback" not in out.stderr
    assert "recreated" not in out.stdout
    assert sorted(p.name for p in store.rglob("*") if p.is_file()) == before


def test_a_dead_receiver_holds_a_replay_no_longer_than_notify_finish_wait_s(tmp_path, telemetry):
    path, alerts = telemetry
    dead = f"http://127.0.0.1:{free_port()}/hook"                # nothing listens there
    env = clean_env(tmp_path, GPUFLEET_NOTIFY__FINISH_WAIT_S="5", GPUFLEET_NOTIFY__BACKOFF_S="0.2")
    started = time.monotonic()
    out = gpufleet("replay", str(path), "--no-store", "--notify", routes(tmp_path, dead), env=env)
    took = time.monotonic() - started
    assert out.returncode == 1, out.stderr
    assert "gave up waiting after 5 s (notify.finish_wait_s)" in out.stderr
    assert "deliveries still owed after notify.finish_wait_s" in out.stderr and "told first at the next run" in \
        out.stderr
    assert took < 120                                            # not a retry budget (900 s) per delivery
    assert pending(tmp_path / "outbox") == len(alerts)           # kept for the next run


def test_listing_silences_of_a_database_that_does_not_exist_creates_nothing(clickhouse_url, tmp_path):
    missing = f"nosuch_{uuid.uuid4().hex[:8]}"
    out = gpufleet("silence", "list", "--dsn", clickhouse_url, "--database", missing, env=clean_env(tmp_path))
    assert out.returncode == 2 and missing in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    server = Store.connect(clickhouse_url, "system")
    try:
        assert missing not in {name for (name,) in server.query("SHOW DATABASES")}
    finally:
        server.close()
