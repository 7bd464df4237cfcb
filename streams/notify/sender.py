"""Delivering to one receiver: its own thread, its requests in order, within its rate limit.

A request answered 2xx is recorded ``sent``. A 429 waits what its ``Retry-After`` says (else the
backoff) and tries again; a 5xx, a 408, a timeout or no answer at all tries again after a backoff
that doubles from ``backoff_s`` up to ``backoff_max_s``, with jitter (each wait is drawn between half
and all of it). Past ``retry_for_s`` from the first attempt the delivery is dead-lettered
(``retry_limit``) with its last error and the number of attempts; an answer that a retry cannot
change (400, 401, 403, 404, ...) dead-letters it at once (``rejected``). One request at a time per
receiver keeps each incident's statuses in the order they came. Errors are logged and kept without
the receiver's secrets.

A circuit breaker keeps one dead receiver from holding its own queue for a retry budget per delivery:
once a delivery has been retried past its budget the receiver is marked down, and while it is down each
delivery queued for it is dead-lettered at once (``receiver_down``) except one attempt, a probe, every
``probe_every_s``; the first delivery a probe gets through marks it up again. Each receiver has its
own thread and queue, so the others go on at their own pace throughout. The state is in the delivery
log (``gpufleet notify status``) and on ``/metrics`` (``gpufleet_notify_receiver_up``).
"""
from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import http
from .outbox import Delivery, Outbox
from .receivers import Notification, Receiver, Request, Verdict

log = logging.getLogger("gpufleet.notify")


@dataclass(frozen=True)
class RetryPolicy:
    retry_for_s: float = 900.0
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    timeout_s: float = 10.0
    probe_every_s: float = 60.0

    def backoff(self, failures: int, rng: random.Random) -> float:
        full = min(self.backoff_max_s, self.backoff_s * 2 ** max(0, failures - 1))
        return full / 2 + rng.uniform(0, full / 2)


class TokenBucket:
    """``rate`` requests a second with bursts of ``burst``; ``rate`` 0 is no limit."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate, max(1, burst), clock
        self.tokens, self.stamp = float(self.burst), clock()

    def wait_s(self) -> float:
        """Seconds until a request may go; takes its token (so call it once per request, then wait)."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= 1
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


@dataclass
class Job:
    """A notification and the deliveries it settles (one per alert, in the same order; none for a reminder)."""

    notification: Notification
    deliveries: list[Delivery]
    group_key: str = ""


@dataclass
class Result:
    """What became of deliveries: a final state, or ``abandoned`` (stopping; they stay owed)."""

    deliveries: list[Delivery]
    state: str
    job: Job
    reason: str = ""
    error: str = ""
    sent_at: float | None = None
    latency_s: list[float] = field(default_factory=list)


class Sender(threading.Thread):
    def __init__(self, receiver: Receiver, outbox: Outbox, policy: RetryPolicy, results: queue.Queue,
                 metrics=None, post: Callable[..., http.Response] = http.post, seed: int | None = None):
        super().__init__(name=f"notify-{receiver.name}", daemon=True)
        self.receiver, self.outbox, self.policy, self.results = receiver, outbox, policy, results
        self.metrics, self.post = metrics, post
        self.jobs: queue.Queue[Job] = queue.Queue()
        self.stopping = threading.Event()
        self.bucket = TokenBucket(*receiver.rate)
        self.rng = random.Random(seed)
        self.timeout_s = receiver.config.timeout_s or policy.timeout_s
        self.state = "idle"          # idle, sending, paced (waiting for the rate limit or a 429's Retry-After),
        self.last_error = ""         # or retrying (after a failure: last_error says which)
        self.down_since: float | None = None     # wall time it was marked down; None: up
        self.last_probe = 0.0                    # monotonic time of the last attempt made while down

    @property
    def up(self) -> bool:
        return self.down_since is None

    def _mark(self, down: bool, error: str = "") -> None:
        if down == (not self.up):
            return
        self.down_since = time.time() if down else None
        self.last_probe = time.monotonic()
        if down:
            log.error("receiver %s: marked down; its deliveries are dead-lettered (receiver_down) with a probe "
                      "every %g s until one gets through", self.receiver.name, self.policy.probe_every_s)
        else:
            log.warning("receiver %s: a delivery got through; marked up", self.receiver.name)
        self.outbox.receiver_state(self.receiver.name, "down" if down else "up", self.down_since, error)

    def describe(self) -> str:
        """What this receiver's deliveries are doing now, for a progress line."""
        if self.state == "paced":
            rate, burst = self.receiver.rate
            return f"{self.receiver.name}: paced by its rate limit ({rate:g}/s)" if rate else \
                f"{self.receiver.name}: waiting as the receiver asked (429)"
        if not self.up:
            return f"{self.receiver.name}: down ({self.last_error[:120]})"
        if self.state == "retrying":
            return f"{self.receiver.name}: retrying after a failure ({self.last_error[:120]})"
        return f"{self.receiver.name}: {self.state}"

    def submit(self, job: Job) -> None:
        self.jobs.put(job)

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                job = self.jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                self._job(job)
            except Exception as err:                 # a bug must not stop a receiver's deliveries, nor leave them
                log.exception("receiver %s: unexpected error; the deliveries are dead-lettered", self.receiver.name)
                self._settle(job, job.deliveries, "dead", "internal_error",        # owed with nothing to retry
                             self.receiver.mask(f"{type(err).__name__}: {err}"))
        while True:                                  # what is still queued stays owed
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            self.results.put(Result(job.deliveries, "abandoned", job))

    def _job(self, job: Job) -> None:
        try:
            requests = self.receiver.requests(job.notification)
        except Exception as err:                     # a payload that cannot be built will never be
            error = self.receiver.mask(f"cannot build the request: {type(err).__name__}: {err}")
            log.error("receiver %s: %s", self.receiver.name, error)
            self._settle(job, job.deliveries, "dead", "rejected", error)
            return
        for request in requests:
            owed = [job.deliveries[i] for i in request.alerts] if job.deliveries else []
            if owed and all(d.cancelled for d in owed):
                continue
            if self.stopping.is_set():
                self.results.put(Result(owed, "abandoned", job))
                continue
            self._deliver(job, request, owed)

    def _deliver(self, job: Job, request: Request, owed: list[Delivery]) -> None:
        name, policy = self.receiver.name, self.policy
        started = time.monotonic()
        attempts = failures = 0
        probe = not self.up
        if probe:
            if started - self.last_probe < policy.probe_every_s:
                self._settle(job, owed, "dead", "receiver_down", f"receiver down: {self.last_error}")
                return
            self.last_probe = started
        while True:
            wait = self.bucket.wait_s()
            if wait > 0:
                self.state = "paced"
                if self.metrics:
                    self.metrics.throttled(name, wait)
                if self.stopping.wait(wait):
                    self.results.put(Result(owed, "abandoned", job))
                    return
            attempts += 1
            for d in owed:
                d.attempts += 1
            self.state = "sending"
            try:
                answer = self.post(request.url, request.body, {**request.headers, **self.receiver.sign(request)},
                                   self.timeout_s)
                verdict = self.receiver.verdict(answer)
            except http.Unreachable as err:
                verdict = Verdict("retry", f"no answer: {err}")
            except http.BadRequest as err:
                verdict = Verdict("rejected", str(err))
            except Exception as err:                 # anything else at send time: a failed attempt, retried
                verdict = Verdict("retry", f"{type(err).__name__}: {err}")
            if verdict.outcome == "delivered":
                self.state = "idle"
                self._mark(down=False)
                answered = time.monotonic()
                self._settle(job, owed, "sent", "", "", time.time(), answered)
                return
            detail = self.receiver.mask(verdict.detail)
            if verdict.outcome == "rejected":
                log.error("receiver %s: rejected, not retried: %s", name, detail)
                self._settle(job, owed, "dead", "rejected", detail)
                return
            elapsed = time.monotonic() - started
            if verdict.outcome == "rate_limited":
                self.state = "paced"
                delay = verdict.retry_after_s if verdict.retry_after_s is not None else \
                    policy.backoff(failures + 1, self.rng)
                if self.metrics:
                    self.metrics.rate_limited(name)
            else:
                self.state, self.last_error = "retrying", detail
                failures += 1
                delay = policy.backoff(failures, self.rng)
                if self.metrics:
                    self.metrics.retried(name)
            if probe and verdict.outcome == "retry":
                self.last_error = detail
                self._settle(job, owed, "dead", "receiver_down", f"receiver down; the probe failed: {detail}")
                return
            if elapsed + delay > policy.retry_for_s:
                error = f"gave up after {attempts} attempts in {elapsed:.0f} s: {detail}"
                log.error("receiver %s: %s", name, error)
                self._settle(job, owed, "dead", "retry_limit", error)
                if verdict.outcome == "retry":
                    self._mark(down=True, error=detail)
                return
            log.warning("receiver %s: %s; attempt %d, next in %.1f s", name, detail, attempts, delay)
            if self.stopping.wait(delay):
                self.results.put(Result(owed, "abandoned", job))
                return

    def _settle(self, job: Job, owed: list[Delivery], state: str, reason: str, error: str,
                sent_at: float | None = None, answered: float | None = None) -> None:
        if owed:       # cancelled ones too (their partition moved): the log records what the receiver saw
            self.outbox.record(owed, state, reason=reason, error=error, sent_at=sent_at)
        now = answered if answered is not None else time.monotonic()
        self.results.put(Result(owed, state, job, reason, error, sent_at, [now - d.arrived for d in owed]))
        if not owed and self.metrics:      # a reminder
            self.metrics.reminder(self.receiver.name, state)
