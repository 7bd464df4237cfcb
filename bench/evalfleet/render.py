"""From what the workloads did each second to what a node's collector writes.

The physics: the SM clock parks when the GPU has little to do and boosts under load; power follows load
and clock (roughly clock to the power 2.4, voltage rising with frequency) until the board limit, where
the clock is pulled back (SW power cap); temperature follows power through the heat sink with a lag of
tens of seconds. The sampling: utilization, memory utilization and host counters are averages over the
interval (the collector reads counters or averages NVML's samples); clocks, power, temperature, memory,
PCIe throughput and throttle reasons are what NVML says at the tick.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from . import hardware as hw
from . import idle
from .fleet import Node, Run, hexid
from .frame import Frame, ema, trailing_mean
from .workloads import Workload, seeded

SCHEMA = "gpufleet.telemetry.v1"
HEAD = '{"schema":"' + SCHEMA + '","ts":'


@dataclass
class Ticks:
    """When one node's collector wrote a message: window end (second index), time, collector, seq."""

    end: np.ndarray          # second index just after each sample's window
    ts: np.ndarray           # written ts, rounded to the millisecond
    cid: list[str]           # collector id per sample
    seq: np.ndarray
    dropped: np.ndarray


@dataclass
class NodeResult:
    messages: int = 0
    gpu_samples: int = 0
    idle_labels: list[dict] = field(default_factory=list)
    touches: int = 0


def schedule(node: Node, run: Run, t0: float) -> Ticks:
    """Ticks every interval at the node's phase; a restarted collector resumes on a new phase with a new
    id and seq 0; now and then one message is lost (a gap in seq; `dropped` says so when the spool
    dropped it)."""
    rng = seeded(run.seed, node.name, "collector")
    i = node.interval
    limit = run.t1 - t0
    ends: list[int] = []
    cids: list[str] = []
    seqs: list[int] = []
    dropped: list[int] = []
    starts = [(float(i), int(rng.integers(1000, 2_000_000)))]
    stops = []
    for at, gap in sorted(node.restarts):
        stops.append(at - t0)
        starts.append((float(math.ceil(at + gap - t0)), 0))
    stops.append(limit)
    p_drop = 1.0 / node.drop_every if node.drop_every else 0.0
    for (first, seq0), stop in zip(starts, stops):
        cid = f"{node.name}-{hexid(rng, 12)}"
        e = first
        seq = seq0
        lost = 0
        prev_lost = False
        k = 0
        while e < stop and e < limit:
            lose = k > 0 and not prev_lost and rng.random() < p_drop
            if lose:
                lost = 1 if rng.random() < 0.5 else 0
            else:
                ends.append(int(e))
                cids.append(cid)
                seqs.append(seq)
                dropped.append(lost)
                lost = 0
            prev_lost = lose
            seq += 1
            k += 1
            e += i
    end = np.asarray(ends, dtype=np.int64)
    jitter = rng.uniform(0.001, 0.008 if i == 1 else 0.02, len(end))
    ts = np.round(t0 + end + jitter, 3)
    return Ticks(end, ts, cids, np.asarray(seqs), np.asarray(dropped))


def _window_mean(x: np.ndarray, end: np.ndarray, width: int) -> np.ndarray:
    c = np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(x, axis=-1)], axis=-1)
    return (c[..., end] - c[..., end - width]) / width


def _util(busy: np.ndarray, end: np.ndarray, interval: int) -> np.ndarray:
    u = np.clip(_window_mean(busy, end, interval) * 100, 0, 100)
    return np.round(u) if interval == 1 else np.round(u, 1)


def render_node(node: Node, workloads: list[Workload], run: Run, out: TextIO) -> NodeResult:
    """Write one node's messages, in time order, to ``out``; return counts and its idle labels."""
    gpu = node.shape.gpu
    G = node.gpus
    i = node.interval
    t0 = run.t0 + node.phase - i
    ticks = schedule(node, run, t0)
    K = len(ticks.ts)
    S = int(ticks.end[-1]) + 1 if K else 1
    frame = Frame(t0, S, G)
    for w in workloads:
        w.render(frame, node)
    rng = seeded(run.seed, node.name, "physics")

    # who rents each GPU at each tick
    names: list[str] = []
    index: dict[str, int] = {}

    def intern(s: str | None) -> int:
        if s is None:
            return -1
        if s not in index:
            index[s] = len(names)
            names.append(s)
        return index[s]

    tenant = np.full((G, K), -1, dtype=np.int64)
    job = np.full((G, K), -1, dtype=np.int64)
    for w in workloads:
        for row, a, b, ten, jb in w.tenancy(node):
            k0, k1 = np.searchsorted(ticks.ts, [a, b])
            if k1 > k0:
                tenant[row, k0:k1] = intern(ten)
                job[row, k0:k1] = intern(jb)

    # utilization, then the guard band around the idle window, then the idle labels
    result = NodeResult()
    util = _util(frame.busy, ticks.end, i)
    for _ in range(6):
        touched = False
        for g in range(G):
            for run_ in idle.quiet_runs(ticks.ts, util[g], tenant[g], i):
                lo, hi = idle.band(i)
                if lo < idle.duration(ticks.ts, run_, i) < hi:
                    for j in idle.split_points(ticks.ts, run_, i):
                        e = int(ticks.end[j])
                        lift = rng.uniform(0.2, 0.6)
                        frame.busy[g, e - i:e] = np.maximum(frame.busy[g, e - i:e], lift)
                        frame.load[g, e - i:e] = np.maximum(frame.load[g, e - i:e], lift * 0.6)
                        frame.memact[g, e - i:e] = np.maximum(frame.memact[g, e - i:e], lift * 0.3)
                        touched = True
                        result.touches += 1
        if not touched:
            break
        util = _util(frame.busy, ticks.end, i)
    for g in range(G):
        for run_ in idle.quiet_runs(ticks.ts, util[g], tenant[g], i):
            d = idle.duration(ticks.ts, run_, i)
            if d >= idle.WINDOW:
                a, b = run_
                result.idle_labels.append({
                    "kind": "idle", "level": "gpu", "node": node.name, "gpu_uuid": node.uuids[g],
                    "gpus": [node.uuids[g]], "job": names[job[g, a]] if job[g, a] >= 0 else None,
                    "tenant": names[tenant[g, a]], "pool": node.pool, "start": float(ticks.ts[a]),
                    "end": round(float(ticks.ts[b]) + i, 3), "interval_s": float(i), "samples": b - a + 1})
    mem_util = np.round(np.clip(_window_mean(frame.memact, ticks.end, i) * 100, 0, 100), 1)

    # clocks, power, temperature
    act = trailing_mean(frame.busy, 6)
    ramp = np.clip((act - 0.08) / 0.30, 0.0, 1.0)
    f_park = gpu.clock_idle / gpu.clock_max
    f = f_park + (frame.clock - f_park) * ramp
    idle_w = gpu.power_idle * (1 + 0.04 * rng.standard_normal((G, 1)))
    dyn = gpu.power_full - gpu.power_idle
    load = np.maximum(frame.load, 0.0)
    power = idle_w + dyn * load * f ** 2.4
    limit = gpu.power_limit * 0.985
    capped = power > limit
    f_cap = ((limit - idle_w) / (dyn * np.maximum(load, 1e-6))) ** (1 / 2.4)
    f = np.where(capped, np.minimum(f, f_cap), f)
    power = np.where(capped, limit * (1 - 0.01 * rng.random((G, S))), power)
    power = np.minimum(power * (1 + 0.01 * rng.standard_normal((G, S))), gpu.power_limit)
    heat = node.inlet_c + np.asarray(node.gpu_dt)[:, None] + gpu.r_th * power
    heat = np.where(frame.hot > 0, np.maximum(heat, frame.hot + 0.6 * rng.standard_normal((G, S))), heat)
    temp = ema(heat, 45.0)
    col = ticks.end - 1
    f_s = f[:, col]
    temp_s = temp[:, col]
    derate = 15 * np.floor(np.maximum(temp_s - 62, 0) / 7)
    clock = f_s * gpu.clock_max - derate * (ramp[:, col] > 0.5)
    clock += 15 * rng.integers(-1, 2, clock.shape) * (ramp[:, col] > 0.5)
    clock = np.clip(np.round(clock / 15) * 15, gpu.clock_idle, gpu.clock_max)
    clock = np.where(ramp[:, col] == 0, gpu.clock_idle, clock).astype(np.int64)
    working = ramp[:, col] > 0.3
    bits = np.where(working, frame.bits[:, col], 0) | np.where(working & capped[:, col], hw.SW_POWER_CAP, 0)
    power_s = np.round(power[:, col], 1)
    temp_i = np.round(temp_s).astype(np.int64)
    noise = rng.lognormal(0.0, 0.25, (2, G, K))
    chatter = rng.uniform(0, 80e3, (2, G, K))          # driver and monitoring traffic on an idle link
    rx = np.round((frame.pcie_rx[:, col] * noise[0] + chatter[0]) / 1024) * 1024
    tx = np.round((frame.pcie_tx[:, col] * noise[1] + chatter[1]) / 1024) * 1024
    del act, ramp, f, power, heat, temp, capped, f_cap, load

    # memory and processes
    cap = gpu.mem_total - gpu.reserved
    used = np.full((G, K), float(gpu.reserved))
    plist: list[list[list[str]]] = [[[] for _ in range(K)] for _ in range(G)]
    procs = sorted((p for w in workloads for p in w.procs(node)), key=lambda p: (p.gpu, p.start))
    for p in procs:
        k0, k1 = np.searchsorted(ticks.ts, [p.start, p.end])
        if k1 <= k0:
            continue
        m = np.round(np.minimum(p.mem.at(ticks.ts[k0:k1]), cap - (used[p.gpu, k0:k1] - gpu.reserved)))
        m = np.maximum(m, 0)
        used[p.gpu, k0:k1] += m
        rows = plist[p.gpu]
        for k, v in zip(range(k0, k1), m.tolist()):
            rows[k].append(f'{{"pid":{p.pid},"mem_used_bytes":{int(v)}}}')
    xids: dict[tuple[int, int], list[int]] = {}
    for w in workloads:
        for nd, g, when, code in w.xids:
            if nd == node.name:
                k = int(np.searchsorted(ticks.ts, when))
                if k < K:
                    xids.setdefault((g, k), []).append(code)

    # host
    hb = node.host_base
    hrng = seeded(run.seed, node.name, "host")
    if node.has_host:
        cores = frame.cores + hb["cores"] * (1 + 0.2 * hrng.standard_normal(S))
        disk = frame.disk + hb["disk"] * hrng.lognormal(0, 0.6, S)
        net = frame.net + hb["net"] * hrng.lognormal(0, 0.5, S)
        iow = frame.iowait + hb["iowait"] * hrng.random(S)
        cpu_s = np.round(np.clip(_window_mean(cores, ticks.end, i) / node.shape.cores * 100, 0, 100), 1)
        iow_s = np.round(np.clip(_window_mean(iow, ticks.end, i), 0, 100 - cpu_s), 1)
        disk_s = np.round(np.maximum(_window_mean(disk, ticks.end, i), 0)).astype(np.int64)
        net_s = np.round(np.maximum(_window_mean(net, ticks.end, i), 0)).astype(np.int64)
        hmem = np.round(np.minimum(hb["mem"] + frame.host_mem[col], node.shape.host_mem * 0.97)).astype(np.int64)
    del frame

    # write
    jname = [json.dumps(s) for s in names]
    tenant_s = [[jname[x] if x >= 0 else "null" for x in row] for row in tenant.tolist()]
    job_s = [[jname[x] if x >= 0 else "null" for x in row] for row in job.tolist()]
    attr = [['"labels"' if (a >= 0 or b >= 0) else "null" for a, b in zip(ra, rb)]
            for ra, rb in zip(tenant.tolist(), job.tolist())]
    model = json.dumps(gpu.name)
    prefix = [f'{{"uuid":"{node.uuids[g]}","parent_uuid":null,"mig_profile":null,"index":{g},"model":{model},'
              for g in range(G)]
    util_l, mu_l, used_l = util.tolist(), mem_util.tolist(), np.round(used).astype(np.int64).tolist()
    pw_l, tp_l, ck_l = power_s.tolist(), temp_i.tolist(), clock.tolist()
    nulls: list[list[str]] = [["null"] * K for _ in range(G)]
    rx_l = rx.astype(np.int64).astype(str).tolist() if node.has_pcie else nulls
    tx_l = tx.astype(np.int64).astype(str).tolist() if node.has_pcie else nulls
    bits_l = bits.astype(str).tolist() if node.has_throttle else nulls
    mem_total = f',"mem_total_bytes":{gpu.mem_total},"power_w":'
    power_limit = f',"power_limit_w":{gpu.power_limit!r},"temp_c":'
    clock_max = f',"sm_clock_max_mhz":{gpu.clock_max},"pcie_rx_bytes_per_s":'
    head = f',"node":{json.dumps(node.name)},'
    mid = f',"interval_s":{float(i)!r},"pool":{json.dumps(node.pool)},"dropped":'
    hosts = ["null"] * K
    if node.has_host:
        total_host = node.shape.host_mem
        hosts = [f'{{"cpu_util_pct":{c},"iowait_pct":{w_},"disk_read_bytes_per_s":{d},"net_rx_bytes_per_s":{nt},'
                 f'"mem_used_bytes":{hm},"mem_total_bytes":{total_host}}}'
                 for c, w_, d, nt, hm in zip(cpu_s.tolist(), iow_s.tolist(), disk_s.tolist(), net_s.tolist(),
                                             hmem.tolist())]
    ts_l = ticks.ts.tolist()
    seq_l = ticks.seq.tolist()
    drop_l = ticks.dropped.tolist()
    for k in range(K):
        gpus = []
        for g in range(G):
            xid = ",".join(map(str, xids.get((g, k), ())))
            gpus.append(
                f'{prefix[g]}"tenant":{tenant_s[g][k]},"job":{job_s[g][k]},"attribution":{attr[g][k]},'
                f'"util_pct":{util_l[g][k]},"mem_util_pct":{mu_l[g][k]},"mem_used_bytes":{used_l[g][k]}{mem_total}'
                f'{pw_l[g][k]}{power_limit}{tp_l[g][k]},"sm_clock_mhz":{ck_l[g][k]}{clock_max}'
                f'{rx_l[g][k]},"pcie_tx_bytes_per_s":{tx_l[g][k]},'
                f'"throttle_reasons":{bits_l[g][k]},"ecc_dbe_total":{node.ecc[g]},"xid_events":[{xid}],'
                f'"processes":[{",".join(plist[g][k])}]}}')
        out.write(f'{HEAD}{ts_l[k]!r}{head}"collector_id":"{ticks.cid[k]}","seq":{seq_l[k]}{mid}{drop_l[k]},'
                  f'"host":{hosts[k]},"gpus":[{",".join(gpus)}]}}\n')
    result.messages = K
    result.gpu_samples = K * G
    return result
