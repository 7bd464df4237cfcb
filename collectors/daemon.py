"""``gpufleet collect``: the node collector's loop, composed top to bottom.

NVML reader (fake or real) and host sampler -> one message per tick -> spool on
disk -> Kafka. SIGTERM or SIGINT stops sampling, flushes what it can within
``flush_timeout_s`` and exits cleanly; what is left stays in the spool for the
next start.
"""
from __future__ import annotations

import json
import logging
import signal
import threading
import time

from .attribution import Attributor, LabelsFile, ProcessAttributor
from .collector import Collector
from .host import HostSampler
from .nvml import NvmlReader
from .publisher import Publisher
from .spool import Spool

log = logging.getLogger("gpufleet.collect")


class Metrics:
    """The collector's Prometheus metrics, in a registry of its own."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        self.registry = r = CollectorRegistry()
        self.ticks = Counter("gpufleet_collector_ticks", "Samples taken", registry=r)
        self.tick_seconds = Histogram("gpufleet_collector_tick_seconds", "Wall time of one tick", registry=r,
                                      buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5))
        self.delivered = Gauge("gpufleet_collector_delivered", "Messages acknowledged by Kafka", registry=r)
        self.failures = Gauge("gpufleet_collector_delivery_failures", "Failed delivery reports", registry=r)
        self.dropped = Gauge("gpufleet_collector_dropped", "Messages dropped because the spool was full",
                             registry=r)
        self.pending = Gauge("gpufleet_collector_spool_pending", "Messages in the spool not yet acknowledged",
                             registry=r)
        self.spool_bytes = Gauge("gpufleet_collector_spool_bytes", "Size of the spool on disk", registry=r)
        self.gpus = Gauge("gpufleet_collector_gpus", "Devices sampled (GPUs or MIG instances)", registry=r)
        self.lost = Gauge("gpufleet_collector_gpus_lost", "GPUs that fell off the bus", registry=r)
        self.read_errors = Gauge("gpufleet_collector_nvml_errors", "NVML reads that failed (the field is null)",
                                 registry=r)
        self.rediscoveries = Gauge("gpufleet_collector_nvml_rediscoveries", "GPU enumerations after the first "
                                   "(periodic, after a MIG change or a lost GPU)", registry=r)

    def update(self, publisher: Publisher, reader: NvmlReader) -> None:
        self.delivered.set(publisher.delivered)
        self.failures.set(publisher.failures)
        self.dropped.set(publisher.spool.dropped_total)
        self.pending.set(publisher.spool.pending)
        self.spool_bytes.set(publisher.spool.size)
        self.gpus.set(len(reader.devices))
        self.lost.set(sum(d.lost for d in reader.physical))
        self.read_errors.set(reader.errors)
        self.rediscoveries.set(reader.rediscoveries)


def build(cfg, lib=None) -> tuple[NvmlReader, Collector]:
    """The NVML reader (opened) and the collector described by the ``collect`` settings."""
    reader = NvmlReader(lib, slow_interval_s=cfg.interval_s, rediscover_s=cfg.rediscover_s)
    reader.open()
    labels = LabelsFile(cfg.labels_file) if cfg.labels_file else None
    processes = ProcessAttributor(cfg.proc_root, cfg.job_env_var, cfg.tenant_env_var)
    collector = Collector(cfg.node, reader, HostSampler(cfg.proc_root), Attributor(labels, processes),
                          pool=cfg.pool, interval_s=cfg.interval_s)
    return reader, collector


def run(cfg, bootstrap: str, topic: str, lib=None, stop: threading.Event | None = None) -> int:
    """Collect and publish until stopped; returns the exit code."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    reader, collector = build(cfg, lib)
    spool = Spool(cfg.spool_dir, max_bytes=int(cfg.spool_max_mb * (1 << 20)),
                  segment_bytes=min(4 << 20, int(cfg.spool_max_mb * (1 << 20)) // 4), fsync=cfg.spool_fsync)
    publisher = Publisher(spool, bootstrap, topic, cfg.node, max_in_flight=cfg.max_in_flight,
                          message_timeout_s=cfg.message_timeout_s)
    metrics = Metrics()
    if cfg.metrics_port:
        from prometheus_client import start_http_server
        start_http_server(cfg.metrics_port, registry=metrics.registry)
    reader.start()
    log.info("collecting %d devices on %s every %g s into %s (collector %s)", len(reader.devices), cfg.node,
             cfg.interval_s, topic, collector.collector_id)
    next_tick = time.monotonic()
    try:
        while not stop.is_set():
            started = time.monotonic()
            msg = collector.collect(dropped=publisher.take_dropped())
            publisher.publish(json.dumps(msg, separators=(",", ":")).encode())
            metrics.ticks.inc()
            metrics.tick_seconds.observe(time.monotonic() - started)
            metrics.update(publisher, reader)
            next_tick += cfg.interval_s
            if time.monotonic() > next_tick + cfg.interval_s:     # fell behind: skip, do not burst
                skipped = int((time.monotonic() - next_tick) // cfg.interval_s)
                log.warning("collector fell %d ticks behind; skipping them", skipped)
                next_tick += skipped * cfg.interval_s
            while not stop.is_set() and (left := next_tick - time.monotonic()) > 0:
                publisher.pump(min(left, 0.1))
    finally:
        sent_all = publisher.flush(cfg.flush_timeout_s)
        log.info("stopped: %d delivered, %d still in the spool", publisher.delivered, spool.pending)
        publisher.close()
        reader.close()
        if not sent_all:
            log.warning("%d messages stay in the spool %s for the next start", spool.pending, cfg.spool_dir)
    return 0
