import hashlib
import json
from collections import Counter

import pytest

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.contracts.telemetry import parse

SMALL = dict(nodes=4, gpus_per_node=4, hours=3, seed=7, faults_per_kind=2)


def digest(spec):
    sim = Simulation(spec)
    h = hashlib.sha256()
    for m in sim.messages():
        h.update(json.dumps(m, sort_keys=True).encode())
    h.update(json.dumps(sim.labels(), sort_keys=True).encode())
    return h.hexdigest()


def test_same_seed_same_fleet_other_seed_other_fleet():
    assert digest(FleetSpec(**SMALL)) == digest(FleetSpec(**SMALL))
    assert digest(FleetSpec(**SMALL)) != digest(FleetSpec(**{**SMALL, "seed": 8}))


def test_messages_are_valid_ordered_and_complete():
    spec = FleetSpec(**SMALL)
    msgs = list(Simulation(spec).messages())
    assert len(msgs) == spec.messages_total
    assert [m["ts"] for m in msgs] == sorted(m["ts"] for m in msgs)
    for m in msgs[:: max(1, len(msgs) // 300)]:
        parse(json.dumps(m))
    seqs = {}
    for m in msgs:
        assert m["seq"] == seqs.get(m["node"], -1) + 1
        seqs[m["node"]] = m["seq"]


def test_workloads_and_faults_are_present():
    sim = Simulation(FleetSpec(nodes=8, gpus_per_node=8, hours=12, seed=3, faults_per_kind=4))
    kinds = Counter(a.kind for a in sim.plan.allocations)
    assert {"training", "inference", "notebook", "idle_rental"} <= set(kinds)
    labels = sim.labels()
    counts = Counter(label["kind"] for label in labels)
    assert counts["straggler"] == counts["io_starvation"] == counts["memory_leak"] == 4
    assert counts["idle"] > 0
    for label in labels:
        assert label["start"] < label["end"] and label["gpus"]


def test_faults_show_in_the_telemetry():
    sim = Simulation(FleetSpec(nodes=8, gpus_per_node=8, hours=12, seed=3, faults_per_kind=4))
    labels = sim.labels()
    by_gpu = {}
    for m in sim.messages():
        for g in m["gpus"]:
            by_gpu.setdefault(g["uuid"], []).append((m["ts"], g, m["host"]))
    assert {label["source"] for label in labels if label["kind"] == "io_starvation"} >= {"disk", "network"}
    assert {label["reaches_oom"] for label in labels if label["kind"] == "memory_leak"} == {True, False}
    for label in labels:
        inside = [(g, h) for ts, g, h in by_gpu[label["gpus"][0]] if label["start"] + 30 <= ts < label["end"]]
        if label["kind"] == "straggler" and label["cause"] == "host_slow":
            mine = [g["util_pct"] for g, _ in inside if g["util_pct"] > 20]
            peers = [g["util_pct"] for uuid in by_gpu if uuid not in label["gpus"]
                     for ts, g, _ in by_gpu[uuid]
                     if g["job"] == label["job"] and label["start"] + 30 <= ts < label["end"] and g["util_pct"] > 20]
            assert peers and sum(mine) / len(mine) < sum(peers) / len(peers) - 5, label
        elif label["kind"] == "straggler":
            if inside[0][0]["throttle_reasons"] is None:        # a node that cannot report throttle reasons
                continue
            throttled = [g for g, _ in inside if g["throttle_reasons"] & ~0x4 or g["throttle_reasons"] == 0x4]
            assert len(throttled) > 0.15 * len(inside), label
        elif label["kind"] == "io_starvation":
            hosts = [h for _, h in inside if h is not None]
            if label["source"] == "disk" and hosts:
                assert sum(h["iowait_pct"] for h in hosts) / len(hosts) > 10, label
            elif label["source"] == "network" and hosts:
                assert sum(h["net_rx_bytes_per_s"] for h in hosts) / len(hosts) > 1e9, label
            elif hosts:
                assert sum(h["cpu_util_pct"] for h in hosts) / len(hosts) > 90, label
            assert all(g["processes"] for g, _ in inside)
            # a starved GPU computes at its fed pace while a batch is in: never busier than before the fault
            before = [g["util_pct"] for ts, g, _ in by_gpu[label["gpus"][0]]
                      if label["start"] - 600 <= ts < label["start"] and g["job"] == label["job"]]
            if before:
                util = [g["util_pct"] for g, _ in inside]
                assert sum(util) / len(util) < sum(before) / len(before) + 3, label
        elif label["kind"] == "memory_leak":
            mem = [g["mem_used_bytes"] for g, _ in inside]
            assert mem[-1] > mem[0], label
            if label["reaches_oom"]:
                assert mem[-1] > 0.9 * inside[0][0]["mem_total_bytes"], label
                after = [g for ts, g, _ in by_gpu[label["gpus"][0]] if label["end"] + 1 <= ts < label["end"] + 25]
                assert after and all(not g["processes"] for g in after), "the process dies at the out-of-memory"
        elif label["kind"] == "idle":
            assert all(g["util_pct"] < 5 and g["tenant"] == label["tenant"] for g, _ in inside), label


@pytest.mark.parametrize("field, value", [("nodes", 0), ("hours", -1), ("interval_s", 0.0), ("gpus_per_node", 65)])
def test_spec_rejects_nonsense(field, value):
    with pytest.raises(ValueError, match=field):
        FleetSpec(**{field: value})


def test_a_notebooks_idle_ground_truth_is_what_its_telemetry_shows_around_an_oom_restart():
    # seed 25: a notebook's process is killed by its leak's out-of-memory just before a burst and restarts after the
    # burst began: the idle stretch before that burst ends where the GPU works again, not where the burst was to start
    spec = FleetSpec(nodes=3, gpus_per_node=4, hours=4, seed=25, faults_per_kind=3, interval_s=2.0)
    sim = Simulation(spec)
    notebooks = {a.job for a in sim.plan.allocations if a.kind == "notebook"}
    restarts = [f for f in sim.plan.faults if f.kind == "memory_leak" and f.params["reaches_oom"]
                and f.alloc.job in notebooks
                and any(s < f.end + f.params["restart_s"] and f.end < e for s, e in f.alloc.bursts)]
    assert restarts                                       # the case this test is about
    idle = {}
    for label in sim.labels():
        if label["kind"] == "idle" and label["job"] in notebooks:
            idle.setdefault((label["gpu_uuid"], label["job"]), []).append((label["start"], label["end"]))
    runs: dict = {}       # per notebook and GPU: stretches of samples below 5% (first ts, last ts)
    for m in sim.messages():
        for g in m["gpus"]:
            if g["job"] not in notebooks:
                continue
            spans = runs.setdefault((g["uuid"], g["job"]), [])
            if g["util_pct"] < 5:
                if spans and spans[-1][2]:
                    spans[-1][1] = m["ts"]
                else:
                    spans.append([m["ts"], m["ts"], True])
            elif spans:
                spans[-1][2] = False
    tol = 2 * spec.interval_s
    for notebook, spans in runs.items():
        long = [(a, b) for a, b, _ in spans if b - a >= spec.idle_window_s]
        labelled = idle.get(notebook, [])
        # every stretch the idle rule fires on is labelled, and every label is such a stretch, edge to edge
        assert len(long) == len(labelled), notebook
        for (a, b), (s, e) in zip(long, sorted(labelled)):
            assert abs(a - s) <= tol and abs(b - e) <= tol, (notebook, a, b, s, e)
