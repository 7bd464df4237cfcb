"""One-minute rollups per GPU and per node: mean, min and max of each metric.

A node's minute closes when its (ordered) sample stream enters a later minute,
or at the end of input. Per-tenant and per-pool rollups are not computed here:
ClickHouse derives them from the per-GPU rows (materialized views).
"""
from __future__ import annotations

from operator import attrgetter

from gpufleet.collectors.telemetry import Telemetry

from .output import Output, Table
from .state import StateError

GPU_METRICS = ("util_pct", "mem_util_pct", "mem_used_bytes", "power_w", "temp_c", "sm_clock_mhz",
               "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s")
# per tick, across the node's GPUs: (column, GPU metric, mean or sum)
NODE_GPU_METRICS = (("gpu_util_pct", "util_pct", "mean"), ("gpu_mem_used_bytes", "mem_used_bytes", "sum"),
                    ("gpu_power_w", "power_w", "sum"), ("gpu_sm_clock_mhz", "sm_clock_mhz", "mean"),
                    ("gpu_pcie_rx_bytes_per_s", "pcie_rx_bytes_per_s", "sum"),
                    ("gpu_pcie_tx_bytes_per_s", "pcie_tx_bytes_per_s", "sum"))
HOST_METRICS = ("cpu_util_pct", "iowait_pct", "disk_read_bytes_per_s", "net_rx_bytes_per_s", "mem_used_bytes")
NODE_METRICS = tuple(f"host_{m}" for m in HOST_METRICS) + tuple(c for c, _, _ in NODE_GPU_METRICS)


def _stat_columns(metrics) -> tuple[str, ...]:
    return tuple(f"{m}_{s}" for m in metrics for s in ("mean", "min", "max"))


GPU_ROLLUP = Table("gpu_rollup_1m", ("minute", "node", "pool", "gpu_uuid", "gpu_index", "model", "tenant", "job",
                                     "samples", *_stat_columns(GPU_METRICS), "throttled_samples", "xid_events",
                                     "rented_ms"))
NODE_ROLLUP = Table("node_rollup_1m", ("minute", "node", "pool", "samples", "gpus",
                                       *_stat_columns(NODE_METRICS)))

_gpu_values = attrgetter(*GPU_METRICS)
_host_values = attrgetter(*HOST_METRICS)
_node_gpu_values = attrgetter(*(metric for _, metric, _ in NODE_GPU_METRICS))


class Stats:
    """Count, sum, min and max of several metrics; None values are skipped.

    Kept as one flat list, four values per metric (no list per metric: about 90 bytes a metric less)."""

    __slots__ = ("acc",)

    def __init__(self, width: int):
        self.acc = [0, 0.0, 0.0, 0.0] * width

    def add(self, values) -> None:
        acc = self.acc
        i = 0
        for v in values:
            if v is not None:
                if acc[i]:
                    acc[i] += 1
                    acc[i + 1] += v
                    if v < acc[i + 2]:
                        acc[i + 2] = v
                    elif v > acc[i + 3]:
                        acc[i + 3] = v
                else:
                    acc[i], acc[i + 1], acc[i + 2], acc[i + 3] = 1, v, v, v
            i += 4

    def to_state(self) -> dict:
        """Per metric, in the order the caller names them: count, sum, min and max as four columns."""
        acc = self.acc
        return {"n": acc[0::4], "sum": acc[1::4], "min": acc[2::4], "max": acc[3::4]}

    @classmethod
    def from_state(cls, state: dict, width: int) -> Stats:
        cols = [c for c in (state.get(k) for k in ("n", "sum", "min", "max"))
                if isinstance(c, list) and len(c) == width]
        if len(cols) != 4:
            raise StateError(f"rollup statistics: saved state needs n, sum, min and max of {width} metrics each")
        stats = cls(width)
        for k, col in enumerate(cols):
            stats.acc[k::4] = col
        return stats

    def columns(self) -> list:
        out: list = []
        acc = self.acc
        for i in range(0, len(acc), 4):
            n = acc[i]
            if n:
                out += (acc[i + 1] / n, acc[i + 2], acc[i + 3])
            else:
                out += (None, None, None)
        return out


class GpuMinute:
    __slots__ = ("stats", "samples", "throttled", "xids", "rented_ms", "last")

    def __init__(self):
        self.stats = Stats(len(GPU_METRICS))
        self.samples = self.throttled = self.xids = 0
        self.rented_ms = 0               # the telemetry's rented time: the intervals of samples with a tenant
        self.last: tuple = ()            # index, model, tenant, job of the latest sample

    def add(self, g, interval_ms: int) -> None:
        self.stats.add(_gpu_values(g))
        self.samples += 1
        if g.tenant is not None:
            self.rented_ms += interval_ms
        if g.throttle_reasons:
            self.throttled += 1
        if g.xid_events:
            self.xids += len(g.xid_events)
        self.last = (g.index, g.model or "", g.tenant or "", g.job or "")

    def to_state(self) -> dict:
        index, model, tenant, job = self.last or (None, None, None, None)
        return {"stats": self.stats.to_state(), "samples": self.samples, "throttled": self.throttled,
                "xids": self.xids, "rented_ms": self.rented_ms, "index": index, "model": model, "tenant": tenant,
                "job": job}

    @classmethod
    def from_state(cls, state: dict) -> GpuMinute:
        acc = cls.__new__(cls)
        try:
            acc.stats = Stats.from_state(state["stats"], len(GPU_METRICS))
            acc.samples, acc.throttled, acc.xids = state["samples"], state["throttled"], state["xids"]
            acc.rented_ms = state["rented_ms"]
            last = (state["index"], state["model"], state["tenant"], state["job"])
        except KeyError as err:
            raise StateError(f"GPU minute: saved state lacks {err}") from None
        acc.last = () if last[0] is None else last
        return acc


class NodeMinute:
    __slots__ = ("stats", "samples", "gpus", "pool")

    def __init__(self):
        self.stats = Stats(len(NODE_METRICS))
        self.samples = self.gpus = 0
        self.pool = None

    def add(self, msg: Telemetry) -> None:
        host = msg.host
        values = list(_host_values(host)) if host is not None else [None] * len(HOST_METRICS)
        gpus = msg.gpus
        columns = zip(*map(_node_gpu_values, gpus)) if gpus else [()] * len(NODE_GPU_METRICS)
        for (_, _, how), column in zip(NODE_GPU_METRICS, columns):
            vals = [v for v in column if v is not None] if None in column else column
            values.append((sum(vals) / len(vals) if how == "mean" else sum(vals)) if vals else None)
        self.stats.add(values)
        self.samples += 1
        self.gpus = max(self.gpus, len(gpus))
        self.pool = msg.pool

    def to_state(self) -> dict:
        return {"stats": self.stats.to_state(), "samples": self.samples, "gpus": self.gpus, "pool": self.pool}

    @classmethod
    def from_state(cls, state: dict) -> NodeMinute:
        acc = cls.__new__(cls)
        try:
            acc.stats = Stats.from_state(state["stats"], len(NODE_METRICS))
            acc.samples, acc.gpus, acc.pool = state["samples"], state["gpus"], state["pool"]
        except KeyError as err:
            raise StateError(f"node minute: saved state lacks {err}") from None
        return acc


class MinuteRollups:
    """The open minute of one node: the node's accumulator and one per GPU."""

    __slots__ = ("minute", "node", "gpus")

    def __init__(self):
        self.minute: int | None = None
        self.node = NodeMinute()
        self.gpus: dict[str, GpuMinute] = {}

    def add(self, msg: Telemetry, out: Output, default_interval_s: float = 5.0) -> None:
        """One message; a GPU's rented time in a minute adds the interval of each sample with a tenant."""
        minute = int(msg.ts // 60) * 60
        if minute != self.minute:
            if self.minute is not None:
                self.close(msg.node, out)
            self.minute = minute
        self.node.add(msg)
        gpus, interval_ms = self.gpus, round((msg.interval_s or default_interval_s) * 1000)
        for g in msg.gpus:
            acc = gpus.get(g.uuid)
            if acc is None:
                acc = gpus[g.uuid] = GpuMinute()
            acc.add(g, interval_ms)

    def close(self, node: str, out: Output) -> None:
        """Emit the open minute's rows and start empty."""
        if self.minute is None:
            return
        minute, pool = self.minute, self.node.pool or ""
        for uuid, acc in self.gpus.items():
            index, model, tenant, job = acc.last
            out.row(GPU_ROLLUP, (minute, node, pool, uuid, index, model, tenant, job,
                                 acc.samples, *acc.stats.columns(), acc.throttled, acc.xids, acc.rented_ms))
        n = self.node
        out.row(NODE_ROLLUP, (minute, node, pool, n.samples, n.gpus, *n.stats.columns()))
        self.minute, self.node, self.gpus = None, NodeMinute(), {}

    def to_state(self) -> dict:
        return {"minute": self.minute, "node": self.node.to_state(),
                "gpus": {u: g.to_state() for u, g in self.gpus.items()}}

    @classmethod
    def from_state(cls, state: dict) -> MinuteRollups:
        r = cls.__new__(cls)
        try:
            r.minute = state["minute"]
            r.node = NodeMinute.from_state(state["node"])
            r.gpus = {u: GpuMinute.from_state(g) for u, g in state["gpus"].items()}
        except KeyError as err:
            raise StateError(f"minute rollups: saved state lacks {err}") from None
        return r
