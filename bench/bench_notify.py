"""Alert delivery: incidents routed per second to a local receiver against raw HTTP posts of the same
payloads, and the delay the router adds between an alert's arrival and the receiver's 2xx.

    KAFKA_BOOTSTRAP=... CLICKHOUSE_URL=... .venv/bin/python bench/bench_notify.py [--incidents 2000]

The receiver is the recording HTTP receiver shipped for tests (127.0.0.1, a thread per connection),
the receiver a signed webhook (one request per alert), every incident's firing event.
1. Throughput, best of 3: raw `urllib.request` posts of the very bodies the router sends, one after
   another (the baseline); the embedded router (routing, the delivery log, signing, one sender)
   with the log fsynced per record (the default) and not; with KAFKA_BOOTSTRAP and CLICKHOUSE_URL set,
   `gpufleet notify`'s loop on the alert topic too (from the first request the receiver gets to the
   last, so that the consumer group's join is not counted).
2. Added delay: alerts offered one at a time at a steady 50 a second (well under the capacity),
   from the moment the router has an alert to the moment the receiver's 2xx is back, against the
   round trip of a raw post of the same body at the same pace. In the embedded mode the router
   first records the delivery as owed in its outbox (fsynced by default), then sends it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from common import best_of, machine  # noqa: E402
from notify_helpers import make  # noqa: E402

from gpufleet.settings import load_settings  # noqa: E402
from gpufleet.streams.notify import service  # noqa: E402
from gpufleet.streams.notify.metrics import NotifyMetrics  # noqa: E402
from gpufleet.streams.notify.receivers import Notification  # noqa: E402
from gpufleet.streams.notify.routing import Routes  # noqa: E402
from gpufleet.streams.notify.testing import RecordingReceiver  # noqa: E402

os.environ.setdefault("BENCH_SIGNING_KEY", "bench-signing-key")


def routes(receiver: RecordingReceiver) -> Routes:
    return Routes.parse({"route": {"receiver": "hook", "group_wait": 0, "group_interval": 0},
                         "receivers": {"hook": {"type": "webhook", "url": receiver.url("/hook"),
                                                "signing_key_env": "BENCH_SIGNING_KEY"}}})


def alerts(n: int) -> list[dict]:
    return [make("idle", f"GPU-{i:05d}", gpu=f"GPU-{i:05d}", node=f"node-{i // 8:04d}", started=1.7e9 + i)
            for i in range(n)]


def raw_posts(receiver: RecordingReceiver, payloads: list[dict], pace_s: float = 0.0) -> list[float]:
    """Post the router's own request bodies with urllib, one after another; the round trip of each."""
    hook = routes(receiver).receivers["hook"]
    requests = [r for a in payloads for r in hook.requests(Notification("hook", {}, [a]))]
    trips = []
    for r in requests:
        started = time.monotonic()
        req = urllib.request.Request(r.url, data=r.body, headers={**r.headers, **hook.sign(r)}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as answer:
            answer.read()
        trips.append(time.monotonic() - started)
        if pace_s:
            time.sleep(max(0.0, pace_s - trips[-1]))
    return trips


class Latencies(NotifyMetrics):
    def __init__(self):
        super().__init__()
        self.values: list[float] = []

    def sent(self, receiver, status, latencies):
        super().sent(receiver, status, latencies)
        self.values += latencies


def settings(tmp: str, fsync: bool, **kafka):
    return load_settings(None, notify={"outbox_dir": os.path.join(tmp, uuid.uuid4().hex[:8]), "outbox_fsync": fsync,
                                       "group_id": f"bench-{uuid.uuid4().hex[:8]}"}, **kafka)


def embedded(receiver: RecordingReceiver, payloads: list[dict], fsync: bool, tmp: str, pace_s: float = 0.0):
    notifier = service.LocalNotifier(settings(tmp, fsync), routes(receiver), None)
    metrics = notifier.parts.router.metrics = Latencies()
    for sender in notifier.parts.senders.values():
        sender.metrics = metrics
    notifier.start()
    if pace_s:
        for a in payloads:
            notifier.offer([a])
            time.sleep(pace_s)
    else:
        notifier.offer(payloads)
    counts = notifier.finish(report=lambda line: None)
    assert counts == {"sent": len(payloads)}, counts
    return metrics.values


def distributed(receiver: RecordingReceiver, payloads: list[dict], tmp: str, bootstrap: str, clickhouse_url: str):
    """gpufleet notify's loop on a fresh alert topic: seconds from the first request the receiver got to
    the last (the consumer group's join before it is not delivery)."""
    from gpufleet.sql.store import Store
    from gpufleet.streams.kafka import delete_topics, ensure_topics, produce
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}.alerts"
    ensure_topics(bootstrap, {topic: 4})
    produce(bootstrap, topic, [(a["dedup_key"], json.dumps(a).encode()) for a in payloads])
    database = f"bench_{uuid.uuid4().hex[:8]}"
    store = Store.connect(clickhouse_url, database, create=True)
    store.migrate()
    s = settings(tmp, True, kafka={"bootstrap": bootstrap, "topic_prefix": prefix},
                 store={"dsn": clickhouse_url, "database": database})
    stop = threading.Event()
    before = len(receiver.received())
    thread = threading.Thread(target=service.run, args=(s, routes(receiver), store, topic, stop))
    thread.start()
    try:
        while len(receiver.received()) - before < len(payloads):
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(timeout=60)
        store.drop()
        store.close()
        delete_topics(bootstrap, [topic])
    got = receiver.received()[before:]
    return (got[-1].at - got[0].at) * len(got) / max(1, len(got) - 1)


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--incidents", type=int, default=2000)
    ap.add_argument("--paced", type=int, default=500, help="alerts offered one at a time for the delay")
    args = ap.parse_args()
    payloads = alerts(args.incidents)
    tmp = tempfile.mkdtemp(prefix="bench-notify-")
    print(f"machine: {machine()}; {args.incidents:,} incidents (firing), a signed webhook on 127.0.0.1\n")
    with RecordingReceiver() as receiver:
        raw_posts(receiver, payloads[:200])                                    # warm up
        rows = [("raw urllib posts of the same bodies (baseline)", best_of(lambda: raw_posts(receiver, payloads)))]
        rows.append(("router, embedded, delivery log not fsynced",
                     best_of(lambda: embedded(receiver, payloads, False, tmp))))
        rows.append(("router, embedded, delivery log fsynced (default)",
                     best_of(lambda: embedded(receiver, payloads, True, tmp))))
        if os.environ.get("KAFKA_BOOTSTRAP") and os.environ.get("CLICKHOUSE_URL"):
            rows.append(("gpufleet notify on the alert topic (4 partitions), fsynced",
                         min(distributed(receiver, payloads, tmp, os.environ["KAFKA_BOOTSTRAP"],
                                         os.environ["CLICKHOUSE_URL"]) for _ in range(3))))
        base = rows[0][1]
        print("| path | incidents/s | time vs baseline |\n|---|---:|---:|")
        for name, seconds in rows:
            print(f"| {name} | {args.incidents / seconds:,.0f} | {seconds / base:.2f}x |")

        paced = payloads[:args.paced]
        trips = raw_posts(receiver, paced, pace_s=0.02)
        synced = embedded(receiver, paced, True, tmp, pace_s=0.02)
        unsynced = embedded(receiver, paced, False, tmp, pace_s=0.02)
    print(f"\n| {len(paced)} alerts at 50 a second | p50 ms | p99 ms | added p50 | added p99 |")
    print("|---|---:|---:|---:|---:|")
    print(f"| raw post round trip (baseline) | {pct(trips, 50) * 1000:.2f} | {pct(trips, 99) * 1000:.2f} | | |")
    for name, values in (("router, log fsynced (default): alert in to 2xx back", synced),
                         ("router, log not fsynced: alert in to 2xx back", unsynced)):
        print(f"| {name} | {pct(values, 50) * 1000:.2f} | {pct(values, 99) * 1000:.2f} | "
              f"{(pct(values, 50) - pct(trips, 50)) * 1000:.2f} | {(pct(values, 99) - pct(trips, 99)) * 1000:.2f} |")

if __name__ == "__main__":
    main()
