"""The alert topic, read as a consumer group through confluent-kafka.

Each message is a reference ``(partition, offset)``; the router acknowledges a reference once every
delivery its alert owes is final, and :meth:`AlertSource.commit` commits, per partition, up to the
first offset not acknowledged. A crash therefore reads again only alerts not fully delivered (and the
delivery log tells which of their deliveries are done). Messages below a partition's end as it was
when the partition was assigned may have been handled by its previous owner: :meth:`redelivered`
says so, so the router can look up that owner's deliveries in the store.
"""
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Hashable, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

log = logging.getLogger("gpufleet.notify")


class AlertSource:
    def __init__(self, bootstrap: str, topic: str, group_id: str, session_timeout_s: float = 10.0,
                 on_assign: Callable[[set[int]], None] | None = None,
                 on_revoke: Callable[[set[int]], None] | None = None):
        self.topic = topic
        self.on_assign_cb, self.on_revoke_cb = on_assign, on_revoke
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "enable.partition.eof": False,
            "session.timeout.ms": int(session_timeout_s * 1000),
            "heartbeat.interval.ms": int(max(0.3, min(3.0, session_timeout_s / 3)) * 1000),
            "partition.assignment.strategy": "range", "logger": log, "on_commit": self._on_commit})
        self.seen: dict[int, deque[int]] = {}          # partition -> offsets polled, in order, not committed
        self.done: dict[int, set[int]] = {}
        self.position: dict[int, int] = {}             # partition -> offset to commit (all before acknowledged)
        self.committed: dict[int, int] = {}
        self.ends_at_assign: dict[int, int] = {}
        self.paused = False
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)

    @property
    def assigned(self) -> set[int]:
        return set(self.seen)

    def _assigned(self, consumer, partitions) -> None:
        new = {tp.partition for tp in partitions}
        for p in new:
            self.seen.setdefault(p, deque())
            self.done.setdefault(p, set())
            try:
                self.ends_at_assign[p] = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1]
            except KafkaException:
                self.ends_at_assign[p] = 1 << 62          # unknown: treat everything as possibly handled elsewhere
        log.info("partitions assigned: %s", ", ".join(f"{self.topic}/{p}" for p in sorted(new)) or "none")
        if self.paused:
            consumer.pause(partitions)
        if self.on_assign_cb:
            self.on_assign_cb(new)

    def _revoked(self, consumer, partitions) -> None:
        gone = {tp.partition for tp in partitions}
        if self.on_revoke_cb:
            self.on_revoke_cb(gone)           # the delivery log reaches the store before the offsets move
        self.commit(sync=True, only=gone)
        for p in gone:
            self.seen.pop(p, None)
            self.done.pop(p, None)
            self.committed.pop(p, None)
            self.position.pop(p, None)
            self.ends_at_assign.pop(p, None)
        log.info("partitions revoked: %s", ", ".join(f"{self.topic}/{p}" for p in sorted(gone)) or "none")

    def poll(self, timeout_s: float, max_messages: int = 500) -> list[tuple[tuple[int, int], bytes | None]]:
        """``((partition, offset), value)`` of the messages read; a tombstone's value is None."""
        out = []
        for msg in self.consumer.consume(num_messages=max_messages, timeout=timeout_s):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal():
                    raise KafkaException(err)
                log.warning("kafka: %s", err)
                continue
            p, o = msg.partition(), msg.offset()
            if p is None or o is None or p not in self.seen:
                continue
            self.seen[p].append(o)
            out.append(((p, o), msg.value()))
        return out

    def redelivered(self, ref: tuple[int, int]) -> bool:
        return ref[1] < self.ends_at_assign.get(ref[0], 0)

    def ack(self, refs: Iterable[Hashable]) -> None:
        for ref in refs:
            if isinstance(ref, tuple) and ref[0] in self.done:
                self.done[ref[0]].add(ref[1])

    def commit(self, sync: bool = False, only: set[int] | None = None) -> int:
        """Commit, per partition, up to the first offset not acknowledged; returns how many partitions moved."""
        offsets = []
        for p, seen in self.seen.items():
            if only is not None and p not in only:
                continue
            done = self.done[p]
            while seen and seen[0] in done:
                done.discard(seen[0])
                self.position[p] = seen.popleft() + 1
            if self.position.get(p, -1) > self.committed.get(p, -1):
                offsets.append(TopicPartition(self.topic, p, self.position[p]))
        if not offsets:
            return 0
        try:
            if sync:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            else:
                self.consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as err:            # e.g. during a rebalance: tried again at the next commit
            log.warning("kafka: commit failed: %s", err)
            return 0
        for tp in offsets:
            self.committed[tp.partition] = tp.offset
        return len(offsets)

    def _on_commit(self, err, partitions) -> None:
        if err is not None:                      # an asynchronous commit failed: tried again at the next one
            log.warning("kafka: commit failed: %s", err)
            for tp in partitions:
                self.committed.pop(tp.partition, None)

    def pending(self) -> int:
        return sum(len(s) for s in self.seen.values())

    def pause(self) -> None:
        if not self.paused:
            self.paused = True
            self.consumer.pause([TopicPartition(self.topic, p) for p in self.seen])

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.consumer.resume([TopicPartition(self.topic, p) for p in self.seen])

    def close(self) -> None:
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError):
            pass
