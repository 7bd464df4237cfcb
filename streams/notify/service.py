"""``gpufleet notify`` and ``--notify`` on replay and demo, composed: the outbox, a sender per receiver,
the ledger thread, the router, and either the alert topic (distributed mode) or this process's own
alerts (embedded mode) feeding it.
"""
from __future__ import annotations

import json
import logging
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.contracts.events import DEADLETTER_SCHEMA, alert_problem, dead_letter
from gpufleet.contracts.telemetry import unreadable

from .ledger import Ledger
from .metrics import NotifyMetrics
from .outbox import Outbox
from .router import Around, Router
from .routing import Routes
from .sender import RetryPolicy, Sender

log = logging.getLogger("gpufleet.notify")


@dataclass
class Parts:
    outbox: Outbox
    senders: dict[str, Sender]
    ledger: Ledger | None
    router: Router
    metrics: NotifyMetrics
    server: object | None = None

    def start(self) -> None:
        for sender in self.senders.values():
            sender.start()
        if self.ledger is not None:
            self.ledger.start()

    def stop(self) -> None:
        for sender in self.senders.values():
            sender.stop()
        for sender in self.senders.values():
            if sender.is_alive():
                sender.join(timeout=_join_timeout(sender))
        self.router.tick()                   # record what finished while stopping
        if self.ledger is not None:
            self.ledger.stop()
        if self.server is not None:
            self.server.shutdown()           # type: ignore[attr-defined]
        self.outbox.close()


def _join_timeout(sender: Sender) -> float:
    return sender.timeout_s + 5


def build(settings, routes: Routes, store, keep_pending: bool) -> Parts:
    """Every part, nothing started. ``store`` None leaves out silences and the ledger (tests)."""
    n = settings.notify
    outbox = Outbox(n.outbox_dir, n.outbox_fsync)
    metrics = NotifyMetrics()
    results: queue.Queue = queue.Queue()
    policy = RetryPolicy(n.retry_for_s, n.backoff_s, n.backoff_max_s, n.timeout_s, n.probe_every_s)
    senders = {name: Sender(r, outbox, policy, results, metrics) for name, r in routes.receivers.items()}
    ledger = (Ledger(store, outbox, metrics, n.ledger_interval_s, n.silence_refresh_s,
                     is_source=lambda values: any(r.is_source(values) for r in routes.inhibit_rules))
              if store is not None else None)
    around = Around(silences=(lambda: ledger.silences) if ledger else list,
                    firing=(lambda: ledger.firing) if ledger else dict)
    router = Router(routes, outbox, senders, results, metrics, keep_pending=keep_pending, around=around)
    metrics.watch(router.queue_age, router.queue_depth, list(senders),
                  lambda: {name: sender.up for name, sender in senders.items()})
    parts = Parts(outbox, senders, ledger, router, metrics)
    if n.metrics_port:
        from prometheus_client import start_http_server
        parts.server, _ = start_http_server(n.metrics_port, n.metrics_host, registry=metrics.registry)
    return parts


def read_alert(value: bytes | None) -> tuple[object, str | None]:
    """A message of the alert topic: the alert, or why it is not one (any record at all gives one or the other)."""
    if value is None:
        return None, "(message): no value (a tombstone: alerts are never deleted)"
    try:
        event = json.loads(value)
    except (ValueError, RecursionError) as err:
        return None, f"(message): not JSON: {unreadable(err)}"
    return event, alert_problem(event)


class DeadLetters:
    """The router's dead letters, to ``<alert topic>.dlq`` (``gpufleet.deadletter.v1``, the worker's form): each is
    sent and acknowledged by the broker before its input's offset may be committed; while the broker refuses,
    it is retried with backoff (nothing is acknowledged meanwhile, so nothing is lost)."""

    def __init__(self, bootstrap: str, topic: str, metrics: NotifyMetrics, stop: threading.Event):
        from gpufleet.streams.kafka import EventPublisher
        self.topic, self.metrics = topic, metrics
        self.publisher = EventPublisher(bootstrap, {DEADLETTER_SCHEMA: topic}, key_field="source", stop=stop)

    def __call__(self, letters: list[tuple[str, str, str, object]]) -> None:
        """``(reason code, reason, source, payload)`` each."""
        records = [dead_letter(code, reason, source, time.time(), "" if value is None else
                               value if isinstance(value, bytes | str) else json.dumps(value))
                   for code, reason, source, value in letters]
        self.publisher(records)
        for code, reason, source, _ in letters:
            self.metrics.dead_letters.labels(code).inc()
            log.warning("dead-lettered %s to %s: %s: %s", source, self.topic, code, reason)


def dead_letter_topic(topic: str) -> str:
    """Where the router dead-letters what it cannot route: ``gpufleet.alerts.dlq`` for ``gpufleet.alerts``."""
    return f"{topic}.dlq"


def run(settings, routes: Routes, store, topic: str, stop: threading.Event | None = None) -> int:
    """The router process of the distributed mode, until SIGTERM or SIGINT (or ``stop``)."""
    from .source import AlertSource

    n = settings.notify
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    parts = build(settings, routes, store, keep_pending=False)
    dropped = parts.outbox.forget_pending()      # the topic is the outbox here: what they owed comes again
    if dropped:
        log.info("%d deliveries pending in %s were left by the embedded mode; dropped", dropped, parts.outbox.path)
    router, ledger = parts.router, parts.ledger
    if ledger is not None:
        ledger.refresh()
    def revoked(partitions: set[int]) -> None:
        router.revoke(partitions)
        if ledger is not None:
            ledger.export()         # the next owner looks up in the store what was told

    dead = DeadLetters(settings.kafka.bootstrap, dead_letter_topic(topic), parts.metrics, stop)
    source = AlertSource(settings.kafka.bootstrap, topic, n.group_id, n.session_timeout_s,
                         on_assign=lambda ps: router.load(lambda p: p in ps), on_revoke=revoked)
    parts.start()
    log.info("routing %s (group %s) to %s; delivery log %s", topic, n.group_id,
             ", ".join(f"{name} ({r.kind})" for name, r in routes.receivers.items()), parts.outbox.path)
    last_commit = last_prune = time.monotonic()
    try:
        while not stop.is_set():
            batch = source.poll(0.1)
            if batch:
                items, bad = [], []
                for ref, value in batch:
                    event, problem = read_alert(value)
                    if problem is None:
                        items.append((event, ref, ref[0]))
                    else:
                        bad.append((ref, "invalid", problem, value))
                again = [e["id"] for (e, ref, _) in items if source.redelivered(ref)]   # type: ignore[index]
                known = ledger.told_elsewhere(again) if ledger is not None and again else None
                router.offer(items, known)
                bad += router.take_rejected()
                if bad:
                    dead([(code, reason, f"{topic}/{ref[0]}/{ref[1]}", value) for ref, code, reason, value in bad])
                    source.ack([ref for ref, *_ in bad])
            source.ack(router.tick())
            now = time.monotonic()
            if now - last_commit >= n.commit_interval_s:
                source.commit()
                last_commit = now
            owed = router.owed()
            if owed >= n.max_owed:
                if not source.paused:
                    log.warning("%d deliveries owed: reading alerts paused until half are done", owed)
                source.pause()
            elif source.paused and owed < n.max_owed // 2:
                source.resume()
            if now - last_prune >= 3600:
                parts.outbox.prune(time.time() - n.retention_days * 86400)
                last_prune = now
    finally:
        log.info("stopping: committing finished offsets; deliveries under way stay owed")
        for sender in parts.senders.values():
            sender.stop()
        for sender in parts.senders.values():
            sender.join(timeout=_join_timeout(sender))
        source.ack(router.tick())
        source.commit(sync=True)
        source.close()
        parts.stop()
    return 0


class _Tap:
    """The events writer of an embedded run, with every alert also handed to the notifier."""

    def __init__(self, inner, offer: Callable[[list[dict]], None]):
        self.inner, self.offer = inner, offer

    @property
    def count(self) -> int:
        return self.inner.count

    def write(self, items: list[dict]) -> None:
        self.inner.write(items)
        self.offer(items)

    def close(self) -> None:
        self.inner.close()


class LocalNotifier:
    """Delivery in the embedded mode (``replay`` / ``demo --notify``): the alerts of this process, through
    the durable outbox (what a run cut short still owes is told at the next start)."""

    def __init__(self, settings, routes: Routes, store):
        self.settings, self.routes = settings, routes
        self.parts = build(settings, routes, store, keep_pending=True)
        self.inbox: queue.Queue = queue.Queue()
        self.stopping = threading.Event()
        self.draining = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="notify-router", daemon=True)
        self.offered = 0

    def start(self) -> int:
        """Start delivering; returns how many deliveries a previous run left owed (told now)."""
        if self.parts.ledger is not None:
            self.parts.ledger.refresh()
        resumed = self.parts.router.resume()
        self.parts.router.load()
        self.parts.start()
        self.thread.start()
        return resumed

    def tap(self, events):
        return _Tap(events, self.offer)

    def offer(self, events: list[dict]) -> None:
        alerts = [e for e in events if e.get("schema") == "gpufleet.alert.v1"]
        if alerts:
            self.offered += len(alerts)
            self.inbox.put(alerts)

    def _loop(self) -> None:
        router = self.parts.router
        try:
            while not self.stopping.is_set():
                try:
                    alerts = self.inbox.get(timeout=0.05)
                    router.offer([(a, None, -1) for a in alerts])
                    for _, code, reason, alert in router.take_rejected():     # this process's own alerts
                        self.parts.metrics.dead_letters.labels(code).inc()
                        log.error("alert %s not routed: %s: %s", alert.get("id"), code, reason)
                except queue.Empty:
                    pass
                router.tick(flush_all=self.draining.is_set() and self.inbox.empty())
        except BaseException as err:          # reported by finish()
            self.error = err

    def owed(self) -> int:
        return self.parts.router.owed() + self.inbox.qsize()

    def progress(self) -> str:
        """A progress line that tells pacing (rate limits, a receiver's 429) from failure (retried for up to
        ``notify.retry_for_s``)."""
        busy = [s.describe() for s in self.parts.senders.values() if s.state in ("paced", "retrying")]
        failing = any(s.state == "retrying" for s in self.parts.senders.values())
        return (f"notify: {self.owed()} deliveries still owed" + (f"; {'; '.join(busy)}" if busy else "") +
                (f" (failures are retried for up to {self.settings.notify.retry_for_s:g} s)" if failing else "") +
                f"; Ctrl-C keeps them in {self.parts.outbox.path}")

    def finish(self, report: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> dict[str, int]:
        """Tell everything owed (groups flushed now, not at their timers), then stop; returns counts by state, with
        ``owed``: what was still owed after ``notify.finish_wait_s`` (kept in the outbox for the next run).
        Interrupted, what is still owed stays in the outbox too."""
        self.draining.set()
        started = last = time.monotonic()
        limit = self.settings.notify.finish_wait_s
        owed = 0
        try:
            while self.thread.is_alive() and self.owed() > 0:
                if time.monotonic() - started >= limit:
                    owed = self.owed()
                    report(f"notify: gave up waiting after {limit:g} s (notify.finish_wait_s): {self.progress()}")
                    break
                time.sleep(0.05)
                if time.monotonic() - last >= 5:
                    last = time.monotonic()
                    report(self.progress())
        finally:
            self.stopping.set()
            self.thread.join(timeout=30)
            counts = dict(self.parts.router.counts)
            self.parts.stop()
        if self.error is not None:
            raise self.error
        if owed:
            counts["owed"] = owed
        return counts
