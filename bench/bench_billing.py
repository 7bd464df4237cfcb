"""Billing: metering throughput against the pipeline without it, the finance views against a plain scan of the
same ledger, and the conservation checks over a month of 128 GPUs.

    .venv/bin/python bench/bench_billing.py [--parts metering views month] [--nodes 8] [--gpus 8] [--hours 2]
                                            [--ledger-gpus 1000] [--days 30] [--month-interval 60]

1. Metering: the same recorded lines through the embedded pipeline (validation, event-time gate, rollups, idle
   windows, detectors; no store) with metering off (the baseline) and on, best of 3 each; then the light path
   (detectors off, no raw samples) likewise, where metering's share shows most.
2. Finance views: a ledger of --ledger-gpus GPUs over --days days (one row per GPU and hour, tenants changing
   daily, jobs across several GPUs, idle and low-utilization hours), the idle windows and the per-GPU minute
   rollups it agrees with, generated in the embedded ClickHouse engine; each view read whole (wrapped in a
   count) against a plain scan of the ledger (sum of amounts, FINAL, the way every view reads it).
3. month (only when named in --parts): tests/billing_fleet.py's fleet with tenant changes and every kind of
   gap, 16 nodes x 8 GPUs over 30 days (sampled every --month-interval seconds to keep it to minutes), through
   the idle tracker and metering, with every conservation check of tests/unit/test_conservation.py. Exits 1 if
   one fails.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from common import best_of, machine, telemetry_lines  # noqa: E402

from gpufleet.collectors.simulator import FleetSpec  # noqa: E402
from gpufleet.contracts.output import Output  # noqa: E402
from gpufleet.contracts.telemetry import parse  # noqa: E402
from gpufleet.sql.store import Store  # noqa: E402
from gpufleet.streams import embedded  # noqa: E402
from gpufleet.streams.billing.metering import Metering  # noqa: E402
from gpufleet.streams.billing.prices import BillingConfig, Price, Tariff  # noqa: E402
from gpufleet.streams.config import StreamConfig  # noqa: E402
from gpufleet.streams.idle import IDLE_WINDOWS, IdleTracker  # noqa: E402
from gpufleet.streams.pipeline import Pipeline  # noqa: E402

OFF = BillingConfig(enabled=False)
VIEWS = ("billing_cost_monthly", "billing_idle_cost", "billing_utilization", "billing_idle_window_cost",
         "billing_reconciliation", "billing_month_over_month", "billing_low_utilization", "billing_overprovisioned",
         "billing_mode_comparison")


def metering(args) -> None:
    lines = telemetry_lines(args.nodes, args.gpus, args.hours)
    samples = len(lines) * args.gpus
    source = [(f"bench:{i}", line) for i, line in enumerate(lines)]
    records = {}

    def run(billing, cfg=None, detect=True):
        def go():
            p = Pipeline(cfg, billing=billing, detect=detect)
            embedded.run(source, p, None)
            records[id(billing), detect] = p.out.counts["billing_records"]
        return go

    light = StreamConfig(raw_samples=False)
    rows = []
    for label, off, on in (("pipeline (validate, gate, rollups, idle windows, detectors)", run(OFF), run(None)),
                           ("light pipeline (no detectors, no raw samples)", run(OFF, light, False),
                            run(None, light, False))):
        base, with_ = best_of(off), best_of(on)
        n = records[id(None), label.startswith("pipeline")]
        rows.append((label, base, with_, n))
    print(f"## Metering throughput ({machine()})\n")
    print(f"{len(lines):,} messages, {samples:,} GPU samples ({args.nodes} nodes x {args.gpus} GPUs, "
          f"{args.hours:g} simulated hours), best of 3\n")
    print("| path | messages/s without metering (baseline) | messages/s with metering | GPU samples/s with "
          "metering | time vs baseline | billing records out | billing records/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, base, with_, n in rows:
        print(f"| {label} | {len(lines) / base:,.0f} | {len(lines) / with_:,.0f} | {samples / with_:,.0f} "
              f"| {with_ / base:.2f}x | {n:,} | {n / with_:,.0f} |")
    print()


LEDGER = """
INSERT INTO billing_ledger
SELECT
    concat('GPU-', toString(g))                                        AS gpu_uuid,
    concat('tenant-', toString((intDiv(g, 8) + d) % 40))               AS tenant,
    concat('job-', toString(intDiv(g, 4)), '-', toString(d))           AS job,
    toDateTime({start} + h * 3600, 'UTC')                              AS period_start,
    toDateTime({start} + h * 3600 + 3600, 'UTC')                       AS period_end,
    concat('node-', toString(intDiv(g, 8)))                            AS node,
    ['h100-sxm-east', 'a100-sxm-west', 'l40s-pcie-central'][g % 3 + 1] AS pool,
    g % 8                                                              AS gpu_index,
    ['NVIDIA H100 80GB HBM3', 'NVIDIA A100-SXM4-80GB', 'NVIDIA L40S'][g % 3 + 1] AS gpu_model,
    ''                                                                 AS mig_profile,
    1                                                                  AS gpu_share,
    ['', 'research', 'inference'][g % 3 + 1]                           AS team,
    'on_demand'                                                        AS billing_mode,
    'USD'                                                              AS currency,
    toUInt32(rented / 5)                                               AS samples,
    5                                                                  AS interval_s,
    toDecimal64(rented, 3)                                             AS rented_s,
    toDecimal64(rented - idle, 3)                                      AS busy_s,
    toDecimal64(idle, 3)                                               AS idle_s,
    0, 0, 0,
    if(idle = rented, 1.5, 20 + (cityHash64(g, h) % 80))               AS util_pct,
    if(idle = rented, NULL, 20 + (cityHash64(g, h) % 80))              AS busy_util_pct,
    toDecimal64(2.5, 6)                                                AS price_per_gpu_hour,
    toDecimal64(toDecimal128(rented, 3) * 25 / 36000, 6)               AS amount,
    toDecimal64(toDecimal128(idle, 3) * 25 / 36000, 6)                 AS idle_amount,
    map('on_demand', toDecimal64(toDecimal128(rented, 3) * 25 / 36000, 6),
        'usage', toDecimal64(toDecimal128(rented - idle, 3) * 3 / 3600, 6)) AS mode_amounts,
    'measured'                                                         AS data_quality
FROM
(
    SELECT number % {gpus} AS g, intDiv(number, {gpus}) AS h, intDiv(h, 24) AS d,
           if(cityHash64(g, d) % 5 = 0, 1800, 3600) AS rented,
           if(cityHash64(g, d, 1) % 4 = 0, rented, if(cityHash64(g, h) % 3 = 0, 600, 0)) AS idle
    FROM numbers({gpus} * {hours})
)
"""

WINDOWS = """
INSERT INTO idle_windows
SELECT gpu_uuid, toDateTime64(period_start, 3),
       toDateTime64(period_start, 3) + toIntervalMillisecond(toInt64(idle_s * 1000)),
       node, pool, gpu_index, tenant, job, toFloat64(idle_s), toUInt32(idle_s / 5), 1.5, 'busy', 0
FROM billing_ledger WHERE idle_s > 0
"""

ROLLUPS = """
INSERT INTO gpu_rollup_1m (minute, node, pool, gpu_uuid, gpu_index, model, tenant, job, samples, rented_ms)
SELECT period_start + m * 60, node, pool, gpu_uuid, gpu_index, gpu_model, tenant, job, 12, 60000
FROM billing_ledger ARRAY JOIN range(toUInt32(rented_s / 60)) AS m
"""


def views(args) -> None:
    data_dir = tempfile.mkdtemp(prefix="gpufleet-bench-")
    store = Store.connect(f"chdb://{data_dir}", f"b_{uuid.uuid4().hex[:8]}", create=True)
    store.migrate()
    store.command("DROP VIEW usage_gpu_1m_mv")       # only the ledger's rows matter here; generating is faster
    start = int(dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp())
    t = time.perf_counter()
    store.command(LEDGER.format(start=start, gpus=args.ledger_gpus, hours=args.days * 24))
    store.command(WINDOWS)
    store.command(ROLLUPS)
    made = time.perf_counter() - t
    (ledger, rented), = store.query("SELECT count(), sum(rented_s) FROM billing_ledger")
    (windows,), = store.query("SELECT count() FROM idle_windows")
    (rollups,), = store.query("SELECT count() FROM gpu_rollup_1m")
    scans = {"plain scan of the ledger (FINAL)": "SELECT count(), sum(amount) FROM billing_ledger FINAL",
             "plain scan of the ledger (no FINAL)": "SELECT count(), sum(amount) FROM billing_ledger",
             "plain scan of the rollups (FINAL)": "SELECT count(), sum(rented_ms) FROM gpu_rollup_1m FINAL"}
    timed = [(name, best_of(lambda q=q: store.query(q)), None) for name, q in scans.items()]
    for view in VIEWS:
        timed.append((view, best_of(lambda v=view: store.query(f"SELECT count() FROM (SELECT * FROM {v})")),
                      store.query(f"SELECT count() FROM (SELECT * FROM {view})")[0][0]))
    base = timed[0][1]
    print(f"## Finance views ({machine()})\n")
    print(f"ledger: {ledger:,} rows ({args.ledger_gpus:,} GPUs x {args.days} days x 24 hours, "
          f"{float(rented) / 3600:,.0f} rented GPU-hours); {windows:,} idle windows; {rollups:,} GPU-minute rollups; "
          f"generated in {made:.0f} s. Best of 3.\n")
    print("| query | seconds | rows out | time vs plain ledger scan |")
    print("|---|---:|---:|---:|")
    for name, seconds, out in timed:
        print(f"| {name} | {seconds:.3f} | {'' if out is None else f'{out:,}'} | {seconds / base:.1f}x |")
    print()
    store.drop()


def month(args) -> bool:
    """The conservation checks over a month of 128 GPUs; the light path (gate, idle tracker, metering) feeds them."""
    from billing_fleet import Conservation, fleet

    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()
    prices = [Price(match="*", mode="on_demand", per_gpu_hour=Decimal("2.10"), minimum_s=300),
              Price(match="h100-sxm-east", mode="on_demand", per_gpu_hour=Decimal("2.95"))]

    def price_of(pool, period_start):
        return Decimal("2.95") if pool == "h100-sxm-east" else Decimal("2.10")

    billing = BillingConfig(prices=prices)
    tariff, cfg = Tariff(billing), StreamConfig()
    spec = FleetSpec(nodes=16, gpus_per_node=8, hours=30 * 24, interval_s=args.month_interval, seed=5,
                     faults_per_kind=4, start=start)
    check = Conservation(billing.period_s, price_of, billing.max_gap_s)
    idle: dict[str, IdleTracker] = {}
    meters: dict[str, Metering] = {}
    out = Output()
    t = time.perf_counter()
    n = 0
    for n, (msg, note) in enumerate(fleet(spec), 1):      # one node's messages come in ts order: no gate needed
        check.message(msg, note)
        m = parse(msg)
        tracker = idle.setdefault(m.node, IdleTracker())
        tracker.add(m, cfg, out, tariff)
        meters.setdefault(m.node, Metering()).add(m, tracker.runs, cfg, tariff, out)
        if n % 5000 == 0:
            check.events(out.events)
            check.idle_windows(out.rows.get(IDLE_WINDOWS, []))
            out = Output()
    for node in meters:
        idle[node].flush(node, out)
        meters[node].flush(node, tariff, out)
    check.events(out.events)
    check.idle_windows(out.rows.get(IDLE_WINDOWS, []))
    seconds = time.perf_counter() - t
    print(f"## Conservation over a month ({machine()})\n")
    print(f"16 nodes x 8 GPUs, 30 days sampled every {args.month_interval:g} s: {n:,} messages, "
          f"{check.records:,} billing records, {sum(check.windows.values()) / 3.6e6:,.0f} idle GPU-hours, "
          f"{sum(check.expect_estimated.values()) / 3.6e6:,.1f} estimated and "
          f"{sum(check.expect_unbilled.values()) / 3.6e6:,.1f} unbilled GPU-hours of gaps; {seconds:.0f} s "
          "(simulation included)")
    try:
        check.check()
    except AssertionError as err:
        print(f"\nFAILED: {err}")
        return False
    print(f"\nevery check holds for {len(check.telemetry):,} GPU-periods\n")
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--ledger-gpus", type=int, default=1000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--parts", nargs="+", choices=["metering", "views", "month"], default=["metering", "views"],
                    help="what to run (default: metering views; month takes minutes)")
    ap.add_argument("--month-interval", type=float, default=60.0)
    args = ap.parse_args()
    if "metering" in args.parts:
        metering(args)
    if "views" in args.parts:
        views(args)
    if "month" in args.parts:
        return 0 if month(args) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
