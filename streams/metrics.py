"""The worker's Prometheus metrics, in a registry of its own (nothing registered at import time)."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger("gpufleet.worker")


class WorkerMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.events = Counter("gpufleet_worker_events", "What the stages saw, by kind", ["stage", "kind"],
                              registry=r)
        self.dead_letters = Counter("gpufleet_worker_dead_letters", "Inputs dead-lettered, by reason code (invalid, "
                                    "late, clock_skew, too_large, internal_error)", ["stage", "reason_code"],
                                    registry=r)
        self.clock_skew = Counter("gpufleet_worker_clock_skew", "Messages ahead of the clock, by node", ["node"],
                                  registry=r)
        self.durable_seconds = Histogram(
            "gpufleet_worker_durable_batch_seconds", "Making one batch durable: store write, broker, state",
            ["stage"], registry=r, buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.lag = Gauge("gpufleet_worker_consumer_lag", "Messages past the group's committed offset (the broker's "
                         "end offset less the committed one), by topic and partition", ["topic", "partition"],
                         registry=r)
        self.committed = Gauge("gpufleet_worker_committed_offset", "The group's committed offset, as the broker has "
                               "it", ["topic", "partition"], registry=r)
        self.stuck_seconds = Gauge("gpufleet_worker_partition_stuck_seconds", "How long records have waited past a "
                                   "committed offset that does not move (0: it moves, or nothing waits)",
                                   ["topic", "partition"], registry=r)
        self.stuck = Gauge("gpufleet_worker_partition_stuck", "1 while the partition is stuck (waiting longer than "
                           "worker.stuck_after_s)", ["topic", "partition"], registry=r)
        self.restarts = Counter("gpufleet_worker_agent_restarts", "Agents restarted after they crashed", ["agent"],
                                registry=r)
        self.batches = Counter("gpufleet_worker_batches", "Batches made durable", ["stage"], registry=r)
        self.last_batch = 0.0
        self.last_batch_gauge = Gauge("gpufleet_worker_last_batch_timestamp", "When a batch last became durable",
                                      registry=r)
        self.last_batch_gauge.set_function(lambda: self.last_batch)

    def watch_store(self, failures: Callable[[], float], unavailable_s: Callable[[], float]) -> None:
        """Gauges read when scraped, so they tell the truth while a write is still being retried."""
        Gauge("gpufleet_worker_store_failures", "Failed store writes, retried", registry=self.registry) \
            .set_function(failures)
        Gauge("gpufleet_worker_store_unavailable_seconds", "Seconds the store has been unavailable, in all",
              registry=self.registry).set_function(unavailable_s)

    def count(self, stage: str, counts) -> None:
        for kind, n in counts.items():
            if kind.startswith("clock_skew:"):
                node = kind.split(":", 1)[1]
                self.clock_skew.labels(node).inc(n)
                log.warning("clock skew: %d messages from node %s are ahead of this worker's clock", n, node)
            else:
                self.events.labels(stage, kind).inc(n)
                if kind.startswith("dead_"):
                    self.dead_letters.labels(stage, kind[5:]).inc(n)

    def event(self, stage: str, kind: str, n: int = 1) -> None:
        self.events.labels(stage, kind).inc(n)

    def batch_done(self, stage: str, seconds: float) -> None:
        self.durable_seconds.labels(stage).observe(seconds)
        self.batches.labels(stage).inc()
        self.last_batch = time.time()

    def forget_partitions(self, partitions) -> None:
        """Partitions no longer assigned: their lag is another worker's to report."""
        for tp in partitions:
            for gauge in (self.lag, self.committed, self.stuck_seconds, self.stuck):
                try:
                    gauge.remove(tp.topic, str(tp.partition))
                except KeyError:
                    pass

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
