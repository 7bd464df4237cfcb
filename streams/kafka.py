"""Kafka edges through confluent-kafka: topic creation, producing telemetry, a consumer source.

Topics are created explicitly with their partition counts, never left to
broker auto-creation. Producers are idempotent with ``acks=all`` and use the
murmur2 partitioner, so a key lands on the same partition from Java, aiokafka
(Faust) and librdkafka clients alike.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gpufleet.collectors.publisher import producer_config

log = logging.getLogger("gpufleet.kafka")


class KafkaUnavailable(Exception):
    """The broker did not answer in time."""


def ensure_topics(bootstrap: str, topics: dict[str, int], timeout_s: float = 30.0) -> None:
    """Create the topics that do not exist; an existing one must have the stated partition count."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        existing = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as err:
        raise KafkaUnavailable(f"Kafka at {bootstrap} did not answer: {err}") from None
    missing = [NewTopic(t, num_partitions=n, replication_factor=-1) for t, n in topics.items() if t not in existing]
    if missing:
        for _topic, fut in admin.create_topics(missing, operation_timeout=timeout_s).items():
            try:
                fut.result()
            except KafkaException as err:
                if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
    deadline = time.monotonic() + timeout_s
    while True:   # wait until the metadata shows every topic with its partitions
        meta = admin.list_topics(timeout=timeout_s).topics
        ready = all(t in meta and len(meta[t].partitions) > 0 for t in topics)
        if ready or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for t, n in topics.items():
        have = len(meta[t].partitions) if t in meta else 0
        if have != n:
            raise ValueError(f"topic {t} has {have} partitions, expected {n}")


def anchor_offsets(bootstrap: str, group: str, topics: list[str], timeout_s: float = 30.0) -> int:
    """Commit, for ``group``, the first offset of every partition of ``topics`` that has no commit yet.

    A consumer group sent back to its committed offsets after a rebalance (Faust does so, to deliver
    again what was not acknowledged) cannot go back on a partition it never committed: anchored at
    the start, it can. Returns how many partitions were anchored; a group already active elsewhere
    refuses the commit, which is harmless (its members committed what they read).
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                meta = consumer.list_topics(timeout=timeout_s).topics
                tps = [TopicPartition(t, p) for t in topics if t in meta for p in meta[t].partitions]
                missing = [tp for tp in consumer.committed(tps, timeout=timeout_s) if tp.offset < 0]
                anchors = [TopicPartition(tp.topic, tp.partition,
                                          consumer.get_watermark_offsets(tp, timeout=timeout_s)[0]) for tp in missing]
                break
            except KafkaException as err:     # e.g. a new topic whose leaders are still being elected
                if time.monotonic() > deadline:
                    raise KafkaUnavailable(f"Kafka at {bootstrap} did not answer: {err}") from None
                time.sleep(0.2)
        if anchors:
            try:
                consumer.commit(offsets=anchors, asynchronous=False)
            except KafkaException:
                return 0
        return len(anchors)
    finally:
        consumer.close()


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics(topics, operation_timeout=30).values():
        try:
            fut.result()
        except KafkaException:
            pass


def produce(bootstrap: str, topic: str, items: Iterable[tuple[str, bytes]], **config) -> int:
    """Produce ``(key, value)`` pairs and wait until each is acknowledged; raises if any failed."""
    producer = Producer(producer_config(bootstrap, **config))
    failed: list[str] = []

    def report(err, msg):
        if err is not None:
            failed.append(str(err))

    n = 0
    for n, (key, value) in enumerate(items, 1):  # noqa: B007 (n is the count returned)
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=report)
                break
            except BufferError:           # local queue full: let deliveries drain
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    if failed or remaining:
        raise KafkaException(f"{len(failed)} messages failed, {remaining} undelivered: {failed[:3]}")
    return n


def produce_to_every_partition(bootstrap: str, topic: str, value: bytes) -> int:
    """Send ``value`` once to each partition of ``topic`` (a control message such as the end of stream)."""
    partitions = partitions_of(bootstrap, topic)
    producer = Producer(producer_config(bootstrap))
    failed: list[str] = []
    for p in partitions:
        producer.produce(topic, value=value, partition=p,
                         on_delivery=lambda err, msg: failed.append(str(err)) if err is not None else None)
    remaining = producer.flush(60)
    if failed or remaining:
        raise KafkaException(f"{len(failed)} messages failed, {remaining} undelivered: {failed[:3]}")
    return len(partitions)


def group_progress(bootstrap: str, group: str, topics: list[str]) -> list[tuple[str, int, int | None, int]]:
    """Per partition of ``topics``: (topic, partition, offset ``group`` committed or None, end offset)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(timeout=10).topics
        missing = [t for t in topics if t not in meta]
        if missing:
            raise KafkaUnavailable(f"no topic {', '.join(missing)} at {bootstrap}")
        tps = [TopicPartition(t, p) for t in topics for p in sorted(meta[t].partitions)]
        committed = consumer.committed(tps, timeout=10)
        out = []
        for tp in committed:
            end = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)[1]
            out.append((tp.topic, tp.partition, tp.offset if tp.offset >= 0 else None, end))
        return out
    except KafkaException as err:
        raise KafkaUnavailable(f"Kafka at {bootstrap} did not answer: {err}") from None
    finally:
        consumer.close()


class OffsetReader:
    """A group's committed offsets and the partitions' ends, as the broker has them (one client, kept open; not
    thread-safe: one call at a time)."""

    def __init__(self, bootstrap: str, group: str, timeout_s: float = 10.0):
        self.timeout_s = timeout_s
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})

    def read(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int | None, int]]:
        """``(topic, partition) -> (committed offset or None, end offset)``; raises KafkaException when the broker
        does not answer."""
        if not partitions:
            return {}
        committed = self.consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=self.timeout_s)
        out = {}
        for tp in committed:
            end = self.consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition),
                                                      timeout=self.timeout_s, cached=False)[1]
            out[(tp.topic, tp.partition)] = (tp.offset if tp.offset >= 0 else None, end)
        return out

    def close(self) -> None:
        self.consumer.close()


def consume(bootstrap: str, topic: str, group: str, *, stop_after: int | None = None,
            idle_timeout_s: float | None = None, to_end: bool = False) -> Iterator[tuple[str, bytes]]:
    """Yield ``("topic/partition/offset", value)`` from the start of ``topic``.

    Stops after ``stop_after`` messages, when nothing arrived for ``idle_timeout_s``, or (``to_end``)
    once every partition is read up to its end as it was when reading began.
    Offsets are committed as messages are handed over.
    """
    ends = {p: e for p, e in end_offsets(bootstrap, topic).items() if e > 0} if to_end else None
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": True, "enable.partition.eof": False})
    consumer.subscribe([topic])
    n, last = 0, time.monotonic()
    try:
        while (stop_after is None or n < stop_after) and ends != {}:
            batch = consumer.consume(num_messages=500, timeout=0.5)
            if not batch:
                if idle_timeout_s is not None and time.monotonic() - last > idle_timeout_s:
                    return
                continue
            last = time.monotonic()
            for msg in batch:
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(error)
                n += 1
                partition, offset = msg.partition() or 0, msg.offset() or 0
                if ends is not None and offset + 1 >= ends.get(partition, 0):
                    ends.pop(partition, None)
                yield f"{msg.topic()}/{partition}/{offset}", msg.value() or b""
    finally:
        consumer.close()


def partitions_of(bootstrap: str, topic: str, timeout_s: float = 10.0) -> list[int]:
    """The partition numbers of ``topic``, from the cluster's metadata (no leader needs to answer for its
    offsets, so a broker that is failing over does not stop a control message)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        meta = admin.list_topics(topic, timeout=timeout_s).topics
    except KafkaException as err:
        raise KafkaUnavailable(f"Kafka at {bootstrap} did not answer: {err}") from None
    if topic not in meta or meta[topic].error is not None:
        raise KafkaUnavailable(f"no topic {topic} at {bootstrap}")
    return sorted(meta[topic].partitions)


# Errors a partition's leader gives while it fails over or catches up: asked again, they pass.
PASSING_ERRORS = frozenset({KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.LEADER_NOT_AVAILABLE,
                            KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._TIMED_OUT,
                            KafkaError.UNKNOWN_TOPIC_OR_PART})


def end_offsets(bootstrap: str, topic: str, patience_s: float = 60.0) -> dict[int, int]:
    """High watermark of each partition. A leader that is failing over or catching up is asked again
    (with backoff) for up to ``patience_s`` before the error is raised."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "gpufleet-offsets"})
    deadline, pause = time.monotonic() + patience_s, 0.25
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends: dict[int, int] = {}
        for p in parts:
            while p not in ends:
                try:
                    ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                except KafkaException as err:
                    if err.args[0].code() not in PASSING_ERRORS or time.monotonic() > deadline:
                        raise
                    log.info("partition %s/%s: %s; asking again", topic, p, err.args[0].str())
                    time.sleep(pause)
                    pause = min(pause * 2, 5.0)
        return ends
    finally:
        consumer.close()


class EventPublisher:
    """Publishes events to topics by schema (key = ``key_field``), returning once the broker has
    acknowledged all of them; while it cannot, it retries with backoff (``stop`` set: gives up)."""

    def __init__(self, bootstrap: str, topics: dict[str, str], key_field: str = "pool",
                 backoff_s: tuple[float, float] = (0.5, 30.0), message_timeout_s: float = 30.0, stop=None):
        self.bootstrap, self.topics, self.key_field = bootstrap, topics, key_field
        self.backoff_s, self.message_timeout_s, self.stop = backoff_s, message_timeout_s, stop
        self.failures = 0

    def __call__(self, events: list[dict]) -> None:
        by_topic: dict[str, list[tuple[str, bytes]]] = {}
        for e in events:
            by_topic.setdefault(self.topics[e["schema"]], []).append(
                (str(e.get(self.key_field) or ""), json.dumps(e, separators=(",", ":")).encode()))
        delay = self.backoff_s[0]
        for topic, items in by_topic.items():
            while True:
                try:
                    produce(self.bootstrap, topic, items, **{"message.timeout.ms": int(self.message_timeout_s * 1000)})
                    break
                except (KafkaException, BufferError) as err:
                    self.failures += 1
                    if self.stop is not None and self.stop.is_set():
                        raise KafkaUnavailable(f"stopped while Kafka at {self.bootstrap} was failing: {err}") from None
                    log.warning(
                        "could not publish %d events to %s, retrying in %.1f s: %s", len(items), topic, delay, err)
                    time.sleep(delay)
                    delay = min(delay * 2, self.backoff_s[1])
