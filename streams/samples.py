"""Raw GPU samples as store rows (kept for a limited time; see the TTL in sql/)."""
from __future__ import annotations

from gpufleet.contracts import tables
from gpufleet.contracts.output import Output
from gpufleet.contracts.telemetry import Telemetry

GPU_SAMPLES = tables.GPU_SAMPLES


def _int(v):
    return None if v is None else int(v)


def sample_rows(msg: Telemetry, out: Output) -> None:
    ts_ms, node, pool = round(msg.ts * 1000), msg.node, msg.pool or ""
    rows = out.rows.get(GPU_SAMPLES)
    if rows is None:
        rows = out.rows[GPU_SAMPLES] = []
    append = rows.append
    for g in msg.gpus:
        procs = g.processes
        used, total = g.mem_used_bytes, g.mem_total_bytes
        append((
            ts_ms, node, pool, g.uuid, g.index, g.tenant or "", g.job or "", g.util_pct, g.mem_util_pct,
            None if used is None else int(used), None if total is None else int(total), g.power_w, g.temp_c,
            g.sm_clock_mhz, g.pcie_rx_bytes_per_s, g.pcie_tx_bytes_per_s, g.throttle_reasons, g.xid_events,
            [p.pid for p in procs] if procs else [], [_int(p.mem_used_bytes) or 0 for p in procs] if procs else []))
