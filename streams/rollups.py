"""One-minute rollups per GPU and per node: mean, min and max of each metric.

A node's minute closes when its (ordered) sample stream enters a later minute,
or at the end of input. Per-tenant and per-pool rollups are not computed here:
ClickHouse derives them from the per-GPU rows (materialized views).
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable
from operator import attrgetter

import numpy as np

from gpufleet.contracts import tables
from gpufleet.contracts.output import Output
from gpufleet.contracts.state import StateError
from gpufleet.contracts.telemetry import BENIGN_CLOCK_EVENTS, PHYSICAL_EXTENSIVE, Telemetry

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


GPU_ROLLUP, NODE_ROLLUP = tables.GPU_ROLLUP_1M, tables.NODE_ROLLUP_1M
# the rows are laid out by the metrics' statistics (Stats.columns): the layout must be the tables'
for _table, _layout in ((GPU_ROLLUP, ("minute", "node", "pool", "gpu_uuid", "gpu_index", "model", "tenant", "job",
                                      "samples", *_stat_columns(GPU_METRICS), "throttled_samples", "xid_events",
                                      "rented_ms")),
                        (NODE_ROLLUP, ("minute", "node", "pool", "samples", "gpus", *_stat_columns(NODE_METRICS)))):
    if _table.columns != _layout:
        raise ValueError(f"{_table.name}: the rollup's row layout {_layout} is not the table's {_table.columns} "
                         "(gpufleet/contracts/tables.py)")

NAN = float("nan")
_GPU_PHYSICAL = tuple(i for i, m in enumerate(GPU_METRICS) if m in PHYSICAL_EXTENSIVE)
_NODE_PHYSICAL = tuple(i for i, (_, m, _) in enumerate(NODE_GPU_METRICS) if m in PHYSICAL_EXTENSIVE)


def mig_shares(gpus) -> dict[str, float] | None:
    """Each MIG instance's share of its physical GPU's power and PCIe traffic (which every instance reports
    whole): split evenly over the instances of the GPU in the message, so that a sum over them, a node's or a
    pool's, counts each GPU once. None when no GPU is a MIG instance (the usual case)."""
    parents: dict[str, int] = {}
    for g in gpus:
        if g.parent_uuid is not None:
            parents[g.parent_uuid] = parents.get(g.parent_uuid, 0) + 1
    if not parents:
        return None
    return {g.uuid: 1.0 / parents[g.parent_uuid] for g in gpus if g.parent_uuid is not None}


def _shared(values: tuple, share: float, at: tuple[int, ...]) -> list:
    out = list(values)
    for i in at:
        if out[i] is not None:
            out[i] *= share
    return out
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


def _blank(k: int) -> tuple[np.ndarray, ...]:
    """``k`` empty rows of :class:`GpuMinutes`' per-metric arrays: values missing, sums, mins and maxes."""
    shape = (k, len(GPU_METRICS))
    return np.zeros(shape), np.full(shape, -0.0), np.full(shape, NAN), np.full(shape, NAN)


class GpuMinutes:
    """The open minute of a node's GPUs as columns: one row per GPU (in the order they appeared); per metric its
    sum, min and max as float arrays (NaN where a min or max has no value yet) and the samples that lacked it;
    per GPU its samples, throttled samples, XID events and rented time (the intervals of samples with a tenant).
    One message updates all its GPUs' rows with a few array operations, and no Python number is kept per value
    (a list per GPU of counts, sums, mins and maxes held about 1 kB a GPU: its sums' floats and the samples'
    floats its mins and maxes kept alive). Sums add the same values in the same order as a loop would, from -0.0
    (adding it changes nothing), so the means are the same to the last bit."""

    __slots__ = ("rows", "uuids", "last", "miss", "sum", "min", "max", "samples", "throttled", "xids", "rented_ms")
    WIDTH = len(GPU_METRICS)

    def __init__(self) -> None:
        self._start([], [])

    def _start(self, uuids: list[str], last: list[tuple]) -> None:
        """Rows for these GPUs (their latest samples' ``last``), all empty."""
        k = len(uuids)
        self.uuids, self.last = uuids, last               # last: index, model, tenant, job of the latest sample
        self.rows = {u: i for i, u in enumerate(uuids)}
        self.samples, self.throttled, self.xids, self.rented_ms = (array("q", bytes(8 * k)) for _ in range(4))
        self.miss, self.sum, self.min, self.max = _blank(k)

    def _grow(self, uuid: str) -> int:
        i = self.rows[uuid] = len(self.uuids)
        self.uuids.append(uuid)
        self.last.append(())
        for counts in (self.samples, self.throttled, self.xids, self.rented_ms):
            counts.append(0)
        self.miss, self.sum, self.min, self.max = (np.vstack(pair) for pair in zip(
            (self.miss, self.sum, self.min, self.max), _blank(1)))
        return i

    def add(self, gpus, interval_ms: int) -> None:
        uuids = [g.uuid for g in gpus]
        if uuids == self.uuids:
            at: slice | list[int] = slice(None)           # the usual case: the same GPUs in the same order
            rows: Iterable[int] = range(len(uuids))
        else:
            index = self.rows
            at = rows = [index[u] if u in index else self._grow(u) for u in uuids]
        last, samples, throttled, xids, rented = self.last, self.samples, self.throttled, self.xids, self.rented_ms
        flat: list = []
        shares = mig_shares(gpus)
        for i, g in zip(rows, gpus):
            if shares is None or g.uuid not in shares:
                flat += _gpu_values(g)
            else:
                flat += _shared(_gpu_values(g), shares[g.uuid], _GPU_PHYSICAL)
            last[i] = (g.index, g.model or "", g.tenant or "", g.job or "")
            samples[i] += 1
            if g.throttle_reasons and g.throttle_reasons & ~BENIGN_CLOCK_EVENTS:
                throttled[i] += 1
            if g.xid_events:
                xids[i] += len(g.xid_events)
            if g.tenant is not None:
                rented[i] += interval_ms
        try:
            v = np.frombuffer(array("d", flat)).reshape(len(gpus), -1)
            seen = None
        except TypeError:                                # a value is missing (None): as NaN, skipped in sums
            v = np.array(flat, dtype=np.float64).reshape(len(gpus), -1)
            seen = v == v
        if type(at) is slice:                            # in place
            if seen is None:
                np.add(self.sum, v, out=self.sum)
            else:
                np.add(self.miss, 1.0, out=self.miss, where=~seen)
                np.add(self.sum, v, out=self.sum, where=seen)
            np.fmin(self.min, v, out=self.min)
            np.fmax(self.max, v, out=self.max)
        else:                                            # the rows of the message's GPUs, each once
            if seen is None:
                self.sum[at] += v
            else:
                self.miss[at] += ~seen
                total = self.sum[at]
                np.add(total, v, out=total, where=seen)
                self.sum[at] = total
            self.min[at] = np.fmin(self.min[at], v)
            self.max[at] = np.fmax(self.max[at], v)

    def _counts(self) -> np.ndarray:
        """Each GPU's values of each metric this minute."""
        return np.frombuffer(self.samples, dtype=np.int64)[:, None] - self.miss

    def emit(self, head: tuple, out: Output) -> None:
        """A row per GPU with samples this minute: ``head`` (minute, node, pool), the GPU's latest index, model,
        tenant and job, its samples, each metric's mean, min and max (None without a value) and its counts; then
        the rows start the next minute empty (a GPU without samples this minute loses its row)."""
        whole = not self.miss.any()                      # every sample had every value: no NaN in a GPU's row
        stats = np.empty((len(self.uuids), self.WIDTH, 3))
        with np.errstate(invalid="ignore", divide="ignore"):
            np.divide(self.sum, self._counts(), out=stats[:, :, 0])      # 0 / 0 is NaN: no value
        stats[:, :, 1], stats[:, :, 2] = self.min, self.max
        for uuid, last, samples, throttled, xids, rented_ms, row in zip(
                self.uuids, self.last, self.samples, self.throttled, self.xids, self.rented_ms,
                stats.reshape(len(self.uuids), 3 * self.WIDTH).tolist()):
            if samples:
                out.row(GPU_ROLLUP, (*head, uuid, *last, samples, *(row if whole else
                                                                   [None if x != x else x for x in row]),
                                     throttled, xids, rented_ms))
        if all(self.samples):
            self.miss.fill(0.0)
            self.sum.fill(-0.0)
            self.min.fill(NAN)
            self.max.fill(NAN)
            zeros = array("q", bytes(8 * len(self.uuids)))
            self.samples[:], self.throttled[:], self.xids[:], self.rented_ms[:] = zeros, zeros, zeros, zeros
        else:
            kept = [i for i, n in enumerate(self.samples) if n]
            self._start([self.uuids[i] for i in kept], [self.last[i] for i in kept])

    def to_state(self) -> dict:
        """Per GPU with samples: its statistics (count, sum, min and max of each metric, 0 where none), counts
        and latest sample's index, model, tenant and job."""
        n = self._counts()
        blank = n == 0
        cols = [c.tolist() for c in (n.astype(np.int64), np.where(blank, 0.0, self.sum),
                                     np.where(blank, 0.0, self.min), np.where(blank, 0.0, self.max))]
        out = {}
        for i, (uuid, last) in enumerate(zip(self.uuids, self.last)):
            if self.samples[i]:
                index, model, tenant, job = last
                out[uuid] = {"stats": {k: c[i] for k, c in zip(("n", "sum", "min", "max"), cols)},
                             "samples": self.samples[i], "throttled": self.throttled[i], "xids": self.xids[i],
                             "rented_ms": self.rented_ms[i], "index": index, "model": model, "tenant": tenant,
                             "job": job}
        return out

    @classmethod
    def from_state(cls, state: dict) -> GpuMinutes:
        acc = cls()
        width = cls.WIDTH
        try:
            for uuid, g in state.items():
                i = acc._grow(uuid)
                stats = g["stats"]
                cols = [c for c in (stats.get(k) for k in ("n", "sum", "min", "max"))
                        if isinstance(c, list) and len(c) == width]
                if len(cols) != 4:
                    raise StateError(f"rollup statistics: saved state needs n, sum, min and max of {width} "
                                     "metrics each")
                acc.last[i] = (g["index"], g["model"], g["tenant"], g["job"])
                try:
                    acc.samples[i], acc.throttled[i], acc.xids[i] = g["samples"], g["throttled"], g["xids"]
                    acc.rented_ms[i] = g["rented_ms"]
                    seen = [bool(x) for x in cols[0]]
                    acc.miss[i] = [g["samples"] - x for x in cols[0]]
                    acc.sum[i] = [v if s else -0.0 for v, s in zip(cols[1], seen)]
                    acc.min[i] = [v if s else NAN for v, s in zip(cols[2], seen)]
                    acc.max[i] = [v if s else NAN for v, s in zip(cols[3], seen)]
                except (TypeError, ValueError, OverflowError):
                    raise StateError(f"GPU minute of {uuid}: saved counts and statistics must be numbers") from None
        except KeyError as err:
            raise StateError(f"GPU minute: saved state lacks {err}") from None
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
        shares = mig_shares(gpus)
        rows = map(_node_gpu_values, gpus) if shares is None else (
            _shared(_node_gpu_values(g), shares[g.uuid], _NODE_PHYSICAL) if g.uuid in shares else _node_gpu_values(g)
            for g in gpus)
        columns = zip(*rows) if gpus else [()] * len(NODE_GPU_METRICS)
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
        self.gpus = GpuMinutes()

    def add(self, msg: Telemetry, out: Output, default_interval_s: float = 5.0) -> None:
        """One message; a GPU's rented time in a minute adds the interval of each sample with a tenant."""
        minute = int(msg.ts // 60) * 60
        if minute != self.minute:
            if self.minute is not None:
                self.close(msg.node, out)
            self.minute = minute
        self.node.add(msg)
        if msg.gpus:
            self.gpus.add(msg.gpus, round((msg.interval_s or default_interval_s) * 1000))

    def close(self, node: str, out: Output) -> None:
        """Emit the open minute's rows and start empty."""
        if self.minute is None:
            return
        minute, pool = self.minute, self.node.pool or ""
        self.gpus.emit((minute, node, pool), out)       # and starts the next minute with this one's GPUs
        n = self.node
        out.row(NODE_ROLLUP, (minute, node, pool, n.samples, n.gpus, *n.stats.columns()))
        self.minute, self.node = None, NodeMinute()

    def to_state(self) -> dict:
        return {"minute": self.minute, "node": self.node.to_state(),
                "gpus": self.gpus.to_state()}

    @classmethod
    def from_state(cls, state: dict) -> MinuteRollups:
        r = cls.__new__(cls)
        try:
            r.minute = state["minute"]
            r.node = NodeMinute.from_state(state["node"])
            r.gpus = GpuMinutes.from_state(state["gpus"])
        except KeyError as err:
            raise StateError(f"minute rollups: saved state lacks {err}") from None
        return r
