import pytest
from helpers import gpu, message

from gpufleet.collectors.telemetry import parse
from gpufleet.streams.output import Output
from gpufleet.streams.rollups import GPU_ROLLUP, NODE_ROLLUP, MinuteRollups


def as_dict(table, row):
    return dict(zip(table.columns, row))


def test_gpu_minute_mean_min_max_and_nulls():
    r, out = MinuteRollups(), Output()
    for ts, util, power in ((60, 10.0, 100.0), (65, 30.0, None), (70, 20.0, 300.0)):
        r.add(parse(message(ts, gpus=[gpu(0, util_pct=util, power_w=power, throttle_reasons=4 if ts == 65 else 0,
                                          xid_events=[79] if ts == 70 else [])])), out)
    assert out.rows == {}                        # the minute is still open
    r.add(parse(message(120, gpus=[gpu(0)])), out)
    (row,) = [as_dict(GPU_ROLLUP, x) for x in out.rows[GPU_ROLLUP]]
    assert row["minute"] == 60 and row["samples"] == 3 and row["gpu_uuid"] == "GPU-0"
    assert (row["util_pct_mean"], row["util_pct_min"], row["util_pct_max"]) == (20.0, 10.0, 30.0)
    assert (row["power_w_mean"], row["power_w_min"], row["power_w_max"]) == (200.0, 100.0, 300.0)
    assert row["temp_c_mean"] is None and row["throttled_samples"] == 1 and row["xid_events"] == 1
    assert row["tenant"] == "acme" and row["pool"] == "p1"
    assert row["rented_ms"] == 3 * 5000                  # three rented samples of 5 s


def test_rented_time_counts_samples_with_a_tenant_by_their_interval():
    r, out = MinuteRollups(), Output()
    r.add(parse(message(60, gpus=[gpu(0, tenant=None)], interval_s=10.0)), out)
    r.add(parse(message(70, gpus=[gpu(0)], interval_s=10.0)), out)
    r.add(parse(message(80, gpus=[gpu(0)], interval_s=None)), out, default_interval_s=2.5)
    r.close("n1", out)
    (row,) = [as_dict(GPU_ROLLUP, x) for x in out.rows[GPU_ROLLUP]]
    assert row["samples"] == 3 and row["rented_ms"] == 10_000 + 2_500


def test_node_minute_aggregates_gpus_per_tick():
    r, out = MinuteRollups(), Output()
    r.add(parse(message(60, gpus=[gpu(0, util_pct=10.0, power_w=100.0), gpu(1, util_pct=30.0, power_w=200.0)],
                        host={"cpu_util_pct": 40.0, "iowait_pct": 2.0})), out)
    r.add(parse(message(65, gpus=[gpu(0, util_pct=50.0, power_w=100.0), gpu(1, util_pct=70.0, power_w=100.0)],
                        host={"cpu_util_pct": 60.0})), out)
    r.close("n1", out)
    (node,) = [as_dict(NODE_ROLLUP, x) for x in out.rows[NODE_ROLLUP]]
    assert node["gpus"] == 2 and node["samples"] == 2
    assert (node["gpu_util_pct_mean"], node["gpu_util_pct_min"], node["gpu_util_pct_max"]) == (40.0, 20.0, 60.0)
    assert (node["gpu_power_w_min"], node["gpu_power_w_max"]) == (200.0, 300.0)
    assert node["host_cpu_util_pct_mean"] == pytest.approx(50.0) and node["host_iowait_pct_max"] == 2.0
    assert len(out.rows[GPU_ROLLUP]) == 2


def test_a_gpu_missing_from_later_samples_still_closes_with_its_minute():
    r, out = MinuteRollups(), Output()
    r.add(parse(message(60, gpus=[gpu(0), gpu(1)])), out)
    r.add(parse(message(65, gpus=[gpu(0)])), out)
    r.add(parse(message(180, gpus=[gpu(0)])), out)
    rows = [as_dict(GPU_ROLLUP, x) for x in out.rows[GPU_ROLLUP]]
    assert sorted((x["gpu_uuid"], x["samples"]) for x in rows) == [("GPU-0", 2), ("GPU-1", 1)]
