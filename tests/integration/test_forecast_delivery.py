"""Forecast and scale events published while the broker is down are held and retried, and all arrive once it is
back (the forecast process stores them only after that: tests/integration/test_demand.py)."""
import json
import threading
import time

import pytest

from gpufleet.models.scaling import Decision
from gpufleet.streams.forecast_events import forecast_event, scale_event
from gpufleet.streams.kafka import EventPublisher, consume, ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_events_published_while_the_broker_is_down_all_arrive_once_it_is_back(own_kafka):
    topics = {"gpufleet.forecast.v1": "t.forecast", "gpufleet.scale.v1": "t.scale"}
    ensure_topics(own_kafka.bootstrap, {t: 2 for t in topics.values()})
    events = []
    for i in range(40):
        pool = f"pool-{i % 4}"
        events.append(forecast_event(pool, 1e9 + 3600 * i, 600, [10.0] * 288, [8.0] * 288, [12.5] * 288))
        events.append(scale_event(pool, Decision(1e9 + 3600 * i, "hold", 16, 16, 10,
                                                 "Hold at 16 GPUs: the peak rented is 10 GPUs.", False, 16)))
    own_kafka.stop()
    publisher = EventPublisher(own_kafka.bootstrap, topics, backoff_s=(0.2, 1.0), message_timeout_s=2.0)
    done = threading.Event()

    def publish():
        publisher(events)
        done.set()
    sender = threading.Thread(target=publish, daemon=True)
    sender.start()
    time.sleep(8)
    assert not done.is_set() and publisher.failures >= 1       # held, retrying, not dropped
    own_kafka.start()
    assert done.wait(180), "the events never went out after the broker came back"

    def read(topic):
        return [json.loads(v) for _, v in consume(own_kafka.bootstrap, topic, f"check-{topic}", idle_timeout_s=5,
                                                  to_end=True)]
    forecasts, scales = read("t.forecast"), read("t.scale")
    key = lambda e: (e["pool"], e.get("made_at", e.get("at")))      # noqa: E731
    # every event arrived (a retry after a partial delivery may repeat some: at least once)
    assert {key(e) for e in forecasts} == {key(e) for e in events if e["schema"] == "gpufleet.forecast.v1"}
    assert {key(e) for e in scales} == {key(e) for e in events if e["schema"] == "gpufleet.scale.v1"}
    assert all(e in events for e in forecasts + scales)
