"""The node collector's own cost: CPU per tick, memory over a long run, publish throughput.

    .venv/bin/python bench/bench_collector.py [--ticks 100000]    # KAFKA_BOOTSTRAP adds the publish figures

1. CPU per tick for 8 GPUs through the real pynvml over the stand-in library: the
   whole tick, the part spent inside pynvml's calls (ctypes and the stand-in behind
   them), and the rest (gpufleet's own code around NVML: the fields table, host /proc
   reading, attribution, the message, JSON); as a share of one core at a 1 s interval.
2. Memory (RSS) over --ticks ticks on a simulated clock, spool included: growth.
3. Messages per second through the spool and publisher to a local broker, against
   raw confluent-kafka producing the same payloads to the same broker (baseline).
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine  # noqa: E402

from gpufleet.collectors.attribution import Attributor, ProcessAttributor  # noqa: E402
from gpufleet.collectors.collector import Collector  # noqa: E402
from gpufleet.collectors.host import HostSampler  # noqa: E402
from gpufleet.collectors.nvml import NvmlReader  # noqa: E402
from gpufleet.collectors.nvml_standin import StandIn, Timing  # noqa: E402
from gpufleet.collectors.publisher import Publisher, producer_config  # noqa: E402
from gpufleet.collectors.spool import Spool  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def collector(clock) -> tuple[Collector, StandIn, NvmlReader]:
    """8 GPUs behind the real pynvml, over the stand-in library (its functions are Python called through ctypes,
    so "inside NVML" here is pynvml, ctypes and the stand-in, not a driver)."""
    lib = StandIn(gpus=8, timing=Timing(0, clock))
    lib.install()
    reader = NvmlReader()
    reader.open()
    reader._read_slow()     # the background thread's job: once, so the tick has every field
    return Collector("node-0", reader, HostSampler(), Attributor(None, ProcessAttributor()), interval_s=1.0,
                     clock=clock), lib, reader


def cpu_per_tick(n: int = 2000) -> None:
    c, lib, reader = collector(time.time)
    inside = [0.0]

    def timed(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kw):
            t = time.process_time()
            try:
                return fn(*args, **kw)
            finally:
                inside[0] += time.process_time() - t
        return wrapper

    import pynvml
    for name in dir(pynvml):
        if name.startswith("nvml") and callable(getattr(pynvml, name)):
            setattr(pynvml, name, timed(getattr(pynvml, name)))
    json.dumps(c.collect())
    inside[0] = 0.0
    start = time.process_time()
    for _ in range(n):
        json.dumps(c.collect(), separators=(",", ":")).encode()
    whole = (time.process_time() - start) / n
    nvml = inside[0] / n
    print("| 8 GPUs, pynvml over the stand-in library | CPU per tick | per GPU | share of one core at a 1 s interval |")
    print("|---|---:|---:|---:|")
    for name, t in (("whole tick", whole), ("inside pynvml (and the stand-in behind it)", nvml),
                    ("gpufleet's code around NVML", whole - nvml)):
        print(f"| {name} | {t * 1e3:.3f} ms | {t / 8 * 1e6:.0f} µs | {t * 100:.3f}% |")


def memory(ticks: int) -> None:
    now = [1.8e9]
    c, lib, reader = collector(lambda: now[0])
    spool = Spool(tempfile.mkdtemp(prefix="gpufleet-spool-"), max_bytes=64 << 20, segment_bytes=4 << 20,
                  fsync=False)
    marks = {}
    for i in range(1, ticks + 1):
        now[0] += 1.0
        if i % 50 == 0:
            lib.xid(i % 8, 31)
        offset = spool.append(json.dumps(c.collect(dropped=spool.take_dropped()), separators=(",", ":")).encode())
        spool.ack(offset + 1)
        if i in (1000, 10_000, ticks):
            marks[i] = rss_mb()
    print("\n| ticks (simulated 1 s) | RSS MB |\n|---:|---:|")
    for i, mb in marks.items():
        print(f"| {i:,} | {mb:.1f} |")
    print(f"growth from 10,000 to {ticks:,} ticks: {marks[ticks] - marks[10_000]:+.1f} MB "
          f"(peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MB)")


def publish(bootstrap: str, n: int = 20_000) -> None:
    from confluent_kafka import Producer

    from gpufleet.streams.kafka import delete_topics, ensure_topics
    now = [1.8e9]
    c, _, _ = collector(lambda: now[0])
    payloads = []
    for _ in range(n):
        now[0] += 1
        payloads.append(json.dumps(c.collect(), separators=(",", ":")).encode())
    topic = f"bench.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: 4})

    def raw():
        p = Producer(producer_config(bootstrap))
        for data in payloads:
            while True:
                try:
                    p.produce(topic, value=data, key=b"node-0")
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        p.flush(60)

    def spooled(fsync: bool):
        def go():
            pub = Publisher(Spool(tempfile.mkdtemp(prefix="gpufleet-spool-"), fsync=fsync), bootstrap, topic,
                            "node-0")
            for data in payloads:
                pub.publish(data)
                pub.pump()
            assert pub.flush(60)
        return go

    results = []
    for name, fn in (("raw confluent-kafka (baseline)", raw), ("spool + publisher, no fsync", spooled(False)),
                     ("spool + publisher, fsync each message (default)", spooled(True))):
        t = time.perf_counter()
        fn()
        results.append((name, time.perf_counter() - t))
    delete_topics(bootstrap, [topic])
    base = results[0][1]
    print(f"\n| publish {n:,} messages of {sum(map(len, payloads)) // n:,} bytes | messages/s | time vs baseline |")
    print("|---|---:|---:|")
    for name, t in results:
        print(f"| {name} | {n / t:,.0f} | {t / base:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ticks", type=int, default=100_000)
    args = ap.parse_args()
    logging.disable(logging.WARNING)     # XIDs injected by the memory run would log one line each
    print(machine())
    cpu_per_tick()
    memory(args.ticks)
    if os.environ.get("KAFKA_BOOTSTRAP"):
        publish(os.environ["KAFKA_BOOTSTRAP"])


if __name__ == "__main__":
    main()
