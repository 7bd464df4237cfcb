import pytest
from helpers import gpu, message

from gpufleet.contracts.output import Output
from gpufleet.contracts.telemetry import parse
from gpufleet.streams.billing.prices import Tariff
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.idle import IDLE_WINDOWS, IdleTracker

CFG = StreamConfig(idle_threshold_pct=5, idle_window_s=600)


def feed(samples, cfg=CFG, flush=True):
    """samples: (ts, util, tenant) for one GPU at a 5 s interval."""
    tracker, out = IdleTracker(), Output()
    for ts, util, tenant in samples:
        tracker.add(parse(message(ts, gpus=[gpu(0, util_pct=util, tenant=tenant)])), cfg, out, Tariff())
    if flush:
        tracker.flush("n1", out)
    return out.events, out.rows.get(IDLE_WINDOWS, [])


def idle_run(start, n, util=0.0, tenant="acme"):
    return [(start + 5 * i, util, tenant) for i in range(n)]


def test_fires_when_first_to_last_plus_one_interval_reaches_the_window():
    # 120 samples at 5 s: 595 s from first to last, + 5 s = 600 s: exactly the window
    events, rows = feed(idle_run(1000, 120))
    (fired,) = events
    assert fired["status"] == "firing" and fired["kind"] == "idle"
    assert fired["started_at"] == 1000 and fired["detected_at"] == 1000 + 5 * 119
    assert fired["dedup_key"] == "idle:GPU-0" and fired["evidence"]["samples"] == 120
    (row,) = rows
    assert row[1] == 1_000_000 and row[2] == (1000 + 600) * 1000 and row[-1] == 1   # still open at the end


def test_one_sample_short_of_the_window_is_not_idle():
    events, rows = feed(idle_run(1000, 119) + [(1000 + 5 * 119, 50.0, "acme")])
    assert events == [] and rows == []


def test_utilization_at_the_threshold_is_not_idle():
    events, _ = feed(idle_run(1000, 200, util=5.0))
    assert events == []
    events, _ = feed(idle_run(1000, 200, util=4.99))
    assert len(events) == 1


def test_busy_sample_ends_the_run_and_resolves():
    samples = idle_run(1000, 150) + [(1750, 80.0, "acme")]
    events, rows = feed(samples)
    fired, resolved = events
    assert resolved["status"] == "resolved" and resolved["id"] == fired["id"]
    assert resolved["resolved_at"] == 1000 + 5 * 149 + 5 and resolved["detected_at"] == fired["detected_at"]
    assert "utilization back to 80" in resolved["summary"]
    (row,) = rows
    assert row[8] == pytest.approx(750.0) and row[11] == "busy" and row[12] == 0


def test_tenant_change_ends_the_run():
    samples = idle_run(1000, 130) + idle_run(1650, 50, tenant="globex")
    events, rows = feed(samples)
    assert [e["status"] for e in events] == ["firing", "resolved"]
    assert rows[0][11] == "tenant changed"
    events, rows = feed(idle_run(1000, 130) + idle_run(1650, 5, tenant=None))
    assert rows[0][11] == "rental ended"


def test_unrented_gpu_is_never_idle():
    events, rows = feed(idle_run(1000, 500, tenant=None))
    assert events == [] and rows == []


def test_gap_longer_than_three_intervals_ends_the_run():
    # 100 samples, a gap of 20.001 s (> 3 x 5 s... measured ts to ts), then 100 more: neither half reaches 600 s
    first = idle_run(1000, 100)
    second = idle_run(1000 + 5 * 99 + 15.001, 100)
    events, _ = feed(first + second)
    assert events == []
    # a gap of exactly three intervals keeps the run going
    second = idle_run(1000 + 5 * 99 + 15, 100)
    events, _ = feed(first + second)
    assert len(events) == 1 and events[0]["started_at"] == 1000


def test_missing_utilization_ends_the_run():
    events, rows = feed(idle_run(1000, 130) + [(1650, None, "acme")])
    assert [e["status"] for e in events] == ["firing", "resolved"] and rows[0][11] == "no utilization"


def test_ids_are_stable_across_runs():
    a, _ = feed(idle_run(1000, 200))
    b, _ = feed(idle_run(1000, 200))
    assert a == b
