"""Stream worker throughput against the raw consumption ceiling, and window-state memory per GPU.

    KAFKA_BOOTSTRAP=... CLICKHOUSE_URL=... .venv/bin/python bench/bench_worker.py [--messages 20000]

1. GPU samples per second through one `gpufleet worker` process (validation, event time, rollups,
   idle windows, the job stage, writes to the ClickHouse server, state saved to changelogs), from its
   first batch to the last message, against a plain aiokafka consumer with default settings and
   `getmany` reading the same messages from the same broker in the same run, decoding nothing; then
   two workers of one group sharing the 4 partitions, against one.
2. Memory of the processors' state per tracked GPU for fleets of 1k, 10k and 100k GPUs on the
   simulated clock (growth of the resident memory while the processors take 3 simulated minutes of
   samples, the waiting messages of the last lateness included, packed as the stream keeps them; then
   65 minutes at 1k and 10k GPUs, when the leak detector's hour of history is full), and the size of the
   saved state per GPU. What every process holds once, whatever the fleet (numpy, the model), is loaded
   before measuring: it is not state.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import RECENT, machine, saved_states  # noqa: E402

from gpufleet.collectors.simulator import FleetSpec, Simulation  # noqa: E402
from gpufleet.contracts.state import pack  # noqa: E402
from gpufleet.streams.kafka import delete_topics, ensure_topics, produce  # noqa: E402
from gpufleet.streams.pipeline import Pipeline  # noqa: E402


async def ceiling(bootstrap: str, topic: str, n: int) -> float:
    from aiokafka import AIOKafkaConsumer
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"ceiling-{uuid.uuid4().hex[:6]}",
                                auto_offset_reset="earliest")
    await consumer.start()
    got, first = 0, None
    try:
        while got < n:
            batch = await consumer.getmany(timeout_ms=1000)
            for records in batch.values():
                if records and first is None:
                    first = time.perf_counter()
                got += len(records)
    finally:
        await consumer.stop()
    return time.perf_counter() - first


def _get(port: int, path: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.read().decode()
    except Exception:
        return None


def worker_run(bootstrap: str, dsn: str, payloads: list[tuple[str, bytes]], workers: int) -> float:
    """Seconds ``workers`` gpufleet workers (one group, 4 partitions) take from the first message sent to
    the last processed. The workers start on an empty topic and share its partitions before anything is sent, so
    no rebalance falls inside the measure."""
    prefix = f"bw{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}.telemetry"
    ensure_topics(bootstrap, {topic: 4})
    base = 6200 + os.getpid() % 500
    ports = [base + 10 * i for i in range(workers)]
    procs = []
    for port in ports:
        env = {**os.environ, "GPUFLEET_KAFKA__BOOTSTRAP": bootstrap, "GPUFLEET_KAFKA__TELEMETRY_TOPIC": topic,
               "GPUFLEET_KAFKA__TOPIC_PREFIX": prefix, "GPUFLEET_WORKER__APP_ID": prefix,
               "GPUFLEET_WORKER__WEB_PORT": str(port), "GPUFLEET_WORKER__DATA_DIR": tempfile.mkdtemp(),
               "GPUFLEET_STORE__DSN": dsn, "GPUFLEET_STORE__DATABASE": f"b_{prefix}"}
        procs.append(subprocess.Popen([sys.executable, "-m", "gpufleet", "worker"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    pattern = re.compile(r'gpufleet_worker_events_total\{kind="messages",stage="node"\} (\S+)')

    def shares() -> list[set[str]]:
        out = []
        for port in ports:
            health = _get(port, "/health")
            parts = json.loads(health)["partitions"] if health else []
            out.append({p for p in parts if p.startswith(f"{topic}/")})
        return out

    try:
        deadline, stable_since = time.time() + 180, None
        while True:                      # every worker holds a share of the 4 partitions, 5 s in a row
            got = shares()
            ok = all(got) and len(set().union(*got)) == 4 and sum(map(len, got)) == 4
            stable_since = (stable_since or time.time()) if ok else None
            if stable_since and time.time() - stable_since >= 5:
                break
            if time.time() > deadline:
                raise RuntimeError(f"the {workers} workers did not share the partitions: {got}")
            time.sleep(0.5)
        # from the first message sent (the counter moves only when a batch is durable, so the first
        # count seen may already be the whole backlog); sending takes a small part of the time measured
        first = time.perf_counter()
        n = produce(bootstrap, topic, payloads)
        deadline = time.time() + 600
        while time.time() < deadline:
            seen = 0.0
            for port in ports:
                m = pattern.search(_get(port, "/metrics") or "")
                seen += float(m.group(1)) if m else 0.0
            if seen >= n:
                return time.perf_counter() - first
            time.sleep(0.05)
        raise RuntimeError("the workers did not finish in 10 minutes")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
        delete_topics(bootstrap, [topic])


def throughput(bootstrap: str, dsn: str, messages: int) -> None:
    nodes = 16
    hours = messages / nodes / 720
    sim = Simulation(FleetSpec(nodes=nodes, gpus_per_node=8, hours=hours, seed=3, start=RECENT))
    payloads = [(m["node"], json.dumps(m, separators=(",", ":")).encode()) for m in sim.messages()]
    topic = f"bw{uuid.uuid4().hex[:6]}.raw"
    ensure_topics(bootstrap, {topic: 4})
    n = produce(bootstrap, topic, payloads)
    samples = n * 8
    raw = asyncio.run(ceiling(bootstrap, topic, n))
    delete_topics(bootstrap, [topic])
    one = worker_run(bootstrap, dsn, payloads, 1)
    two = worker_run(bootstrap, dsn, payloads, 2)
    print(f"{n:,} messages, {samples:,} GPU samples ({nodes} nodes x 8 GPUs), 4 partitions; {machine()}")
    print("| path | GPU samples/s | share of the ceiling | vs one worker |\n|---|---:|---:|---:|")
    print(f"| aiokafka getmany, decoding nothing (ceiling) | {samples / raw:,.0f} | 100% | |")
    print(f"| one gpufleet worker, end to end | {samples / one:,.0f} | {raw / one:.1%} | 1.00x |")
    print(f"| two gpufleet workers, one group | {samples / two:,.0f} | {raw / two:.1%} | {one / two:.2f}x |")


def rss() -> int:
    """Resident memory of this process, in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def state_memory_row(gpus: int, minutes: int, interval_s: float = 5.0) -> str:
    nodes = gpus // 8
    sim = Simulation(FleetSpec(nodes=nodes, gpus_per_node=8, hours=minutes / 60, seed=1, faults_per_kind=0,
                               start=RECENT, interval_s=interval_s))
    messages = sim.messages()
    first = next(messages)              # the simulator's own state is built before measuring
    import numpy  # noqa: F401  -- loaded where windows are scored in batches: once per process, not state
    pipeline = Pipeline()               # and the model, once per process
    gc.collect()
    before = rss()
    pipeline.submit(first, "0")
    for i, m in enumerate(messages, 1):
        pipeline.submit(json.dumps(m, separators=(",", ":")).encode(), str(i))     # bytes, as a worker reads them
        pipeline.out.rows, pipeline.out.events, pipeline.out.job_samples = {}, [], []
    pipeline.out.done = []
    gc.collect()
    used = rss() - before
    states = saved_states(pipeline)
    started = time.process_time()
    plain = sum(len(json.dumps(s).encode()) for s in states)        # as the changelog held it before pack()
    mid = time.process_time()
    saved = sum(len(pack(s)) for s in states)
    end = time.process_time()
    return (f"| {gpus:,} | {nodes:,} | {minutes}{'' if interval_s == 5.0 else f', sampled every {interval_s:g} s'} | "
            f"{used / 2**20:,.1f} MB | {used / gpus / 1024:.1f} kB | "
            f"{saved / gpus / 1024:.2f} kB | {plain / gpus / 1024:.2f} kB | "
            f"{(end - mid) / (mid - started):.2f}x |")


def state_memory() -> None:
    print("\n| GPUs tracked | nodes | simulated minutes | state in memory | per GPU | saved state per GPU "
          "| as plain JSON | CPU to save, vs plain JSON |\n|---:|---:|---:|---:|---:|---:|---:|---:|")
    # the same 3 minutes for each size (growth with fleet size), then 65 minutes at 1k and 10k GPUs: the
    # leak detector's hour of per-minute memory filled, the largest the state gets. Each in its own
    # process: memory freed by one is not returned to the system, and would hide the next one's growth.
    # and 1k GPUs sampled every second: the windows hold five times the samples
    for gpus, minutes, interval in ((1_000, 3, 5), (10_000, 3, 5), (100_000, 3, 5), (1_000, 65, 5), (10_000, 65, 5),
                                    (1_000, 65, 1)):
        row = subprocess.run([sys.executable, __file__, "--memory-of", f"{gpus},{minutes},{interval}"], check=True,
                             capture_output=True, text=True).stdout.strip()
        print(row, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--memory-of", metavar="GPUS,MINUTES[,INTERVAL_S]", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_of:
        gpus, minutes, *interval = args.memory_of.split(",")
        print(state_memory_row(int(gpus), int(minutes), *map(float, interval)))
        return
    if os.environ.get("KAFKA_BOOTSTRAP") and os.environ.get("CLICKHOUSE_URL"):
        throughput(os.environ["KAFKA_BOOTSTRAP"], os.environ["CLICKHOUSE_URL"], args.messages)
    else:
        print("(set KAFKA_BOOTSTRAP and CLICKHOUSE_URL for the throughput figures)")
    if not args.skip_memory:
        state_memory()


if __name__ == "__main__":
    main()
