"""The ``underuse`` alert: one incident per rental (a job's GPUs on a node, for its tenant) while its billing periods
are underused, by the one definition of waste (gpufleet/contracts/waste.py), read from the billing records the
node's meter emits.

A rental's period is underused when most of its GPUs' busy time is, by the billing records (each GPU's busy time
below ``billing.underuse_pct`` mean utilization in the period); a period all idle continues an open incident (the
idle alerts say the rest). A period is decided once the node's
records have gone a period and an idle window past it (a GPU's record waits for its idle runs to be decided), so
the alert comes one to two periods after the underuse began. The money is the billing records': what the tenant
paid for the unused share (``unused_amount``), and what the provider lost where the tenant pays by use
(``unsold_amount``). Low severity (``info``): it goes to a chat channel or the tenant, never to a pager.
"""
from __future__ import annotations

from decimal import Decimal
from typing import NamedTuple

from gpufleet.contracts.events import Facts, Told, Where, alert
from gpufleet.contracts.output import Output
from gpufleet.contracts.state import StateError

KIND = "underuse"
MIN_SHARE = 0.25         # of a period, the busy time per GPU under which a rental's period says nothing either way


def _money(v: Decimal) -> str:
    return str(Decimal(v).quantize(Decimal("0.000001")))


class _Period:
    """One rental's billing records of one period, summed."""

    __slots__ = ("busy_s", "util_s", "idle_s", "underused_s", "unused", "unsold", "gpus", "price", "pool", "end",
                 "underused_gpus")

    def __init__(self) -> None:
        self.end = 0.0
        self.busy_s = self.util_s = self.idle_s = self.underused_s = 0.0
        self.unused = self.unsold = Decimal(0)
        self.gpus: set[str] = set()
        self.underused_gpus: set[str] = set()     # those with underused time in the period (the ledger's)
        self.price, self.pool = "0", None

    def add(self, e: dict) -> None:
        busy = float(e["busy_s"])
        self.busy_s += busy
        self.util_s += busy * (100.0 if e.get("busy_util_pct") is None else float(e["busy_util_pct"]))
        self.idle_s += float(e["idle_s"])
        underused = float(e.get("underused_s") or 0)
        self.underused_s += underused
        if underused > 0:
            self.underused_gpus.add(e["gpu_uuid"])
        self.unused += Decimal(e.get("unused_amount") or "0")
        self.unsold += Decimal(e.get("unsold_amount") or "0")
        self.gpus.add(e["gpu_uuid"])
        self.price, self.pool, self.end = e["price_per_gpu_hour"], e.get("pool"), float(e["period_end"])

    def util(self) -> float | None:
        return self.util_s / self.busy_s if self.busy_s else None

    def to_state(self) -> list:
        return [self.busy_s, self.util_s, self.idle_s, self.underused_s, str(self.unused), str(self.unsold),
                sorted(self.gpus), self.price, self.pool, self.end, sorted(self.underused_gpus)]

    @classmethod
    def from_state(cls, s: list) -> _Period:
        p = cls()
        (p.busy_s, p.util_s, p.idle_s, p.underused_s, unused, unsold, gpus, p.price, p.pool, p.end) = s[:10]
        p.unused, p.unsold, p.gpus = Decimal(unused), Decimal(unsold), set(gpus)
        p.underused_gpus = set(s[10]) if len(s) > 10 else set(gpus)      # saved before it was kept: all its GPUs
        return p


class _Incident:
    __slots__ = ("start", "detected", "hours", "util_s", "busy_s", "unused", "unsold", "gpus", "price", "pool",
                 "last_end", "span_s", "revision")

    def __init__(self, start: float, detected: float, last_end: float) -> None:
        self.start, self.detected, self.last_end = start, detected, last_end
        self.hours, self.util_s, self.busy_s, self.span_s = 0.0, 0.0, 0.0, 0.0
        self.unused = self.unsold = Decimal(0)
        self.gpus: set[str] = set()                # the GPUs with underused time in its periods
        self.price, self.pool = "0", None
        self.revision = 0                          # firing events after the first (one a period decided)

    def add(self, p: _Period, end: float) -> None:
        self.hours += (p.underused_s or p.busy_s) / 3600
        self.span_s += (p.busy_s + p.idle_s) / max(1, len(p.gpus))      # the rental's own time in the period
        self.util_s += p.util_s
        self.busy_s += p.busy_s
        self.unused += p.unused
        self.unsold += p.unsold
        self.gpus |= p.underused_gpus
        self.price, self.pool, self.last_end = p.price, p.pool or self.pool, end

    def util(self) -> float:
        return self.util_s / self.busy_s if self.busy_s else 0.0

    def to_state(self) -> list:
        return [self.start, self.detected, self.hours, self.util_s, self.busy_s, str(self.unused), str(self.unsold),
                sorted(self.gpus), self.price, self.pool, self.last_end, self.span_s, self.revision]

    @classmethod
    def from_state(cls, s: list) -> _Incident:
        i = cls(s[0], s[1], s[10])
        (_, _, i.hours, i.util_s, i.busy_s, unused, unsold, gpus, i.price, i.pool, i.last_end, i.span_s) = s[:12]
        i.unused, i.unsold, i.gpus = Decimal(unused), Decimal(unsold), set(gpus)
        i.revision = int(s[12]) if len(s) > 12 else 0        # saved before updates: none told
        return i


class _Ending(NamedTuple):
    """How an underuse incident ended: when, why (``evidence.resolution``) and why in words."""

    at: float
    reason: str
    why: str


class UnderuseTracker:
    """A node's rentals: their billing periods waiting to be decided, and their open underuse incidents."""

    __slots__ = ("periods", "open", "newest", "clock")

    def __init__(self) -> None:
        self.periods: dict[tuple[str, str], dict[int, _Period]] = {}   # (tenant, job) -> period start -> sums
        self.open: dict[tuple[str, str], _Incident] = {}
        self.newest = 0.0                                              # the latest period end seen on the node
        self.clock = 0.0                     # the node's latest time: when a decision is made (its detected_at)

    def add(self, node: str, records: list[dict], threshold_pct: float, slack_s: float, currency: str,
            out: Output, now: float | None = None) -> None:
        """The billing records the node's meter just emitted (and the node's time ``now``: a rental that ended
        emits none); decide the periods now far enough behind."""
        if now is not None:
            self.newest = max(self.newest, now)
            self.clock = max(self.clock, now)
        for e in records:
            key = (e["tenant"], e.get("job") or "")
            self.periods.setdefault(key, {}).setdefault(int(e["period_start"]), _Period()).add(e)
            self.newest = max(self.newest, float(e["period_end"]))
        self._decide(node, self.newest - slack_s, threshold_pct, currency, out)

    def _decide(self, node: str, upto: float, threshold_pct: float, currency: str, out: Output,
                ends: bool = True, tell: bool = True) -> set:
        """Decide the periods that ended by ``upto``. An incident is told once the decisions of one pass are made:
        fired if it opened in it, updated (its numbers now) if it went on; one that opened and ended within the
        same pass is never told (it was over before it could be: its waste is in the ledger all the same)."""
        opened: set = set()
        moved: set = set()
        for key in sorted(self.periods):
            periods = self.periods[key]
            for start in sorted(periods):
                p = periods[start]
                end = p.end
                if end > upto:
                    break
                del periods[start]
                util = p.util()
                inc = self.open.get(key)
                if p.busy_s < MIN_SHARE * (p.end - start) * len(p.gpus):
                    if inc is not None:              # mostly idle, or a short stay: says nothing either way
                        inc.add(p, float(end))
                        moved.add(key)
                    continue
                if 2 * p.underused_s >= p.busy_s:    # most of its GPU time underused, by the ledger's records
                    if inc is None:
                        inc = self.open[key] = _Incident(float(start), self.clock or self.newest, float(end))
                        opened.add(key)
                    inc.add(p, float(end))
                    moved.add(key)
                elif inc is not None:
                    self._resolve(node, key, _Ending(float(start), "cleared", f"most of its GPU time at "
                                                     f"{threshold_pct:g}% or more ({util:.0f}% on average)"),
                                  (threshold_pct, currency), out, told=key not in opened)
            if not periods:
                del self.periods[key]
        for key in [k for k, inc in self.open.items() if ends and k not in self.periods and inc.last_end + 1 < upto]:
            inc = self.open[key]        # no record of the rental since its last decided period: it ended
            self._resolve(node, key, _Ending(inc.last_end, "rental_ended", "rental ended"), (threshold_pct, currency),
                          out, told=key not in opened)
        for key in sorted(moved) if tell else ():
            inc = self.open.get(key)
            if inc is None:
                continue
            if key not in opened:
                inc.revision += 1                    # went on: its numbers now, no new page
            out.event(self._event(node, key, inc, "firing", threshold_pct, currency))
        return opened

    def _resolve(self, node: str, key, ending: _Ending, rule: tuple[float, str], out: Output,
                 told: bool = True) -> None:
        """The incident of ``key`` ended; a resolve is told where its firing was (``told``)."""
        inc = self.open.pop(key)
        if told:
            out.event(self._event(node, key, inc, "resolved", *rule, ending))

    def silence(self, node: str, last_ts: float, threshold_pct: float, currency: str, out: Output) -> None:
        """The node stopped reporting: its held periods are decided, then every open incident resolves, no telemetry
        since ``last_ts``."""
        untold = self._decide(node, float("inf"), threshold_pct, currency, out, ends=False, tell=False)
        for key in list(self.open):
            self._resolve(node, key, _Ending(last_ts, "no_telemetry", "no telemetry"), (threshold_pct, currency), out,
                          told=key not in untold)
        self.periods = {}

    def flush(self, node: str, threshold_pct: float, currency: str, out: Output) -> None:
        """End of input: decide every period held (open incidents stay open, as idle ones do)."""
        self._decide(node, float("inf"), threshold_pct, currency, out, ends=False)

    def _event(self, node: str, key: tuple[str, str], inc: _Incident, status: str, threshold_pct: float,
               currency: str, ending: _Ending | None = None) -> dict:
        resolved_at, reason, why = ending if ending is not None else (None, "", "")
        tenant, job = key
        who = f"Job {job}" if job else "A rental"
        gpus = len(inc.gpus)
        money = f"{_money(inc.unused)} {currency} of unused GPU time so far" if inc.unused else \
            f"{_money(inc.unsold)} {currency} unsold (billed by use) so far"
        span = inc.span_s / 3600
        if status == "firing":
            summary = (f"{who} on {node} (tenant {tenant}, {gpus} GPU{'s' if gpus != 1 else ''}) underused for "
                       f"{span:.1f} h: {inc.util():.0f}% utilization of its busy time, below {threshold_pct:g}%; "
                       f"{money} at {inc.price} {currency} per GPU-hour")
        else:
            summary = (f"{who} on {node} (tenant {tenant}) was underused for {span:.1f} h at "
                       f"{inc.util():.0f}%, {money}; ended: {why}")
        evidence = {"util_pct": round(inc.util(), 1), "threshold_pct": threshold_pct, "hours": round(span, 3),
                    "underused_gpu_hours": round(inc.hours, 3), "gpus": gpus, "unused_amount": _money(inc.unused),
                    "unsold_amount": _money(inc.unsold), "price_per_gpu_hour": inc.price, "currency": currency,
                    "through": round(inc.last_end, 3)}       # the numbers are those of the periods ended by then
        if reason:
            evidence["resolution"] = reason
        return alert(KIND, f"{node}:{tenant}:{job}", Facts(
            status=status, severity="info", where=Where(node=node, job=job or None, tenant=tenant, pool=inc.pool),
            started_at=inc.start, detected_at=inc.detected, resolved_at=resolved_at,
            score=round(max(0.0, 1 - inc.util() / threshold_pct), 4), told=Told(summary, evidence),
            revision=inc.revision, change="updated" if inc.revision and status == "firing" else None))

    def to_state(self) -> dict:
        return {"periods": [[t, j, [[s, p.to_state()] for s, p in ps.items()]] for (t, j), ps in self.periods.items()],
                "open": [[t, j, i.to_state()] for (t, j), i in self.open.items()], "newest": self.newest,
                "clock": self.clock}

    @classmethod
    def from_state(cls, state: dict) -> UnderuseTracker:
        u = cls()
        try:
            u.periods = {(t, j): {int(s): _Period.from_state(p) for s, p in ps} for t, j, ps in state["periods"]}
            u.open = {(t, j): _Incident.from_state(i) for t, j, i in state["open"]}
            u.newest = float(state["newest"])
            u.clock = float(state.get("clock", u.newest))
        except (KeyError, TypeError, ValueError) as err:
            raise StateError(f"underuse: saved state is not readable ({err})") from None
        return u

