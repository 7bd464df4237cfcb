"""Metering: every rented GPU-second of one node into billing records (``gpufleet.billing.v1``).

Each GPU's samples arrive here in ts order (eventtime.py), right after the idle tracker has seen them. A
sample covers its interval (``interval_s``). When the next sample of the same GPU has the same tenant and
comes within three intervals (the idle rule's continuous telemetry), the sample's time runs up to it instead,
and the part beyond its own interval counts as estimated when at least one sample is missing (more than 1.5
intervals). Time is cut at billing-period boundaries and kept per (period, tenant, job): rented, busy and
idle milliseconds (integers: busy + idle = rented exactly), estimated and unbilled milliseconds, samples,
and utilization sums.

Idle is the idle rule's (idle.py), read from the tracker's open runs: the time of a run's samples is held
as undecided until the run reaches the idle window (then idle) or ends short of it (then busy). A run's
last sample is idle up to its own end (``ts + interval``), so the idle seconds of a GPU equal its idle
windows' seconds, millisecond for millisecond.

A gap longer than three intervals within one tenant's rental is billed as estimated busy time, or recorded
as unbilled, by ``billing.gap_policy``: ``bill``; ``evidence`` (the default: billed when the node's
collector, the same process before and after the gap, reports the loss itself, by a ``seq`` jump or a
``dropped`` count, so the node was up and the tenant held the GPU; a restarted collector or a GPU missing
from messages that did arrive is not billed); ``skip``. Gaps longer than ``billing.max_gap_s`` are never
billed.

A period's record of a GPU is emitted once this node's processed samples have passed the period's end and
nothing in it is undecided any more: no sample whose time may still run into it, and no idle run that
overlaps it and has not yet reached the window or ended (at most the idle window later). The end of input
emits every record.
"""
from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple, Protocol

from gpufleet.contracts.events import BILLING_SCHEMA
from gpufleet.contracts.output import Output
from gpufleet.contracts.state import StateError, load_fields, save_fields
from gpufleet.contracts.telemetry import Telemetry

from ..config import StreamConfig
from .metered import Metered
from .prices import Tariff, money

INF = float("inf")


class IdleRun(Protocol):
    """What metering reads of an idle run (streams/idle.py, which runs before it on the same samples)."""

    start: float                  # ts of its first sample
    detected: float | None        # ts of the sample that completed the idle window, None while it has not
UTIL_SCALE = 1000          # utilization kept in thousandths of a percent: sums of util x ms stay integers


def _record_key(rec: Record) -> tuple[int, str, str]:
    return rec.period_start, rec.tenant, rec.job


def _ms(t: float) -> int:
    return round(t * 1000)


@dataclass(slots=True)
class Sample:
    """A GPU's latest rented sample, whose time is not attributed yet (it depends on the next sample)."""

    ts: float
    interval: float
    start: int                 # ms where its time begins: its ts, or later where the previous sample's reached
    tenant: str
    job: str
    util: int | None           # thousandths of a percent
    pool: str | None
    model: str | None
    index: int
    mig_profile: str | None

    @property
    def end(self) -> int:
        """ms where its own interval ends (as the idle tracker computes a run's end)."""
        return _ms(self.ts + self.interval)


class Estimate(NamedTuple):
    """Time without a reading (a sample missing, or a gap billed): priced at its neighbours' mean utilization
    (``near``, thousandths of a percent; None: unknown), and idle for pricing where both neighbours are idle."""

    near: int | None
    gap_idle: bool = False


class Gap(NamedTuple):
    """Up to the next sample of the same tenant, after a gap longer than three intervals: billed if ``fill`` (and
    not too long) as an :class:`Estimate`."""

    to: float
    fill: bool
    near: int | None
    both_idle: bool


COUNTERS = ("interval_ms", "samples", "rented", "busy", "idle", "undecided", "estimated", "unbilled", "topup",
            "util_sum", "util_ms", "busy_util_sum", "busy_util_ms", "open_util_sum", "open_util_ms",
            "price_util_sum", "price_util_ms", "price_busy_sum", "price_busy_ms", "price_open_sum", "price_open_ms",
            "gap_idle", "gap_idle_sum")
(INTERVAL_MS, SAMPLES, RENTED, BUSY, IDLE, UNDECIDED, ESTIMATED, UNBILLED, TOPUP, UTIL_SUM, UTIL_MS, BUSY_UTIL_SUM,
 BUSY_UTIL_MS, OPEN_UTIL_SUM, OPEN_UTIL_MS, PRICE_UTIL_SUM, PRICE_UTIL_MS, PRICE_BUSY_SUM, PRICE_BUSY_MS,
 PRICE_OPEN_SUM, PRICE_OPEN_MS, GAP_IDLE, GAP_IDLE_SUM) = range(len(COUNTERS))
# added with usage-billing semantics (issue 51): a saved state without them takes them from the measured sums
_PRICE_FROM = {"price_util_sum": "util_sum", "price_util_ms": "util_ms", "price_busy_sum": "busy_util_sum",
               "price_busy_ms": "busy_util_ms", "price_open_sum": "open_util_sum", "price_open_ms": "open_util_ms",
               "gap_idle": None, "gap_idle_sum": None}
_ZEROS = array("q", bytes(8 * len(COUNTERS)))


class _Counter:
    """A record's counter by name, in its array."""

    __slots__ = ("i",)

    def __init__(self, name: str) -> None:
        self.i = COUNTERS.index(name)

    def __get__(self, rec: Record, owner: type | None = None) -> int:
        return rec.c[self.i]

    def __set__(self, rec: Record, value: int) -> None:
        rec.c[self.i] = value


class Record:
    """One GPU's time in one billing period for one tenant and job, in milliseconds.

    The counters (``COUNTERS``, read by name: ``rec.busy``) are kept in one array of 64-bit integers: fifteen
    Python integers above 256 took 32 bytes each and a slot 8 more (a record held 530 bytes; 280 now). Utilization
    is summed as thousandths of a percent x ms: 100,000 x a month of milliseconds is far inside 64 bits, and an
    array refuses a value that is not (OverflowError) rather than wrap it.

    - ``undecided``: in an idle run that has not reached the window yet;
    - ``util_sum``, ``util_ms``: the sum of util x ms over the time with a reading, and that time; ``busy_*`` of
      the busy time, ``open_*`` of the undecided time;
    - ``price_*``: the same sums with the estimated time (billed across a telemetry gap) at its neighbours' mean
      utilization: what usage billing prices (the ``util_*`` sums stay those of the readings);
    - ``gap_idle``, ``gap_idle_sum``: estimated time of a gap between two idle samples (busy for the idle rule,
      which a gap ends, but idle for pricing and waste), and its util x ms at the neighbours' mean."""

    __slots__ = ("period_start", "tenant", "job", "pool", "model", "index", "mig_profile", "c")

    def __init__(self, period_start: int, tenant: str, job: str, pool: str | None, model: str | None, index: int,
                 mig_profile: str | None) -> None:
        self.period_start = period_start          # Unix seconds
        self.tenant, self.job, self.pool, self.model, self.index = tenant, job, pool, model, index
        self.mig_profile = mig_profile
        self.c = array("q", _ZEROS)

    interval_ms, samples, rented, busy, idle = (_Counter(n) for n in COUNTERS[:5])
    undecided, estimated, unbilled, topup = (_Counter(n) for n in COUNTERS[5:9])
    util_sum, util_ms, busy_util_sum, busy_util_ms, open_util_sum, open_util_ms = (_Counter(n) for n in COUNTERS[9:15])
    price_util_sum, price_util_ms, price_busy_sum, price_busy_ms, price_open_sum, price_open_ms = (
        _Counter(n) for n in COUNTERS[15:21])
    gap_idle, gap_idle_sum = (_Counter(n) for n in COUNTERS[21:])

    def settle(self, idle: bool) -> None:
        """The idle run this record's undecided time belongs to is decided."""
        c = self.c
        if idle:
            c[IDLE] += c[UNDECIDED]
        else:
            c[BUSY] += c[UNDECIDED]
            c[BUSY_UTIL_SUM] += c[OPEN_UTIL_SUM]
            c[BUSY_UTIL_MS] += c[OPEN_UTIL_MS]
            c[PRICE_BUSY_SUM] += c[PRICE_OPEN_SUM]
            c[PRICE_BUSY_MS] += c[PRICE_OPEN_MS]
        c[UNDECIDED] = c[OPEN_UTIL_SUM] = c[OPEN_UTIL_MS] = c[PRICE_OPEN_SUM] = c[PRICE_OPEN_MS] = 0

    def to_state(self) -> dict:
        return {"period_start": self.period_start, "tenant": self.tenant, "job": self.job, "pool": self.pool,
                "model": self.model, "index": self.index, "mig_profile": self.mig_profile,
                **dict(zip(COUNTERS, self.c.tolist()))}

    @classmethod
    def from_state(cls, state: dict) -> Record:
        state = {**{k: state.get(v, 0) if v else 0 for k, v in _PRICE_FROM.items()}, **state}
        names = (*cls.__slots__[:-1], *COUNTERS)
        missing = [n for n in names if n not in state]
        unknown = [k for k in state if k not in names]
        if missing or unknown:
            raise StateError(f"billing record: saved state lacks {missing} or has unknown fields {unknown}")
        rec = cls(*(state[n] for n in cls.__slots__[:-1]))
        try:
            rec.c = array("q", [state[n] for n in COUNTERS])
        except (TypeError, OverflowError):
            raise StateError(f"billing record: saved counters {COUNTERS} must be 64-bit integers") from None
        return rec


class GpuMeter:
    """One GPU's metering state."""

    __slots__ = ("pending", "run_start", "run_idle", "rental_ms", "records")

    def __init__(self) -> None:
        self.pending: Sample | None = None
        self.run_start: int | None = None      # ms of the first sample of the idle run its pending sample is in
        self.run_idle = False                  # that run has reached the idle window
        self.rental_ms = 0                     # billed time of the current rental so far
        self.records: list[Record] = []       # a list, not a dict by key: a GPU has one or two open at a time

    def resolve(self) -> None:
        """The open idle run ended (or reached the window): its held time becomes idle or busy."""
        for rec in self.records:
            if rec.c[UNDECIDED]:
                rec.settle(self.run_idle)
        self.run_start, self.run_idle = None, False

    def to_state(self) -> dict:
        return {"pending": None if self.pending is None else save_fields(self.pending), "run_start": self.run_start,
                "run_idle": self.run_idle, "rental_ms": self.rental_ms,
                "records": [r.to_state() for r in self.records]}

    @classmethod
    def from_state(cls, state: dict) -> GpuMeter:
        m = cls()
        try:
            pending = state["pending"]
            m.pending = None if pending is None else load_fields(Sample, pending, "metered sample")
            m.run_start, m.run_idle, m.rental_ms = state["run_start"], state["run_idle"], state["rental_ms"]
            m.records = [Record.from_state(r) for r in state["records"]]
        except KeyError as err:
            raise StateError(f"GPU meter: saved state lacks {err}") from None
        return m

    def record(self, period_start: int, tenant: str, job: str) -> Record | None:
        """The open record of this tenant and job for the period starting at ``period_start`` (seconds)."""
        for rec in self.records:
            if rec.period_start == period_start and rec.job == job and rec.tenant == tenant:
                return rec
        return None


class Metering:
    """The meters of one node's GPUs, by GPU uuid, and what the node's collector said last."""

    __slots__ = ("gpus", "node_ts", "collector", "seq", "due", "emitted")

    def __init__(self) -> None:
        self.emitted: list[dict] = []           # the records emitted since the node last took them (not saved)
        self.gpus: dict[str, GpuMeter] = {}
        self.node_ts: float | None = None      # ts of the latest message processed
        self.collector: str | None = None
        self.seq: int | None = None
        self.due = INF                          # ms: the earliest end of a period with a record

    def add(self, msg: Telemetry, runs: Mapping[str, IdleRun], cfg: StreamConfig, tariff: Tariff, out: Output) -> None:
        """One message, after the idle tracker: ``runs`` are its open runs by GPU uuid."""
        bc = tariff.config
        period = bc.period_s * 1000
        ts, node_ts, gpus = msg.ts, self.node_ts, self.gpus
        interval = msg.interval_s or cfg.default_interval_s
        lost = msg.collector_id is not None and msg.collector_id == self.collector and (
            (msg.seq is not None and self.seq is not None and msg.seq > self.seq + 1) or bool(msg.dropped))
        ts_ms = _ms(ts)
        for g in msg.gpus:
            tenant = g.tenant
            m = gpus.get(g.uuid)
            if m is None:
                if tenant is None:
                    continue                       # not rented and nothing pending: nothing to meter
                m = gpus[g.uuid] = GpuMeter()
            start, a = ts_ms, m.pending
            run = runs.get(g.uuid)
            if a is not None:
                util = g.util_pct
                after = None if util is None else round(util * UTIL_SCALE)
                if tenant == a.tenant and ts - a.ts <= 3 * a.interval:
                    goes_on = run is not None and m.run_start is not None and _ms(run.start) == m.run_start
                    start = self._continue(m, a, ts, goes_on, period, _between(a.util, after))
                else:
                    fill = tenant == a.tenant and (bc.gap_policy == "bill" or (
                        bc.gap_policy == "evidence" and lost and node_ts == a.ts))
                    idle_pct = cfg.idle_threshold_pct * UTIL_SCALE
                    both_idle = a.util is not None and after is not None and a.util < idle_pct and after < idle_pct
                    gap = Gap(ts, fill, _between(a.util, after), both_idle) if tenant == a.tenant else None
                    self._break(m, a, gap, tariff, period)
            if tenant is None:
                m.pending = None
            else:
                util = g.util_pct
                m.pending = Sample(ts, interval, start, tenant, g.job or "", None if util is None else
                                   round(util * UTIL_SCALE), msg.pool, g.model, g.index, g.mig_profile)
                if run is not None:
                    rs = _ms(run.start)
                    if m.run_start != rs:
                        m.run_start, m.run_idle = rs, False
                    if run.detected is not None and not m.run_idle:
                        m.run_idle = True
                        m.resolve()
                        m.run_start, m.run_idle = rs, True
        for m in gpus.values():                     # GPUs this message does not carry
            a = m.pending
            if a is not None and ts - a.ts > 3 * a.interval and a.ts != ts:
                self._break(m, a, None, tariff, period)
                m.pending = None
        self.node_ts, self.collector, self.seq = ts, msg.collector_id, msg.seq
        if ts_ms >= self.due:
            self._emit(ts_ms, msg.node, tariff, out)

    # -- time into records ----------------------------------------------------
    def _continue(self, m: GpuMeter, a: Sample, ts: float, goes_on: bool, period: int, near: int | None) -> int:
        """The next sample continues ``a``'s rental within three intervals: ``a``'s time runs up to it. Returns
        where the next sample's time begins. ``near``: the neighbours' mean utilization, which prices the time
        estimated where a sample is missing."""
        missing = ts - a.ts > 1.5 * a.interval
        if m.run_start is not None and not goes_on:
            # ``a`` ends its idle run: idle (or undecided) to its own end, busy from there to the next sample
            end, upto = a.end, max(_ms(ts), a.end)
            self._time(m, a, a.start, end, True, period)
            self._time(m, a, end, upto, False, period, Estimate(near) if missing else None)
            m.resolve()
            return upto
        upto = _ms(ts)
        cut = a.end if missing else upto
        self._time(m, a, a.start, min(cut, upto), m.run_start is not None, period)
        if missing:
            self._time(m, a, cut, upto, m.run_start is not None, period, Estimate(near))
        return upto

    def _break(self, m: GpuMeter, a: Sample, gap: Gap | None, tariff: Tariff, period: int) -> None:
        """``a``'s rental does not continue within three intervals: ``a`` covers its own interval. ``gap``: up to
        the next sample of the same tenant, after a longer gap (None: none comes)."""
        end = a.end
        self._time(m, a, a.start, end, m.run_start is not None, period)
        if m.run_start is not None:
            m.resolve()
        if gap is not None:
            upto = _ms(gap.to)
            if gap.fill and upto - end <= tariff.config.max_gap_s * 1000:
                self._time(m, a, end, upto, False, period, Estimate(gap.near, gap.both_idle))
                return                               # the rental goes on
            self._unbilled(m, a, end, upto, period)
        minimum = tariff.minimum_ms(a.pool, a.model, end / 1000)
        if m.rental_ms < minimum:
            rec = self._record(m, (end - 1) // period * period, a, period)
            rec.topup += minimum - m.rental_ms
        m.rental_ms = 0

    def _time(self, m: GpuMeter, a: Sample, lo: int, hi: int, in_run: bool, period: int,
              estimate: Estimate | None = None) -> None:
        """Attribute [lo, hi) ms of ``a``'s tenant and job: to its idle run (idle once the run reached the window,
        undecided before) or busy; cut at period boundaries. Time with an ``estimate`` has no reading: it is priced
        at its neighbours' mean utilization, and idle for pricing where its gap is idle."""
        if lo >= hi:
            return
        estimated = estimate is not None
        near, gap_idle = (estimate.near, estimate.gap_idle) if estimate is not None else (None, False)
        util = None if estimated else a.util
        priced = near if estimated else util
        idle, count = in_run and m.run_idle, not estimated and lo == a.start
        interval_ms, tenant, job = round(a.interval * 1000), a.tenant, a.job
        while lo < hi:
            p = lo - lo % period
            cut = hi if hi <= p + period else p + period
            ms = cut - lo
            c = (m.record(p // 1000, tenant, job) or self._open(m, p, a, period)).c
            if count:
                c[SAMPLES] += 1
                count = False
            c[RENTED] += ms
            c[INTERVAL_MS] = interval_ms
            m.rental_ms += ms
            if estimated:
                c[ESTIMATED] += ms
            if priced is not None:
                weighted = priced * ms
                c[PRICE_UTIL_SUM] += weighted
                c[PRICE_UTIL_MS] += ms
                if idle:
                    pass
                elif in_run:
                    c[PRICE_OPEN_SUM] += weighted
                    c[PRICE_OPEN_MS] += ms
                else:
                    c[PRICE_BUSY_SUM] += weighted
                    c[PRICE_BUSY_MS] += ms
            if gap_idle:
                c[GAP_IDLE] += ms
                c[GAP_IDLE_SUM] += (100 * UTIL_SCALE if priced is None else priced) * ms
            if util is not None:
                weighted = util * ms
                c[UTIL_SUM] += weighted
                c[UTIL_MS] += ms
                if idle:
                    c[IDLE] += ms
                elif in_run:
                    c[UNDECIDED] += ms
                    c[OPEN_UTIL_SUM] += weighted
                    c[OPEN_UTIL_MS] += ms
                else:
                    c[BUSY] += ms
                    c[BUSY_UTIL_SUM] += weighted
                    c[BUSY_UTIL_MS] += ms
            elif idle:
                c[IDLE] += ms
            elif in_run:
                c[UNDECIDED] += ms
            else:
                c[BUSY] += ms
            lo = cut

    def _unbilled(self, m: GpuMeter, a: Sample, lo: int, hi: int, period: int) -> None:
        while lo < hi:
            p = lo - lo % period
            cut = min(hi, p + period)
            self._record(m, p, a, period).unbilled += cut - lo
            lo = cut

    def _record(self, m: GpuMeter, p: int, a: Sample, period: int) -> Record:
        """The record of ``a``'s tenant and job for the period starting at ``p`` ms."""
        return m.record(p // 1000, a.tenant, a.job) or self._open(m, p, a, period)

    def _open(self, m: GpuMeter, p: int, a: Sample, period: int) -> Record:
        """A new record of ``a``'s tenant and job for the period starting at ``p`` ms (none is open)."""
        rec = Record(p // 1000, a.tenant, a.job, a.pool, a.model, a.index, a.mig_profile)
        m.records.append(rec)
        if p + period < self.due:
            self.due = p + period
        return rec

    # -- records out ------------------------------------------------------------
    def _emit(self, upto: float, node: str, tariff: Tariff, out: Output) -> None:
        """Emit every record whose period ended by ``upto`` (ms) and holds nothing undecided."""
        period = tariff.config.period_s * 1000
        due = INF
        for uuid in list(self.gpus):
            m = self.gpus[uuid]
            limit = upto
            if m.pending is not None:
                limit = min(limit, m.pending.start)
            if m.run_start is not None and not m.run_idle:
                limit = min(limit, m.run_start)
            records, gone = m.records, False
            for rec in sorted(records, key=_record_key):
                end = rec.period_start * 1000 + period
                if end <= limit:
                    event = _event(uuid, node, rec, tariff)
                    out.event(event)
                    self.emitted.append(event)
                    out.counts["billing_records"] += 1
                    gone = True
                elif end < due:
                    due = end
            if gone:
                m.records = [r for r in records if r.period_start * 1000 + period > limit]
            if m.pending is None and m.run_start is None and not m.records:
                del self.gpus[uuid]
        self.due = due

    def flush(self, node: str, tariff: Tariff, out: Output) -> None:
        """End of input: every sample covers its own interval, open runs are decided as the idle tracker
        leaves them (idle if they reached the window), and every record is emitted."""
        period = tariff.config.period_s * 1000
        for m in self.gpus.values():
            a = m.pending
            if a is not None:
                self._time(m, a, a.start, a.end, m.run_start is not None, period)
                m.pending = None
            if m.run_start is not None:
                m.resolve()
        self._emit(INF, node, tariff, out)

    # -- saved state -----------------------------------------------------------
    def to_state(self) -> dict:
        return {"gpus": {u: m.to_state() for u, m in self.gpus.items()}, "node_ts": self.node_ts,
                "collector": self.collector, "seq": self.seq}

    @classmethod
    def from_state(cls, state: dict) -> Metering:
        if not isinstance(state, dict):
            raise StateError("metering: saved state is not a mapping")
        mt = cls()
        try:
            mt.gpus = {u: GpuMeter.from_state(m) for u, m in state["gpus"].items()}
            mt.node_ts, mt.collector, mt.seq = state["node_ts"], state["collector"], state["seq"]
        except KeyError as err:
            raise StateError(f"metering: saved state lacks {err}") from None
        mt.due = 0 if mt.gpus else INF         # looked at again with the next message
        return mt


def _seconds(ms: int) -> float:
    return ms / 1000


def _between(before: int | None, after: int | None) -> int | None:
    """The neighbours' mean utilization (thousandths of a percent), or the one known, or None."""
    if before is None or after is None:
        return after if before is None else before
    return (before + after + 1) // 2


def exact_seconds(ms: Fraction | int) -> str:
    """Utilization-weighted milliseconds as seconds with 8 decimals, exactly (util is kept in thousandths of a
    percent, so util x ms / 100,000 has at most 5 decimals in ms, 8 in seconds)."""
    units = Fraction(ms) * 100_000
    if units.denominator != 1:
        raise ValueError(f"{ms} ms is not a whole number of 10 ns")
    n = int(units)
    sign = "-" if n < 0 else ""
    n = abs(n)
    return f"{sign}{n // 10**8}.{n % 10**8:08d}"


def _event(uuid: str, node: str, r: Record, tariff: Tariff) -> dict:
    """A ``gpufleet.billing.v1`` event of one record (money as decimal strings, never floats)."""
    bc = tariff.config
    share = tariff.share(r.model, r.mig_profile)
    idle_ms = r.idle
    scale = 100 * UTIL_SCALE
    # what usage billing prices: each millisecond at its utilization (estimated time at its neighbours' mean;
    # time without any reading in full); the gaps between idle samples count as idle
    gap_weighted = Fraction(r.gap_idle_sum, scale)
    busy_weighted = Fraction(r.price_busy_sum, scale) + (r.busy - r.price_busy_ms) - gap_weighted
    idle_weighted = (Fraction(r.price_util_sum - r.price_busy_sum, scale)
                     + (idle_ms - (r.price_util_ms - r.price_busy_ms)) + gap_weighted)
    metered = Metered(
        period_start=r.period_start, period_s=bc.period_s, rented_ms=r.rented, busy_ms=r.busy, idle_ms=idle_ms,
        topup_ms=r.topup, busy_weighted_ms=busy_weighted, idle_weighted_ms=idle_weighted, gap_idle_ms=r.gap_idle)
    bill = tariff.bill(metered, r.tenant, r.pool, r.model, share)
    quality = "incomplete" if r.unbilled else "estimated" if r.estimated else "measured"
    return {
        "schema": BILLING_SCHEMA, "tenant": r.tenant, "pool": r.pool, "gpu_uuid": uuid, "job": r.job or None,
        "gpu_model": r.model, "period_start": r.period_start, "period_end": r.period_start + bc.period_s,
        "rented_s": _seconds(r.rented), "busy_s": _seconds(r.busy), "idle_s": _seconds(idle_ms),
        "price_per_gpu_hour": bill["price_per_gpu_hour"], "amount": bill["amount"],
        "idle_amount": bill["idle_amount"], "currency": bc.currency,
        "node": node, "gpu_index": r.index, "mig_profile": r.mig_profile,
        "gpu_share": money(share),
        "team": tariff.team_of(r.tenant, r.job) or None, "billing_mode": bill["billing_mode"],
        "samples": r.samples, "interval_s": _seconds(r.interval_ms), "estimated_s": _seconds(r.estimated),
        "unbilled_s": _seconds(r.unbilled), "minimum_topup_s": _seconds(r.topup), "data_quality": quality,
        "util_pct": round(r.util_sum / r.util_ms / UTIL_SCALE, 3) if r.util_ms else None,
        "busy_util_pct": round(r.busy_util_sum / r.busy_util_ms / UTIL_SCALE, 3) if r.busy_util_ms else None,
        "amounts_by_mode": bill["amounts_by_mode"],
        "underused_s": _seconds(bill["underused_ms"]), "unused_amount": bill["unused_amount"],
        "unsold_amount": bill["unsold_amount"],
        "price_version": tariff.version(r.tenant, r.pool, r.model, r.period_start),
        "busy_weighted_s": exact_seconds(busy_weighted), "idle_weighted_s": exact_seconds(idle_weighted),
        "estimated_idle_s": _seconds(r.gap_idle),
    }
