import json
import random

import pytest
from helpers import gpu, message

from gpufleet.contracts.output import Output
from gpufleet.contracts.state import StateError
from gpufleet.contracts.telemetry import parse
from gpufleet.streams.decode import decode
from gpufleet.streams.rollups import GPU_METRICS, GPU_ROLLUP, NODE_ROLLUP, MinuteRollups


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


def reference_rows(messages: list[dict]) -> dict:
    """Per (minute, GPU), what a GPU minute row must hold, summed sample by sample in arrival order."""
    acc: dict = {}
    for m in messages:
        minute = int(m["ts"] // 60) * 60
        for g in m["gpus"]:
            a = acc.setdefault((minute, g["uuid"]), {"samples": 0, "throttled_samples": 0, "xid_events": 0,
                                                     "rented_ms": 0, "values": {k: [] for k in GPU_METRICS}})
            a["samples"] += 1
            a["throttled_samples"] += bool(g.get("throttle_reasons"))
            a["xid_events"] += len(g.get("xid_events") or [])
            a["rented_ms"] += 5000 if g.get("tenant") is not None else 0
            a["gpu_index"], a["job"] = g["index"], g.get("job") or ""
            for k in GPU_METRICS:
                if g.get(k) is not None:
                    a["values"][k].append(float(g[k]))
    rows = {}
    for key, a in acc.items():
        row = {k: v for k, v in a.items() if k != "values"}
        for k, vs in a["values"].items():
            total = -0.0
            for v in vs:
                total += v
            row.update({f"{k}_mean": total / len(vs) if vs else None, f"{k}_min": min(vs) if vs else None,
                        f"{k}_max": max(vs) if vs else None})
        rows[key] = row
    return rows


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gpu_minutes_as_columns_match_a_sample_by_sample_sum_exactly_through_a_saved_state(seed):
    """GPUs that come, go and change order, values missing at random, a restore from saved state mid-minute:
    every row the same as summing each GPU's samples one by one, to the last bit."""
    rng = random.Random(seed)
    uuids = [f"GPU-{i}" for i in range(6)]
    messages = []
    for tick in range(60):
        present = [u for u in uuids if rng.random() < 0.8]
        rng.shuffle(present)
        gpus = []
        for u in present:
            fields = {k: (None if rng.random() < 0.15 else rng.choice((0.0, rng.uniform(0, 100), 100 / 3)))
                      for k in GPU_METRICS}
            fields["mem_used_bytes"] = None if fields["mem_used_bytes"] is None else rng.uniform(0, 8e10)
            fields.update(throttle_reasons=rng.choice((0, 0, 4)), xid_events=rng.choice(([], [], [79, 31])),
                          tenant=rng.choice(("acme", None)), job=rng.choice(("j1", "j2")))
            gpus.append(gpu(int(u[4:]), uuid=u, **fields))
        messages.append(message(60 + tick * 7.0, gpus=gpus))
    r, out = MinuteRollups(), Output()
    for i, m in enumerate(messages):
        r.add(decode(json.dumps(m).encode()), out)
        if i % 17 == 5:                             # saved and restored in the middle of a minute
            r = MinuteRollups.from_state(json.loads(json.dumps(r.to_state())))
    r.close("n1", out)
    got = {(x["minute"], x["gpu_uuid"]): x for x in (as_dict(GPU_ROLLUP, row) for row in out.rows[GPU_ROLLUP])}
    want = reference_rows(messages)
    assert got.keys() == want.keys()
    for key, row in want.items():
        assert {k: got[key][k] for k in row} == row, key
        for k in GPU_METRICS:                       # the same floats, not merely equal ones (-0.0 stays -0.0)
            assert repr(got[key][f"{k}_mean"]) == repr(row[f"{k}_mean"])


def test_a_node_without_gpus_closes_its_minute_with_a_node_row_only():
    r, out = MinuteRollups(), Output()
    r.add(decode(json.dumps(message(60, gpus=[], host={"cpu_util_pct": 40.0})).encode()), out)
    r.add(decode(json.dumps(message(120, gpus=[gpu(0)])).encode()), out)
    r.close("n1", out)
    nodes = [as_dict(NODE_ROLLUP, x) for x in out.rows[NODE_ROLLUP]]
    assert [(n["minute"], n["gpus"], n["host_cpu_util_pct_mean"]) for n in nodes] == [(60, 0, 40.0), (120, 1, None)]
    assert [as_dict(GPU_ROLLUP, x)["minute"] for x in out.rows[GPU_ROLLUP]] == [120]


def test_a_saved_gpu_minute_with_counts_that_are_not_numbers_is_refused_by_name():
    r, out = MinuteRollups(), Output()
    r.add(decode(json.dumps(message(60, gpus=[gpu(0)])).encode()), out)
    saved = json.loads(json.dumps(r.to_state()))
    saved["gpus"]["GPU-0"]["samples"] = "three"
    with pytest.raises(StateError, match="GPU minute of GPU-0"):
        MinuteRollups.from_state(saved)


def test_a_gpus_power_and_pcie_count_once_however_many_mig_instances_carry_them():
    """Each MIG instance reports its physical GPU's power and PCIe traffic (the contract): a node's sum, and the
    pools' sums over the GPU rows, count each GPU once, split evenly over its instances."""
    whole = gpu(0, uuid="GPU-a", power_w=400.0, pcie_rx_bytes_per_s=7e9)
    instances = [gpu(1, uuid=f"MIG-b{j}", parent_uuid="GPU-b", mig_profile="1g.10gb", power_w=350.0,
                     pcie_rx_bytes_per_s=7e9, temp_c=61.0, util_pct=None) for j in range(7)]
    for decoded in (parse, decode):
        r, out = MinuteRollups(), Output()
        r.add(decoded(json.dumps(message(60, gpus=[whole, *instances]))), out)
        r.close("n1", out)
        (node,) = [as_dict(NODE_ROLLUP, x) for x in out.rows[NODE_ROLLUP]]
        assert node["gpu_power_w_mean"] == pytest.approx(750.0)
        assert node["gpu_pcie_rx_bytes_per_s_mean"] == pytest.approx(14e9)
        rows = {row["gpu_uuid"]: row for row in (as_dict(GPU_ROLLUP, x) for x in out.rows[GPU_ROLLUP])}
        assert sum(row["power_w_mean"] for row in rows.values()) == pytest.approx(750.0)
        assert rows["MIG-b3"]["power_w_mean"] == pytest.approx(50.0) and rows["MIG-b3"]["temp_c_mean"] == 61.0
        assert rows["GPU-a"]["power_w_mean"] == 400.0


def test_benign_clock_events_are_not_throttling():
    r, out = MinuteRollups(), Output()
    for ts, bits in ((60, 0x2), (65, 0x10), (70, 0x100 | 0x2), (75, 0x20 | 0x10), (80, 0x4)):
        r.add(parse(message(ts, gpus=[gpu(0, throttle_reasons=bits)])), out)
    r.close("n1", out)
    (row,) = [as_dict(GPU_ROLLUP, x) for x in out.rows[GPU_ROLLUP]]
    assert row["throttled_samples"] == 2            # thermal (with sync boost) and the power cap
