"""Silences: matchers and a time span during which the alerts they match are not told (recorded
``silenced``). They live in the store (table ``silences``), so every router process applies them;
``gpufleet silence add|list|expire`` manages them. Expiring writes a newer version of the row that
ends now (the table keeps the latest version of each id).
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

from .matchers import Matcher

COLUMNS = ("id", "matchers", "starts_at", "ends_at", "created_by", "comment", "updated_at")


@dataclass(frozen=True)
class Silence:
    id: str
    matchers: tuple[Matcher, ...]
    starts_at: float
    ends_at: float
    created_by: str = ""
    comment: str = ""

    def active(self, now: float) -> bool:
        return self.starts_at <= now < self.ends_at

    def matches(self, values: dict[str, str]) -> bool:
        return all(m.matches(values) for m in self.matchers)

    def state(self, now: float) -> str:
        return "active" if self.active(now) else ("pending" if now < self.starts_at else "expired")


def _ms(t: float) -> int:
    return round(t * 1000)


def _row(s: Silence, updated_at: float) -> tuple:
    return (s.id, [str(m) for m in s.matchers], _ms(s.starts_at), _ms(s.ends_at), s.created_by, s.comment,
            _ms(updated_at))


def add(store, matchers: list[Matcher], duration_s: float, comment: str = "", created_by: str = "",
        starts_at: float | None = None) -> Silence:
    """Store a new silence; returns it."""
    if not matchers:
        raise ValueError("a silence needs at least one matcher")
    if duration_s <= 0:
        raise ValueError("a silence needs a positive duration")
    now = time.time()
    start = now if starts_at is None else starts_at
    silence = Silence(str(uuid.uuid4()), tuple(matchers), start, start + duration_s, created_by, comment)
    store.write("silences", COLUMNS, [_row(silence, now)], dedup=False)
    return silence


def load(store, include_expired: bool = False, now: float | None = None) -> list[Silence]:
    """Silences in the store, the latest version of each: those active or still to start, or all."""
    now = time.time() if now is None else now
    rows = store.query(
        "SELECT id, matchers, toUnixTimestamp64Milli(starts_at), toUnixTimestamp64Milli(ends_at), created_by, "
        "comment FROM silences FINAL" + ("" if include_expired else " WHERE ends_at > fromUnixTimestamp64Milli("
                                          "toInt64(%(now)s))") + " ORDER BY starts_at, id",
        {"now": _ms(now)})
    out = []
    for sid, matchers, starts, ends, by, comment in rows:
        try:
            parsed = tuple(Matcher.parse(m) for m in (matchers if isinstance(matchers, list) else json.loads(matchers)))
        except ValueError:
            continue                           # written by a newer gpufleet with a label this one lacks
        out.append(Silence(sid, parsed, starts / 1000, ends / 1000, by, comment))
    return out


def find(store, prefix: str) -> Silence:
    """The silence whose id is ``prefix`` or starts with it (at least 4 characters); ValueError if none or several."""
    if len(prefix) < 4:
        raise ValueError(f"{prefix!r}: give at least 4 characters of the id")
    found = [s for s in load(store, include_expired=True) if s.id.startswith(prefix)]
    if not found:
        raise ValueError(f"no silence {prefix!r}")
    if len(found) > 1:
        raise ValueError(f"{prefix!r} matches {len(found)} silences: give more of the id")
    return found[0]


def expire(store, prefix: str) -> Silence:
    """End a silence now; returns it as it ends."""
    silence = find(store, prefix)
    now = time.time()
    if silence.ends_at <= now:
        raise ValueError(f"silence {silence.id} has already ended")
    ended = Silence(silence.id, silence.matchers, min(silence.starts_at, now), now, silence.created_by,
                    silence.comment)
    store.write("silences", COLUMNS, [_row(ended, now)], dedup=False)
    return ended
