"""What every section's reads share: the window of a read, parameters, times and money as the view writes them,
and the base of the reads (the store, its lock, one read per key per answer)."""
from __future__ import annotations

import datetime as dt
import math
import threading
import time
from dataclasses import dataclass
from decimal import Decimal

from gpufleet.contracts.waste import UNDERUSE_PCT

CENT = Decimal("0.000001")
BUCKETS = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


class ViewError(ValueError):
    """A bad parameter (HTTP 400, exit code 2), with a message that names it."""


@dataclass(frozen=True)
class Window:
    """A period of the view: ``[start, end)`` in Unix seconds, optionally one tenant's only."""

    start: float
    end: float
    tenant: str | None = None

    def __post_init__(self):
        if not self.end > self.start:
            raise ViewError(f"the period must end after it starts ({iso(self.start)} to {iso(self.end)})")

    @property
    def hours(self) -> float:
        return (self.end - self.start) / 3600

    def params(self) -> dict:
        p: dict[str, object] = {"start": int(self.start), "end": int(math.ceil(self.end)), "start_s": float(self.start),
             "end_s": float(self.end)}
        if self.tenant is not None:
            p["tenant"] = self.tenant
        return p

    def tenant_filter(self, column: str = "tenant") -> str:
        return f" AND {column} = %(tenant)s" if self.tenant is not None else ""


def parse_time(text: str, name: str = "to") -> float:
    """``YYYY-MM-DD[THH:MM[:SS]]`` (UTC, a trailing ``Z`` allowed) or Unix seconds."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        try:
            parsed = dt.datetime.fromisoformat(text.removesuffix("Z").replace(" ", "T"))
        except ValueError:
            raise ViewError(f"{name}: {text!r} is neither YYYY-MM-DD[THH:MM] nor Unix seconds") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        value = parsed.timestamp()
    if not 0 < value < 4102444800:     # 2100-01-01
        raise ViewError(f"{name}: {text!r} is not a time between 1970 and 2100")
    return value


def parse_hours(text: str, name: str = "hours", most: float = 24 * 93) -> float:
    try:
        hours = float(text)
    except ValueError:
        raise ViewError(f"{name}: {text!r} is not a number of hours") from None
    if not 0 < hours <= most:
        raise ViewError(f"{name}: {hours:g} is not between 0 and {most:g} hours")
    return hours


def iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def month_start(ts: float) -> float:
    d = dt.datetime.fromtimestamp(ts, dt.UTC)
    return dt.datetime(d.year, d.month, 1, tzinfo=dt.UTC).timestamp()


def next_month(ts: float) -> float:
    d = dt.datetime.fromtimestamp(ts, dt.UTC)
    return dt.datetime(d.year + d.month // 12, d.month % 12 + 1, 1, tzinfo=dt.UTC).timestamp()


def money(value) -> str:
    return str(Decimal(value).quantize(CENT))


def bucket_for(seconds: float, columns: int) -> int:
    """The smallest bucket of :data:`BUCKETS` that cuts ``seconds`` into at most ``columns``."""
    for b in BUCKETS:
        if seconds / b <= columns:
            return b
    return int(math.ceil(seconds / columns / 86400)) * 86400


def _s(ms) -> float | None:
    return None if ms is None else ms / 1000


def _round(v, digits: int = 2):
    return None if v is None else round(float(v), digits)


def _count_kinds(incidents: list[dict]) -> dict:
    counts: dict[str, dict[str, int]] = {}
    for a in incidents:
        c = counts.setdefault(a["kind"], {"firing": 0, "resolved": 0})
        c[a["status"]] += 1
    return counts


class Reads:
    """The store behind the reads of one answer (see :class:`gpufleet.view.data.FleetData`)."""

    def __init__(self, store, currency: str = "USD", alert_days: float = 7.0, lock: threading.Lock | None = None,
                 silent_after_s: float = 600.0, underuse_pct: float = UNDERUSE_PCT, price_note: str | None = None):
        self.store, self.currency, self.alert_days = store, currency, alert_days
        self.silent_after_s, self.underuse_pct, self.price_note = silent_after_s, underuse_pct, price_note
        self.lock = lock or threading.Lock()
        self._memo: dict[tuple, object] = {}

    def _rows(self, sql: str, params: dict | None = None) -> list[tuple]:
        with self.lock:
            return self.store.query(sql, params)

    def _once(self, key: tuple, make):
        """One read per ``key`` for the life of this object (a page asks for the incidents three times)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    # -- when -------------------------------------------------------------------
    def latest(self) -> float | None:
        """The end of the latest minute of telemetry stored (answered from the parts' min-max index)."""
        (value,) = self._rows("SELECT toUnixTimestamp(max(minute)) FROM gpu_rollup_1m")[0]
        return float(value) + 60 if value else None

    def window(self, to: float | None, hours: float, tenant: str | None = None) -> Window:
        """The ``hours`` up to ``to``, or up to the latest telemetry (the wall clock when there is none)."""
        if to is None:
            to = self.latest() or math.floor(time.time() / 60) * 60
        return Window(to - hours * 3600, to, tenant)

    def _no_telemetry(self, w: Window) -> str:
        latest = self.latest()
        who = f" for tenant {w.tenant}" if w.tenant else ""
        if latest is None:
            return ("no telemetry in the store yet: start the collectors and the workers, or fill it with "
                    "`gpufleet replay FILE` or `gpufleet demo`")
        return f"no telemetry{who} between {iso(w.start)} and {iso(w.end)} (the latest is of {iso(latest)})"

    def _gpu_indexes(self, uuids: list[str], w: Window) -> dict[str, int]:
        if not uuids:
            return {}
        rows = self._rows("SELECT gpu_uuid, any(gpu_index) FROM gpu_rollup_1m WHERE gpu_uuid IN %(uuids)s AND "
                          "minute >= toDateTime(%(start)s) AND minute < toDateTime(%(end)s) GROUP BY gpu_uuid",
                          {**w.params(), "uuids": tuple(sorted(set(uuids)))})
        return {u: int(i) for u, i in rows}
