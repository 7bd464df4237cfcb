"""Builders shared by the alert delivery tests: alerts, routing files, a router on a recording endpoint."""
from __future__ import annotations

import queue
import threading
import time

from gpufleet.contracts.events import Facts, Told, Where, alert
from gpufleet.streams.notify.http import Response, Unreachable
from gpufleet.streams.notify.outbox import Outbox
from gpufleet.streams.notify.router import Around, Router
from gpufleet.streams.notify.routing import Routes
from gpufleet.streams.notify.sender import RetryPolicy, Sender


def make(kind="idle", target="GPU-1", status="firing", severity="warning", node="n1", gpu="GPU-1", job="j1",
         tenant="acme", pool="h100-east", started=1000.0, revision=0, change=None, previous=None):
    """A gpufleet.alert.v1 event (its id is stable for the same kind, target and start); ``revision`` > 0 with
    ``change`` (and ``previous`` severity) for a later event of the same incident."""
    return alert(kind, target, Facts(
        status=status, severity=severity, where=Where(node=node, gpu_uuid=gpu, job=job, tenant=tenant, pool=pool),
        started_at=started, detected_at=started + 600, resolved_at=started + 900 if status == "resolved" else None,
        score=1.0, told=Told(f"{kind} on {target}" + (f" (revision {revision})" if revision else ""),
                             {"x": 1 + revision}),
        revision=revision, change=change, previous_severity=previous))


def incident(kind="idle", target="GPU-1", **kw) -> tuple[dict, dict]:
    """The firing and the resolved event of one incident."""
    return make(kind, target, "firing", **kw), make(kind, target, "resolved", **kw)


class Endpoint:
    """What a sender posts to, in-process: records each request and answers as ``answer`` says
    (a status, or an exception to raise such as Unreachable)."""

    def __init__(self, answer=None):
        self.calls: list[tuple[str, bytes, dict]] = []
        self.answer = answer or (lambda url, body: 200)
        self.lock = threading.Lock()

    def __call__(self, url, body, headers, timeout_s):
        with self.lock:
            self.calls.append((url, body, headers))
        got = self.answer(url, body)
        if isinstance(got, Exception):
            raise got
        if isinstance(got, Response):
            return got
        return Response(got, {}, b"ok")

    def bodies(self, url_part=""):
        import json
        with self.lock:
            return [json.loads(b) for u, b, _ in self.calls if url_part in u]


class FakeClock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


class Rig:
    """A router with its senders on an in-process endpoint, over a delivery log in ``directory``."""

    def __init__(self, directory, raw_routes: dict, endpoint: Endpoint | None = None, silences=None,
                 firing=None, keep_pending=False, start=True, policy=None, clock=None, wall=None):
        self.routes = Routes.parse(raw_routes)
        self.outbox = Outbox(str(directory), fsync=False)
        self.endpoint = endpoint or Endpoint()
        self.results: queue.Queue = queue.Queue()
        policy = policy or RetryPolicy(retry_for_s=5, backoff_s=0.01, backoff_max_s=0.05, timeout_s=2)
        self.senders = {n: Sender(r, self.outbox, policy, self.results, post=self.endpoint, seed=1)
                        for n, r in self.routes.receivers.items()}
        self.silence_list = silences if silences is not None else []
        kw = {}
        if clock is not None:
            kw["clock"] = clock
        if wall is not None:
            kw["wall"] = wall
        self.router = Router(self.routes, self.outbox, self.senders, self.results, keep_pending=keep_pending,
                             around=Around(silences=lambda: self.silence_list,
                                           firing=(lambda: firing) if firing is not None else dict, **kw))
        self.acked: list = []
        if start:
            self.start()

    def start(self):
        for s in self.senders.values():
            s.start()

    def offer(self, *alerts, ref=None, partition=-1):
        self.router.offer([(a, ref, partition) for a in alerts])

    def settle(self, timeout_s=10.0, flush_all=True):
        """Tick until nothing is owed; returns the references acknowledged meanwhile."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.acked += self.router.tick(flush_all=flush_all)
            if not self.router.owed():
                self.acked += self.router.tick()
                return self.acked
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.router.owed()} deliveries still owed")
            time.sleep(0.005)

    def close(self):
        for s in self.senders.values():
            s.stop()
        for s in self.senders.values():
            if s.is_alive():
                s.join(timeout=5)
        self.outbox.close()


WEBHOOK = {"type": "webhook", "url": "http://hook.test/in", "signing_key_env": "T_SIGNING_KEY"}


def unreachable(_url, _body):
    return Unreachable("connection refused")
