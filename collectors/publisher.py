"""Publishing telemetry to Kafka with confluent-kafka, from the on-disk spool.

Messages go to the spool first and are produced from it in order, at most
``max_in_flight`` at a time, so librdkafka's in-memory queue never holds more
than that. Delivery reports advance the spool's acknowledged offset; when a
delivery fails (the broker gone for longer than ``message.timeout.ms``) the
publisher waits for the rest of the in-flight messages to report, then sends
again from the first unacknowledged record. Downstream ignores the repeats
(a repeated ``(gpu uuid, ts)`` is a duplicate).
"""
from __future__ import annotations

import logging
import re
import time

from confluent_kafka import KafkaError, KafkaException, Producer

from .spool import Spool

log = logging.getLogger("gpufleet.collect")
_DROPPED = re.compile(rb'"dropped":\s*(\d+)')


def _carried(record: bytes) -> int:
    """The ``dropped`` count a message carries: lost with it, so it is counted again."""
    m = _DROPPED.search(record)
    return int(m.group(1)) if m else 0


def producer_config(bootstrap: str, **extra) -> dict:
    """Idempotent, ``acks=all``, lz4, murmur2 partitioning (the same partition as Java and aiokafka clients)."""
    return {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "compression.type": "lz4", "linger.ms": 20, "partitioner": "murmur2_random", **extra}


class Publisher:
    def __init__(self, spool: Spool, bootstrap: str, topic: str, key: str, *, max_in_flight: int = 1000,
                 message_timeout_s: float = 60.0, producer: Producer | None = None):
        self.spool, self.topic, self.key = spool, topic, key.encode()
        self.max_in_flight = max_in_flight
        self.producer = producer or Producer(producer_config(
            bootstrap, **{"message.timeout.ms": int(message_timeout_s * 1000), "error_cb": self._on_error,
                          "logger": log}))
        self.cursor = spool.acked          # next offset to produce
        spool.on_drop = self._dropped_from_spool
        self.in_flight = 0
        self._done: set[int] = set()       # delivered offsets beyond the acknowledged prefix
        self._failed = False
        self.delivered = 0
        self.failures = 0
        self.resends = 0
        self._last_error_log = 0.0

    def _on_error(self, err: KafkaError) -> None:
        now = time.monotonic()
        if now - self._last_error_log > 30:
            self._last_error_log = now
            log.warning("Kafka: %s (messages wait in the spool: %d)", err, self.spool.pending)

    def _dropped_from_spool(self, records: list[tuple[int, bytes]]) -> None:
        """The spool's bound dropped these records: what was never produced is lost now (with the drop
        counts it carried); what is in librdkafka's queue is lost only if its delivery fails."""
        unsent = [data for offset, data in records if offset >= self.cursor]
        if unsent:
            self.spool.count_dropped(len(unsent) + sum(map(_carried, unsent)))
        self.cursor = max(self.cursor, records[-1][0] + 1)

    def take_dropped(self) -> int:
        """Messages lost since the last call, for the ``dropped`` field of the next message."""
        return self.spool.take_dropped()

    def publish(self, data: bytes) -> int:
        """Spool one message; it is sent by ``pump``."""
        return self.spool.append(data)

    def _report(self, offset: int, data: bytes):
        def on_delivery(err, _msg):
            self.in_flight -= 1
            if err is not None:
                self.failures += 1
                if offset < self.spool.first_offset:     # its spool copy was dropped: it is lost
                    self.spool.count_dropped(1 + _carried(data))
                else:
                    self._failed = True
                return
            self.delivered += 1
            self._done.add(offset)
            upto = self.spool.acked
            while upto in self._done:
                self._done.discard(upto)
                upto += 1
            self.spool.ack(upto)
        return on_delivery

    def pump(self, timeout_s: float = 0.0) -> None:
        """Serve delivery reports and produce what the spool holds, within the in-flight limit."""
        self.producer.poll(timeout_s)
        if self._failed:
            if self.in_flight:
                return
            self._failed = False
            self._done.clear()
            self.resends += self.cursor - self.spool.acked
            self.cursor = self.spool.acked    # send again from the first unacknowledged record
            log.warning("deliveries failed: sending again from spool offset %d (%d waiting)",
                        self.cursor, self.spool.pending)
        self.cursor = max(self.cursor, self.spool.acked)
        room = self.max_in_flight - self.in_flight
        if room <= 0 or self.cursor >= self.spool.next_offset:
            return
        for offset, data in self.spool.read(self.cursor, room):
            try:
                self.producer.produce(self.topic, value=data, key=self.key, on_delivery=self._report(offset, data))
            except BufferError:
                break
            except KafkaException as err:
                log.error("cannot produce: %s", err)
                break
            self.in_flight += 1
            self.cursor = offset + 1
        self.producer.poll(0)

    def flush(self, timeout_s: float) -> bool:
        """Try to deliver everything spooled within ``timeout_s``; True if nothing is left."""
        deadline = time.monotonic() + timeout_s
        while self.spool.pending and time.monotonic() < deadline:
            self.pump(min(0.1, max(0.0, deadline - time.monotonic())))
        self.producer.flush(max(0.0, min(1.0, deadline - time.monotonic())))
        self.pump(0)
        return self.spool.pending == 0

    def close(self) -> None:
        self.spool.close()
