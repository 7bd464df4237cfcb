"""The held-out evaluation fleet (bench/evalfleet): deterministic, valid telemetry, and labels whose faults
can be seen in the samples they describe."""
import gzip
import hashlib
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))          # bench/ sits at the repository root, outside the installed package

from bench.evalfleet import FleetSpec, generate  # noqa: E402
from bench.evalfleet.__main__ import main  # noqa: E402
from gpufleet.contracts.telemetry import parse  # noqa: E402

SPEC = FleetSpec(seed=4, nodes=10, hours=3, stragglers=6, io_starvations=6, leaks=6, intervals=(2, 5, 10, 15, 30, 60))
KINDS = {"straggler", "io_starvation", "memory_leak", "idle"}
COMPUTE = {"thermal", "power_brake", "hw_slowdown", "node_thermal", "node_power_brake"}


class Samples:
    """The written fleet, as per-GPU and per-node series."""

    def __init__(self, lines: list[str]):
        self.msgs = [json.loads(x) for x in lines]
        self.gpu: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.node: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.node_of: dict[str, str] = {}
        for m in self.msgs:
            n = self.node[m["node"]]
            n["ts"].append(m["ts"])
            n["interval"].append(m["interval_s"])
            for f in ("cpu_util_pct", "iowait_pct", "disk_read_bytes_per_s", "net_rx_bytes_per_s"):
                n[f].append(m["host"][f] if m["host"] else np.nan)
            for g in m["gpus"]:
                s = self.gpu[g["uuid"]]
                self.node_of[g["uuid"]] = m["node"]
                s["ts"].append(m["ts"])
                for f in ("util_pct", "sm_clock_mhz", "sm_clock_max_mhz", "power_w", "temp_c", "mem_used_bytes",
                          "pcie_rx_bytes_per_s"):
                    s[f].append(np.nan if g[f] is None else g[f])
                for f in ("tenant", "job", "model", "processes", "throttle_reasons"):
                    s[f].append(g[f])
        for d in list(self.gpu.values()) + list(self.node.values()):
            for f, v in d.items():
                if f not in ("tenant", "job", "model", "processes", "throttle_reasons"):
                    d[f] = np.asarray(v, dtype=float)

    def window(self, uuid: str, a: float, b: float) -> np.ndarray:
        ts = self.gpu[uuid]["ts"]
        return (ts >= a) & (ts < b)

    def mean(self, uuid: str, field: str, a: float, b: float) -> float:
        return float(np.nanmean(self.gpu[uuid][field][self.window(uuid, a, b)]))

    def host_mean(self, node: str, field: str, a: float, b: float) -> float:
        n = self.node[node]
        return float(np.nanmean(n[field][(n["ts"] >= a) & (n["ts"] < b)]))

    def job_gpus(self, job: str, a: float, b: float) -> set[str]:
        return {u for u, s in self.gpu.items() if job in [s["job"][k] for k in np.flatnonzero(self.window(u, a, b))]}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    d = tmp_path_factory.mktemp("evalfleet")
    summary = generate(SPEC, d / "t.jsonl", d / "l.jsonl")
    lines = (d / "t.jsonl").read_text().splitlines()
    labels = [json.loads(x) for x in (d / "l.jsonl").read_text().splitlines()]
    return summary, lines, Samples(lines), labels


def _digest(spec: FleetSpec, d: Path) -> str:
    generate(spec, d / "t.jsonl", d / "l.jsonl")
    return hashlib.sha256((d / "t.jsonl").read_bytes() + (d / "l.jsonl").read_bytes()).hexdigest()


def test_same_seed_same_bytes_other_seed_other_fleet(tmp_path):
    small = FleetSpec(seed=5, nodes=5, hours=1, stragglers=1, io_starvations=1, leaks=1)
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    assert _digest(small, tmp_path / "a") == _digest(small, tmp_path / "b")
    assert _digest(FleetSpec(**{**small.__dict__, "seed": 6}), tmp_path / "c") != _digest(small, tmp_path / "a")


def test_every_message_is_valid_telemetry_in_time_order(fleet):
    summary, lines, s, _ = fleet
    assert len(lines) == summary.messages > 0
    prev = 0.0
    per_node = defaultdict(list)
    for line in lines:
        m = parse(line)
        assert m.ts >= prev
        prev = m.ts
        per_node[m.node].append(m)
        for g in m.gpus:
            assert g.parent_uuid is None and g.mig_profile is None
            assert g.mem_used_bytes <= g.mem_total_bytes
            assert g.throttle_reasons is None or g.throttle_reasons & 0x1 == 0
            assert (g.attribution == "labels") == (g.tenant is not None or g.job is not None)
    gaps = 0
    for node, msgs in per_node.items():
        # what a node cannot report is null in every message of that node
        assert len({m.host is None for m in msgs}) == 1, node
        assert len({m.gpus[0].pcie_rx_bytes_per_s is None for m in msgs}) == 1, node
        assert len({m.gpus[0].throttle_reasons is None for m in msgs}) == 1, node
        assert len({m.interval_s for m in msgs}) == 1
        for a, b in zip(msgs, msgs[1:]):
            if a.collector_id == b.collector_id:
                assert b.seq > a.seq
                gaps += b.seq - a.seq - 1
            else:
                assert b.seq == 0      # a restarted collector
    assert gaps > 0                    # some messages were lost, and seq says so
    assert {m[0].interval_s for m in per_node.values()} == {2.0, 5.0, 10.0, 15.0, 30.0, 60.0}
    assert any(m[0].host is None for m in per_node.values())
    assert any(m[0].gpus[0].pcie_rx_bytes_per_s is None for m in per_node.values())
    assert any(m[0].gpus[0].throttle_reasons is None for m in per_node.values())
    # mixed GPU models in one fleet and within one job
    models_of_job = defaultdict(set)
    for msgs in per_node.values():
        for g in msgs[len(msgs) // 2].gpus:
            models_of_job[g.job].add(g.model)
    assert len({m for ms in models_of_job.values() for m in ms}) >= 3


def test_clocks_park_without_work_and_boost_under_load(fleet):
    _, _, s, _ = fleet
    idle_frac, busy_frac = [], []
    for g in s.gpu.values():
        rel = g["sm_clock_mhz"] / g["sm_clock_max_mhz"]
        idle_frac += rel[g["util_pct"] == 0].tolist()
        busy_frac += rel[g["util_pct"] >= 90].tolist()
    assert np.median(idle_frac) < 0.2 and np.median(busy_frac) > 0.9


def test_labels_are_well_formed(fleet):
    summary, _, s, labels = fleet
    t0, t1 = SPEC.run().t0, SPEC.run().t1
    kinds = defaultdict(int)
    for lab in labels:
        kinds[lab["kind"]] += 1
        assert lab["kind"] in KINDS
        assert {"level", "node", "gpu_uuid", "gpus", "job", "tenant", "pool", "start", "end"} <= lab.keys()
        assert t0 <= lab["start"] < lab["end"] <= t1 + 60
        assert lab["gpus"] and all(s.node_of[u] == lab["node"] for u in lab["gpus"])
        if lab["level"] == "gpu":
            assert lab["gpu_uuid"] == lab["gpus"][0] and len(lab["gpus"]) == 1
        else:
            assert lab["gpu_uuid"] is None
        if lab["kind"] == "straggler":
            assert lab["level"] in ("gpu", "node") and lab["cause"] and 0.1 <= lab["slowdown"] <= 0.5
        elif lab["kind"] == "io_starvation":
            assert lab["level"] == "job" and lab["source"] in ("disk", "network", "cpu") and lab["job"]
            assert 300 <= lab["end"] - lab["start"] <= 3600
        elif lab["kind"] == "memory_leak":
            assert lab["level"] == "gpu" and lab["rate_bytes_per_s"] > 0
            assert lab["end"] == min(lab["oom_at"], t1) and lab["reaches_oom"] == (lab["oom_at"] <= t1)
        else:
            assert lab["level"] == "gpu" and lab["tenant"]
    assert kinds["straggler"] == 6 and kinds["io_starvation"] >= 6 and kinds["memory_leak"] >= 6 and kinds["idle"] > 0
    assert dict(summary.labels) == dict(kinds) and summary.notes == []


def test_stragglers_are_behind_their_peers(fleet):
    _, _, s, labels = fleet
    for lab in (x for x in labels if x["kind"] == "straggler"):
        a, b = lab["start"], lab["end"]
        slow = set(lab["gpus"])
        model = s.gpu[lab["gpus"][0]]["model"][0]
        peers = [u for u in s.job_gpus(lab["job"], a, b) - slow if s.gpu[u]["model"][0] == model]
        if not peers:          # a whole node of the only GPUs of its model in the job: compare with itself
            peers_before = [(u, a - 1800, a - 60) for u in slow]
        cause = lab["cause"]

        def rel_clock(u, x, y):        # while working (checkpoints park the clock)
            g, w = s.gpu[u], s.window(u, x, y)
            w &= g["util_pct"] >= 50
            return float(np.mean(g["sm_clock_mhz"][w] / g["sm_clock_max_mhz"][w]))
        if cause in COMPUTE:
            mine = np.mean([rel_clock(u, a, b) for u in slow])
            theirs = (np.mean([rel_clock(u, a, b) for u in peers]) if peers
                      else np.mean([rel_clock(*p) for p in peers_before]))
            assert mine < theirs - 0.02, lab
        elif peers:
            mine = np.mean([s.mean(u, "util_pct", a, b) for u in slow])
            theirs = np.mean([s.mean(u, "util_pct", a, b) for u in peers])
            if lab["cause"] in ("slow_cpu", "node_cpu"):
                assert mine < theirs - 2, lab         # it waits on its host; the others on it
            else:
                assert mine > theirs + 0.5, lab       # busy moving data; the others wait at the collective


def test_io_starved_nodes_show_their_source(fleet):
    _, _, s, labels = fleet
    seen = set()
    for lab in (x for x in labels if x["kind"] == "io_starvation"):
        n, a, b = lab["node"], lab["start"], lab["end"]
        seen.add(lab["source"])
        util = np.mean([s.mean(u, "util_pct", a, b) for u in lab["gpus"]])
        assert util < 75, lab
        iowait, disk = s.host_mean(n, "iowait_pct", a, b), s.host_mean(n, "disk_read_bytes_per_s", a, b)
        net, cpu = s.host_mean(n, "net_rx_bytes_per_s", a, b), s.host_mean(n, "cpu_util_pct", a, b)
        if lab["source"] == "disk":
            assert iowait > 10 and disk > 1e9 and disk > net, lab
        elif lab["source"] == "network":
            assert net > 1e9 and net > 3 * disk, lab
            # network file systems count their waits as iowait; object stores over HTTP do not
            assert iowait < 5 if lab["storage"] == "object_store" else iowait > 2, lab
        else:
            assert cpu > 85 and iowait < 10, lab
    assert seen == {"disk", "network", "cpu"}


def test_leaking_memory_grows_until_the_process_dies(fleet):
    _, _, s, labels = fleet
    for lab in (x for x in labels if x["kind"] == "memory_leak"):
        u, a, b = lab["gpu_uuid"], lab["start"], lab["end"]
        g = s.gpu[u]
        inside = np.flatnonzero(s.window(u, a, b))
        mem = [next(p["mem_used_bytes"] for p in g["processes"][k] if p["pid"] == lab["pid"]) for k in inside]
        grew = mem[-1] - mem[0]
        expected = lab["rate_bytes_per_s"] * (g["ts"][inside[-1]] - g["ts"][inside[0]])
        assert grew >= 0.8 * expected - lab["rate_bytes_per_s"] * lab["step_period_s"] - 1, lab
        assert np.all(np.diff(mem) >= 0)
        if lab["reaches_oom"]:
            after = np.flatnonzero(s.window(u, lab["oom_at"], lab["oom_at"] + 3600))
            assert after.size and all(lab["pid"] not in [p["pid"] for p in g["processes"][k]] for k in after)
            assert any(g["processes"][k] for k in after), "the process is restarted"


def _idle_runs(s: Samples):
    """The idle rule, written again from its definition (docs/detectors/idle.md)."""
    for u, g in s.gpu.items():
        interval = s.node[s.node_of[u]]["interval"][0]
        run = None
        for k, ts in enumerate(g["ts"]):
            quiet = g["tenant"][k] is not None and g["util_pct"][k] < 5
            if run and (not quiet or g["tenant"][k] != g["tenant"][run[0]] or ts - g["ts"][run[1]] > 3 * interval):
                yield u, g["ts"][run[0]], g["ts"][run[1]] + interval, interval
                run = None
            if quiet:
                run = [run[0], k] if run else [k, k]
        if run:
            yield u, g["ts"][run[0]], g["ts"][run[1]] + interval, interval


def test_idle_labels_are_exactly_the_idle_rule(fleet):
    _, _, s, labels = fleet
    runs = list(_idle_runs(s))
    expected = {(u, round(a, 3), round(b, 3)) for u, a, b, _ in runs if b - a >= 600}
    got = {(x["gpu_uuid"], x["start"], x["end"]) for x in labels if x["kind"] == "idle"}
    assert got == expected and len(got) >= 5
    for u, a, b, interval in runs:     # nothing near the window's edge
        assert not 600 - 3 * interval - 30 < b - a < 600 + 3 * interval + 30, (u, a, b)


def test_command_line(tmp_path, capsys):
    out, lab = tmp_path / "t.jsonl", tmp_path / "l.jsonl"
    assert main(["--seed", "2", "--nodes", "3", "--hours", "0.5", "-o", str(out), "--labels", str(lab)]) == 0
    assert out.stat().st_size > 0 and lab.exists()
    gz = tmp_path / "t.jsonl.gz"
    assert main(["-q", "--seed", "2", "--nodes", "3", "--hours", "0.5", "-o", str(gz), "--labels", str(lab)]) == 0
    assert gzip.decompress(gz.read_bytes()) == out.read_bytes()
    # several fleets in one file pair: each its own site names, still in time order
    assert main(["-q", "--seed", "2", "--fleets", "2", "--nodes", "3", "--hours", "0.5", "-o", str(out),
                 "--labels", str(lab)]) == 0
    msgs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [m["ts"] for m in msgs] == sorted(m["ts"] for m in msgs)
    assert {m["node"][3] for m in msgs} == {"2", "3"}
    with pytest.raises(SystemExit) as e:
        main(["--nodes", "0", "-o", str(out), "--labels", str(lab)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "evalfleet: nodes must be between 1 and 2000"
