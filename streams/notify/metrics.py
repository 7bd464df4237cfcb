"""The router's Prometheus metrics, in a registry of its own (nothing registered at import time)."""
from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class NotifyMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self._sent = Counter("gpufleet_notify_sent", "Deliveries a receiver accepted (2xx)", ["receiver", "status"],
                             registry=r)
        self._failed = Counter("gpufleet_notify_failed", "Deliveries dead-lettered, by reason (rejected, retry_limit)",
                               ["receiver", "reason"], registry=r)
        self._retried = Counter("gpufleet_notify_retried", "Attempts that failed (5xx, 408, timeout, no answer) and "
                                "were tried again", ["receiver"], registry=r)
        self._rate_limited = Counter("gpufleet_notify_rate_limited", "429 answers (waited for Retry-After)",
                                     ["receiver"], registry=r)
        self._throttled = Counter("gpufleet_notify_throttled_seconds", "Seconds waited for the receiver's own rate "
                                  "limit", ["receiver"], registry=r)
        self._muted = Counter("gpufleet_notify_muted", "Deliveries not told: silenced, inhibited, superseded",
                              ["receiver", "state"], registry=r)
        self._reminders = Counter("gpufleet_notify_reminders", "Firing alerts told again (repeat_interval, "
                                  "Alertmanager's resend)", ["receiver", "state"], registry=r)
        self.dead_letters = Counter("gpufleet_notify_dead_letters", "Messages of the alert topic dead-lettered, by "
                                    "reason code (invalid: not an alert; internal_error: routing it failed)",
                                    ["reason_code"], registry=r)
        self.invalid = Counter("gpufleet_notify_invalid_messages", "Messages on the alert topic that are not alerts",
                               registry=r)
        self.latency = Histogram("gpufleet_notify_delivery_seconds", "From an alert's arrival to the receiver's 2xx",
                                 ["receiver"], registry=r,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900))
        self.ledger_failures = Counter("gpufleet_notify_ledger_failures", "Failed writes of alert_deliveries to the "
                                       "store (retried)", registry=r)

    def watch(self, queue_age: Callable[[], dict[str, float]], queue_depth: Callable[[], dict[str, int]],
              receivers: list[str], up: Callable[[], dict[str, bool]] = dict) -> None:
        """Gauges read when scraped: the oldest owed delivery's age and how many are owed, per receiver, and
        whether its circuit breaker has it up."""
        live = Gauge("gpufleet_notify_receiver_up", "1 while a receiver takes deliveries, 0 while its circuit "
                     "breaker has it down (deliveries dead-lettered, one probe a minute)", ["receiver"],
                     registry=self.registry)
        for name in receivers:
            live.labels(name).set_function(_reader(up, name, 1.0))
        age = Gauge("gpufleet_notify_queue_age_seconds", "Age of the oldest delivery owed, per receiver",
                    ["receiver"], registry=self.registry)
        depth = Gauge("gpufleet_notify_queue_depth", "Deliveries owed, per receiver", ["receiver"],
                      registry=self.registry)
        for name in receivers:
            age.labels(name).set_function(_reader(queue_age, name, 0.0))
            depth.labels(name).set_function(_reader(queue_depth, name, 0))

    def sent(self, receiver: str, status: str, latencies: list[float]) -> None:
        self._sent.labels(receiver, status).inc(len(latencies))
        for s in latencies:
            self.latency.labels(receiver).observe(s)

    def failed(self, receiver: str, reason: str, n: int) -> None:
        self._failed.labels(receiver, reason).inc(n)

    def retried(self, receiver: str) -> None:
        self._retried.labels(receiver).inc()

    def rate_limited(self, receiver: str) -> None:
        self._rate_limited.labels(receiver).inc()

    def throttled(self, receiver: str, seconds: float) -> None:
        self._throttled.labels(receiver).inc(seconds)

    def muted(self, receiver: str, state: str, n: int = 1) -> None:
        self._muted.labels(receiver, state).inc(n)

    def reminder(self, receiver: str, state: str) -> None:
        self._reminders.labels(receiver, state).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _reader(read: Callable[[], dict], name: str, default: float) -> Callable[[], float]:
    return lambda: float(read().get(name, default))
