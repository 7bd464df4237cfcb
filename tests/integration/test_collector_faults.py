"""The collector against a real broker that goes away: every message is counted on the topic by seq."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict

import pytest

from gpufleet.collectors import daemon
from gpufleet.collectors.nvml_standin import StandIn, Timing
from gpufleet.settings import CollectSettings
from gpufleet.streams.kafka import consume, ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def received(bootstrap: str, topic: str) -> dict[str, list[dict]]:
    by_collector = defaultdict(list)
    for _, value in consume(bootstrap, topic, f"check-{uuid.uuid4().hex[:6]}", idle_timeout_s=30, to_end=True):
        m = json.loads(value)
        by_collector[m["collector_id"]].append(m)
    return by_collector


def seqs(messages: list[dict]) -> list[int]:
    return sorted({m["seq"] for m in messages})


class Running:
    """gpufleet collect in a thread, on fake GPUs."""

    def __init__(self, broker, topic, tmp_path, **settings):
        cfg = dict(node="node-a", interval_s=0.2, spool_dir=str(tmp_path / "spool"), flush_timeout_s=60,
                   spool_fsync=False)
        cfg.update(settings)
        self.cfg = CollectSettings(**cfg)
        self.stop_event = threading.Event()
        self.nvml = StandIn(gpus=2, timing=Timing(0))
        self.nvml.install()
        self.thread = threading.Thread(target=daemon.run, args=(self.cfg, broker.bootstrap, topic),
                                       kwargs={"stop": self.stop_event})
        self.thread.start()

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=120)
        self.nvml.uninstall()
        assert not self.thread.is_alive()


def new_topic(broker) -> str:
    name = f"collect.{uuid.uuid4().hex[:8]}"
    ensure_topics(broker.bootstrap, {name: 4})
    return name


def assert_complete(by_collector, at_least: int):
    assert len(by_collector) == 1
    (messages,) = by_collector.values()
    got = seqs(messages)
    assert got == list(range(len(got))), f"gaps: {sorted(set(range(got[-1] + 1)) - set(got))[:10]}"
    assert len(got) >= at_least
    assert all(m["dropped"] == 0 for m in messages)


def test_broker_down_for_30_s_loses_nothing(own_kafka, tmp_path):
    topic = new_topic(own_kafka)
    run = Running(own_kafka, topic, tmp_path)
    time.sleep(2)
    own_kafka.stop()
    time.sleep(30)                                   # within message.timeout.ms (60 s): librdkafka holds them
    own_kafka.start()
    time.sleep(3)
    run.stop()
    assert_complete(received(own_kafka.bootstrap, topic), at_least=int(35 / 0.2 * 0.8))


def test_broker_down_longer_than_the_message_timeout_loses_nothing(own_kafka, tmp_path):
    topic = new_topic(own_kafka)
    run = Running(own_kafka, topic, tmp_path, message_timeout_s=3)
    time.sleep(2)
    own_kafka.stop()
    time.sleep(12)                                   # four message timeouts: librdkafka gives up, the spool does not
    own_kafka.start()
    time.sleep(4)
    run.stop()
    assert_complete(received(own_kafka.bootstrap, topic), at_least=int(18 / 0.2 * 0.8))


def test_spool_bound_exceeded_counts_exactly_what_was_dropped(own_kafka, tmp_path):
    topic = new_topic(own_kafka)
    own_kafka.stop()
    run = Running(own_kafka, topic, tmp_path, interval_s=0.1, spool_max_mb=0.1, max_in_flight=10)
    time.sleep(12)                                    # ~120 messages of ~1.4 kB a second into a 100 kB spool
    own_kafka.start()
    time.sleep(3)
    run.stop()
    (messages,) = received(own_kafka.bootstrap, topic).values()
    got = seqs(messages)
    missing = len(set(range(got[-1] + 1)) - set(got))
    reported = sum(m["dropped"] for m in {m["seq"]: m for m in messages}.values())
    assert missing > 20, "the test should overflow the spool"
    assert reported == missing


def test_sigkill_loses_at_most_the_tick_in_progress(own_kafka, tmp_path):
    topic = new_topic(own_kafka)
    env = {**os.environ, "GPUFLEET_COLLECT__SPOOL_DIR": str(tmp_path / "spool"),
           "GPUFLEET_COLLECT__INTERVAL_S": "0.2", "GPUFLEET_KAFKA__BOOTSTRAP": own_kafka.bootstrap,
           "GPUFLEET_KAFKA__TELEMETRY_TOPIC": topic, "GPUFLEET_COLLECT__NODE": "node-k"}
    cmd = [sys.executable, "-m", "gpufleet", "collect", "--fake-gpus", "2"]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(4)
    own_kafka.stop()                                 # messages pile up in the spool and in librdkafka...
    time.sleep(3)
    killed_at = time.time()
    first.send_signal(signal.SIGKILL)                # ...when the process dies without a word
    first.wait(timeout=30)
    own_kafka.start()
    second = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(5)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=90) == 0, second.stderr.read().decode()[-2000:]
    by_collector = received(own_kafka.bootstrap, topic)
    assert len(by_collector) == 2
    old = min(by_collector.values(), key=lambda ms: min(m["ts"] for m in ms))
    got = seqs(old)
    assert got == list(range(len(got))), "the killed collector's spooled messages all arrive"
    last_ts = max(m["ts"] for m in old)
    assert killed_at - last_ts <= 0.2 * 3, f"lost {killed_at - last_ts:.2f} s of samples"
