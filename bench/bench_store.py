"""Rows per second written through the store adapter, against a raw clickhouse-connect insert of the same rows.

    .venv/bin/python bench/bench_store.py [--minutes 120]     # CLICKHOUSE_URL adds the server

The rows are real per-GPU one-minute rollups (the table that feeds the materialized
views). "adapter, dedup" is the idempotent path the stream uses: it first asks which
keys are already stored. Each figure is the best of 3 into a fresh database.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import best_of, machine, telemetry_lines  # noqa: E402

from gpufleet.sql.store import Store  # noqa: E402
from gpufleet.streams.pipeline import Pipeline  # noqa: E402
from gpufleet.streams.rollups import GPU_ROLLUP  # noqa: E402


def rollup_rows(minutes: int) -> list[tuple]:
    pipeline = Pipeline()
    for i, line in enumerate(telemetry_lines(nodes=16, gpus=8, hours=minutes / 60)):
        pipeline.submit(line, str(i))
    pipeline.flush()
    return pipeline.out.rows[GPU_ROLLUP]


def measure(dsn: str, rows: list[tuple]) -> list[tuple[str, float]]:
    cols = list(GPU_ROLLUP.columns)

    def fresh() -> Store:
        store = Store.connect(dsn, f"b_{uuid.uuid4().hex[:8]}", create=True)
        store.migrate()
        return store

    def raw():
        store = fresh()
        store.client.insert(GPU_ROLLUP.name, rows, column_names=cols)
        store.drop()

    def adapter(dedup: bool):
        def go():
            store = fresh()
            store.write(GPU_ROLLUP.name, cols, rows, dedup=dedup)
            store.drop()
        return go

    return [("raw clickhouse-connect insert (baseline)", best_of(raw)),
            ("adapter, no dedup", best_of(adapter(False))),
            ("adapter, dedup (stream default)", best_of(adapter(True)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=int, default=120)
    args = ap.parse_args()
    rows = rollup_rows(args.minutes)
    targets = [("chdb (embedded)", "chdb://" + tempfile.mkdtemp(prefix="gpufleet-bench-"))]
    if os.environ.get("CLICKHOUSE_URL"):
        targets.append(("server over HTTP", os.environ["CLICKHOUSE_URL"]))
    print(f"{len(rows):,} gpu_rollup_1m rows (materialized views included); {machine()}")
    print("| store | path | rows/s | time vs baseline |")
    print("|---|---|---:|---:|")
    for label, dsn in targets:
        results = measure(dsn, rows)
        base = results[0][1]
        for name, seconds in results:
            print(f"| {label} | {name} | {len(rows) / seconds:,.0f} | {seconds / base:.2f}x |")


if __name__ == "__main__":
    main()
