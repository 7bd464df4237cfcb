"""Each finance view of migration 0008, run on the ClickHouse server against known ledger rows, idle windows and
per-GPU rollups, gives the exact numbers worked out by hand below (docs/finance.md explains each view)."""
import datetime as dt
from decimal import Decimal

import pytest

from gpufleet.streams.idle import IDLE_WINDOWS
from gpufleet.streams.sink import LEDGER, ledger_row

pytestmark = pytest.mark.integration

JAN = int(dt.datetime(2026, 1, 5, tzinfo=dt.UTC).timestamp())
FEB = int(dt.datetime(2026, 2, 2, tzinfo=dt.UTC).timestamp())
H = 3600
D = Decimal


def record(gpu, tenant, job, start, rented, idle, amount, idle_amount, util, busy_util, modes, pool="east",
           team=None, estimated=0.0, underused=0.0, unused="0.000000"):
    return {"schema": "gpufleet.billing.v1", "tenant": tenant, "pool": pool, "gpu_uuid": gpu, "job": job,
            "gpu_model": "H100", "period_start": start, "period_end": start + H, "rented_s": rented,
            "busy_s": rented - idle, "idle_s": idle, "price_per_gpu_hour": "2.000000", "amount": amount,
            "idle_amount": idle_amount, "currency": "USD", "node": "n1", "gpu_index": 0, "team": team,
            "billing_mode": "on_demand", "samples": int(rented // 5), "interval_s": 5.0, "estimated_s": estimated,
            "unbilled_s": 0.0, "minimum_topup_s": 0.0, "data_quality": "estimated" if estimated else "measured",
            "util_pct": util, "busy_util_pct": busy_util, "amounts_by_mode": modes,
            "underused_s": underused, "unused_amount": unused, "unsold_amount": "0.000000"}


RECORDS = [
    # January: acme's job j1 on g1 (half idle, then busy at 40 %) and g2 (idle throughout); globex on g3. g1's
    # busy time runs below 60 % in both hours: underused, its unused share 42 % of 1.00 and 60 % of 2.00
    record("g1", "acme", "j1", JAN, 3600.0, 1800.0, "2.000000", "1.000000", 30.0, 58.0,
           {"on_demand": "2.000000", "usage": "1.500000"}, team="research", underused=1800.0, unused="0.420000"),
    record("g1", "acme", "j1", JAN + H, 3600.0, 0.0, "2.000000", "0.000000", 40.0, 40.0,
           {"on_demand": "2.000000", "usage": "3.000000"}, team="research", underused=3600.0, unused="1.200000"),
    record("g2", "acme", "j1", JAN, 3600.0, 3600.0, "2.000000", "2.000000", 1.0, None,
           {"on_demand": "2.000000", "usage": "0.000000"}),
    record("g2", "acme", "j1", JAN + H, 3600.0, 3600.0, "2.000000", "2.000000", 2.0, None,
           {"on_demand": "2.000000", "usage": "0.000000"}),
    record("g3", "globex", "j9", JAN, 1800.0, 0.0, "1.500000", "0.000000", 95.0, 95.0, {"on_demand": "1.500000"},
           pool="west", estimated=300.0),
    # February
    record("g3", "globex", "j9", FEB, 3600.0, 0.0, "3.000000", "0.000000", 80.0, 80.0, {"on_demand": "3.000000"},
           pool="west"),
    record("g1", "acme", "j2", FEB, 3600.0, 0.0, "2.500000", "0.000000", 70.0, 70.0, {"on_demand": "2.500000"}),
]

# idle windows: g1 idle 00:30-01:00 and g2 idle 00:00-02:00 on January 5th (as the ledger's idle seconds say)
WINDOWS = [("g1", (JAN + 1800) * 1000, (JAN + H) * 1000, "n1", "east", 0, "acme", "j1", 1800.0, 360, 1.0, "busy", 0),
           ("g2", JAN * 1000, (JAN + 2 * H) * 1000, "n1", "east", 1, "acme", "j1", 7200.0, 1440, 2.0, "rental ended",
            0)]


def minutes(gpu, start, count, rented_ms=60_000):
    return [(start + 60 * i, "n1", "east", gpu, 0, "H100", "acme", "j1", 12, rented_ms) for i in range(count)]


ROLLUP_COLUMNS = ("minute", "node", "pool", "gpu_uuid", "gpu_index", "model", "tenant", "job", "samples", "rented_ms")
# the telemetry behind the ledger: a minute of rented samples per rented minute (g3's January half hour had 300 s
# billed across a gap, without telemetry)
ROLLUPS = (minutes("g1", JAN, 120) + minutes("g2", JAN, 120) + minutes("g3", JAN, 25) + minutes("g3", FEB, 60)
           + minutes("g1", FEB, 60))


@pytest.fixture
def store(server_store):
    server_store.write("billing_ledger", LEDGER.columns, [ledger_row(e) for e in RECORDS])
    server_store.write("idle_windows", IDLE_WINDOWS.columns, WINDOWS)
    server_store.write("gpu_rollup_1m", ROLLUP_COLUMNS, ROLLUPS)
    return server_store


def rows(store, sql):
    names, found = store.select(sql)
    return [dict(zip(names, r)) for r in found]


def test_cost_by_tenant_pool_and_month(store):
    got = rows(store, "SELECT * FROM billing_cost_monthly ORDER BY month, tenant")
    assert [(r["month"].isoformat(), r["tenant"], r["pool"], r["gpus"], r["rented_s"], r["busy_s"], r["idle_s"],
             r["estimated_s"], r["rented_hours"], r["idle_hours"], r["amount"], r["idle_amount"]) for r in got] == [
        ("2026-01-01", "acme", "east", 2, D("14400"), D("5400"), D("9000"), D(0), D("4"), D("2.5"), D("8"), D("5")),
        ("2026-01-01", "globex", "west", 1, D("1800"), D("1800"), D(0), D("300"), D("0.5"), D(0), D("1.5"), D(0)),
        ("2026-02-01", "acme", "east", 1, D("3600"), D("3600"), D(0), D(0), D("1"), D(0), D("2.5"), D(0)),
        ("2026-02-01", "globex", "west", 1, D("3600"), D("3600"), D(0), D(0), D("1"), D(0), D("3"), D(0))]


def test_idle_cost_by_tenant_and_team(store):
    got = rows(store, "SELECT * FROM billing_idle_cost WHERE month = '2026-01-01' ORDER BY tenant, team")
    assert [(r["tenant"], r["team"], r["idle_s"], r["idle_hours"], r["amount"], r["idle_amount"],
             r["idle_share_pct"]) for r in got] == [
        ("acme", "", D("7200"), D("2"), D("4"), D("4"), D("100")),
        ("acme", "research", D("1800"), D("0.5"), D("4"), D("1"), D("25")),
        ("globex", "", D(0), D(0), D("1.5"), D(0), D(0))]


def test_utilization_distribution_per_tenant(store):
    got = rows(store, "SELECT * FROM billing_utilization WHERE month = '2026-01-01' ORDER BY tenant")
    acme, globex = got
    # acme's four GPU-hours ran at 30, 40, 1 and 2 % on average
    assert acme["rented_hours"] == D(4) and acme["mean_util_pct"] == pytest.approx(18.25, abs=1e-6)
    assert acme["util_p10_p50_p90"] == pytest.approx([1.0, 2.0, 40.0], abs=1e-6)
    assert (acme["hours_below_5"], acme["hours_5_30"], acme["hours_30_60"], acme["hours_60_90"],
            acme["hours_90_100"]) == (D(2), D(0), D(2), D(0), D(0))
    assert globex["rented_hours"] == D("0.5") and globex["hours_90_100"] == D("0.5")


def test_the_worst_idle_windows_with_their_cost(store):
    got = rows(store, "SELECT gpu_uuid, tenant, duration_s, cost FROM billing_idle_window_cost")
    # g2's two idle hours cost 2.00 each; g1's half hour is all of that hour's idle amount
    assert [(r["gpu_uuid"], r["tenant"], r["duration_s"], r["cost"]) for r in got] == [
        ("g2", "acme", 7200.0, D("4")), ("g1", "acme", 1800.0, D("1"))]


def test_reconciliation_returns_no_row_when_ledger_and_telemetry_agree_and_names_what_differs(store):
    assert rows(store, "SELECT * FROM billing_reconciliation") == []
    # a minute of telemetry the ledger lacks, and an idle window the ledger does not know of
    store.write("gpu_rollup_1m", ROLLUP_COLUMNS, minutes("g1", FEB + H, 1))
    store.write("idle_windows", IDLE_WINDOWS.columns,
                [("g3", (FEB + 600) * 1000, (FEB + 1500) * 1000, "n1", "west", 0, "globex", "j9", 900.0, 180, 1.0,
                  "busy", 0)])
    got = rows(store, "SELECT * FROM billing_reconciliation ORDER BY gpu_uuid")
    assert [(r["gpu_uuid"], r["hour"].timestamp(), r["ledger_rented_s"], r["telemetry_rented_s"], r["rented_diff_s"],
             r["ledger_idle_s"], r["window_idle_s"]) for r in got] == [
        ("g1", FEB + H, D(0), D(60), D(-60), D(0), D(0)),
        ("g3", FEB, D(3600), D(3600), D(0), D(0), D(900))]


def test_month_over_month_change(store):
    got = rows(store, "SELECT * FROM billing_month_over_month ORDER BY month, tenant")
    assert [(r["month"].isoformat(), r["tenant"], r["amount"], r["previous_amount"], r["change"], r["change_pct"])
            for r in got] == [
        ("2026-01-01", "acme", D("8"), D(0), D("8"), None),
        ("2026-01-01", "globex", D("1.5"), D(0), D("1.5"), None),
        ("2026-02-01", "acme", D("2.5"), D("8"), D("-5.5"), D("-68.75")),
        ("2026-02-01", "globex", D("3"), D("1.5"), D("1.5"), D("100"))]


def test_waste_beyond_idle_low_utilization_rentals_with_the_cost_of_the_unused_share(store):
    (r,) = rows(store, "SELECT * FROM billing_low_utilization")
    # g1 in January: 1,800 busy s at 58 % and 3,600 at 40 %: 1.5 h at 46 %; unused 1.00 x 42 % + 2.00 x 60 %
    assert (r["gpu_uuid"], r["tenant"], r["job"], r["low_busy_hours"], r["busy_amount"], r["unused_amount"]) == (
        "g1", "acme", "j1", D("1.5"), D("3"), D("1.62"))
    assert r["busy_util_pct"] == pytest.approx(46.0, abs=1e-4)


def test_waste_beyond_idle_over_provisioned_multi_gpu_rentals(store):
    (r,) = rows(store, "SELECT * FROM billing_overprovisioned")
    assert (r["tenant"], r["job"], r["gpus"], r["idle_gpus"], r["idle_gpu_hours"], r["idle_gpu_amount"],
            r["job_amount"]) == ("acme", "j1", 2, 1, D(2), D(4), D(8))


def test_what_each_month_would_have_cost_in_each_mode(store):
    got = rows(store, "SELECT * FROM billing_mode_comparison WHERE month = '2026-01-01' ORDER BY tenant, mode")
    assert [(r["tenant"], r["mode"], r["amount"], r["billed_amount"], r["difference"], r["priced_hours"],
             r["rented_hours"]) for r in got] == [
        ("acme", "on_demand", D("8"), D("8"), D(0), D(4), D(4)),
        ("acme", "usage", D("4.5"), D("8"), D("-3.5"), D(4), D(4)),
        ("globex", "on_demand", D("1.5"), D("1.5"), D(0), D("0.5"), D("0.5"))]


def test_the_views_read_the_ledger_final_a_row_stored_twice_counts_once(store):
    store.insert(store.prepare("billing_ledger", LEDGER.columns, [ledger_row(RECORDS[0])], dedup=False))
    (n,), = store.query("SELECT count() FROM billing_ledger")
    assert n == len(RECORDS) + 1
    test_cost_by_tenant_pool_and_month(store)
