"""Finance: the ledger writes with the month-close and price checks against the plain idempotent write, and a
re-rating, over a month of --gpus GPUs (one ledger row per GPU and hour).

    .venv/bin/python bench/bench_finance.py [--gpus 128] [--dsn http://127.0.0.1:8123]

1. First write: the rows into an empty ledger through the sink (which asks for the closed months and the rows in
   force, so that a closed month's records become adjustments and records at other prices are counted) against
   the store's plain write (drop the keys already stored, insert), best of 3 each, each into a fresh database.
2. The same rows again (a replay of stored data): likewise, the second write timed.
3. `bill rerate` of the whole month at a new price (every row changes: each is written again and audited),
   against the plain first write.

The store is --dsn, else $CLICKHOUSE_URL (make bench starts a server), else an embedded one in a temporary folder.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine  # noqa: E402

from gpufleet.sql.store import Store  # noqa: E402
from gpufleet.streams.billing import finance  # noqa: E402
from gpufleet.streams.billing.prices import BillingConfig, Price, Tariff  # noqa: E402
from gpufleet.streams.sink import LEDGER, Sink, ledger_row  # noqa: E402

JAN = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
BATCH = 50_000


def month_of_rows(gpus: int) -> list[tuple]:
    start = int(JAN.timestamp())
    out = []
    for g in range(gpus):
        for h in range(744):
            e = {"schema": "gpufleet.billing.v1", "tenant": f"t{g % 8}", "pool": "east", "gpu_uuid": f"g{g:04d}",
                 "job": "j", "gpu_model": "H100", "period_start": start + 3600 * h,
                 "period_end": start + 3600 * (h + 1),
                 "rented_s": 3600.0, "busy_s": 3000.0, "idle_s": 600.0, "price_per_gpu_hour": "2.000000",
                 "amount": "2.000000", "idle_amount": "0.333333", "currency": "USD", "node": "n1", "gpu_index": g % 8,
                 "billing_mode": "on_demand", "samples": 720, "interval_s": 5.0, "util_pct": 50.0,
                 "busy_util_pct": 55.0, "amounts_by_mode": {"on_demand": "2.000000"}, "price_version": "v1",
                 "busy_weighted_s": "1650.00000000", "idle_weighted_s": "30.00000000"}
            out.append(ledger_row(e))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, default=128)
    p.add_argument("--dsn", default=os.environ.get("CLICKHOUSE_URL"))
    args = p.parse_args()
    dsn = args.dsn or f"chdb://{tempfile.mkdtemp(prefix='bench-finance-')}"
    rows = month_of_rows(args.gpus)

    def fresh() -> Store:
        s = Store.connect(dsn, f"bench_{uuid.uuid4().hex[:8]}", create=True)
        s.migrate()
        return s

    def plain(s: Store) -> None:
        for i in range(0, len(rows), BATCH):
            s.insert(s.prepare(LEDGER.name, LEDGER.columns, rows[i:i + BATCH]))

    def checked(s: Store) -> None:
        sink = Sink(s)
        for i in range(0, len(rows), BATCH):
            sink.write({LEDGER: rows[i:i + BATCH]})

    def best(fn, before=None, repeat: int = 3) -> float:
        found = float("inf")
        for _ in range(repeat):
            s = fresh()
            try:
                if before is not None:
                    before(s)
                t = time.perf_counter()
                fn(s)
                found = min(found, time.perf_counter() - t)
            finally:
                s.drop()
                s.close()
        return found

    tariff = Tariff(BillingConfig(prices=[Price(per_gpu_hour=Decimal("2.5"))]))
    changed: list[int] = []

    def rerate(s: Store) -> None:
        changed.append(finance.rerate(s, tariff, JAN, dt.datetime(2026, 2, 1, tzinfo=dt.UTC), "bench")["changed"])

    print(f"finance over {len(rows):,} ledger rows ({args.gpus} GPUs x 744 hours), {dsn.split(':')[0]} store, "
          f"{machine()}")
    a, b = best(plain), best(checked)
    print(f"first write: plain {a:.2f} s, with the close and price checks {b:.2f} s, ratio {b / a:.2f}")
    c, d = best(plain, before=plain), best(checked, before=plain)
    print(f"the same rows again: plain {c:.2f} s, with the checks {d:.2f} s, ratio {d / c:.2f}")
    r = best(rerate, before=plain, repeat=2)
    print(f"bill rerate, every row changed ({changed[-1]:,}): {r:.2f} s, {len(rows) / r:,.0f} rows/s, "
          f"{r / a:.1f}x the plain first write")
    return 0


if __name__ == "__main__":
    sys.exit(main())
