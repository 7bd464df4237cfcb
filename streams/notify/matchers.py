"""An alert's labels, matchers on them (routes and silences) and durations as routing files write them."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# what routes, silences and grouping can look at; ``gpu`` is the alert's gpu_uuid
LABELS = ("kind", "severity", "tenant", "pool", "node", "job", "gpu")
OPS = ("=~", "!~", "!=", "=")      # longest first, so "=~" is not read as "="


def labels(alert: dict) -> dict[str, str]:
    """The labels of a ``gpufleet.alert.v1`` event; a missing value is ``''``."""
    return {"kind": alert.get("kind") or "", "severity": alert.get("severity") or "",
            "tenant": alert.get("tenant") or "", "pool": alert.get("pool") or "", "node": alert.get("node") or "",
            "job": alert.get("job") or "", "gpu": alert.get("gpu_uuid") or ""}


@dataclass(frozen=True)
class Matcher:
    """``name op value``: equality (``=``, ``!=``) or a regular expression matching the whole value
    (``=~``, ``!~``), as in Alertmanager."""

    name: str
    op: str
    value: str
    regex: re.Pattern | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.name not in LABELS:
            raise ValueError(f"unknown label {self.name!r} (one of {', '.join(LABELS)})")
        if self.op not in OPS:
            raise ValueError(f"unknown operator {self.op!r} (one of =, !=, =~, !~)")
        if self.op in ("=~", "!~"):
            try:
                object.__setattr__(self, "regex", re.compile(self.value))
            except re.error as err:
                raise ValueError(f"{self.value!r} is not a regular expression: {err}") from None

    @classmethod
    def parse(cls, text: str) -> Matcher:
        """``kind=idle``, ``tenant!=acme``, ``pool=~h100-.*``, ``node!~gpu-0[1-4]``."""
        name = re.match(r"^\s*([A-Za-z_]+)\s*", text)
        if not name:
            raise ValueError(f"{text!r} is not LABEL=VALUE (or !=, =~, !~)")
        rest = text[name.end():]
        for op in OPS:
            if rest.startswith(op):
                return cls(name.group(1), op, rest[len(op):])
        raise ValueError(f"{text!r} is not LABEL=VALUE (or !=, =~, !~)")

    def matches(self, values: dict[str, str]) -> bool:
        v = values.get(self.name, "")
        if self.regex is not None:
            return bool(self.regex.fullmatch(v)) == (self.op == "=~")
        return (v == self.value) == (self.op == "=")

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"


_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


def parse_duration(value: str | int | float) -> float:
    """Seconds from ``90``, ``"30s"``, ``"5m"``, ``"1h30m"``, ``"2d"`` or ``"500ms"``."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION.match(value.strip())
        if not value.strip() or not m or not any(m.groups()):
            raise ValueError(f"{value!r} is not a duration such as 30s, 5m, 4h, 1h30m, 2d or 500ms")
        d, h, mi, s, ms = m.groups()
        seconds = (int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60 + float(s or 0)
                   + int(ms or 0) / 1000)
    if seconds < 0:
        raise ValueError(f"{value!r} is negative")
    return seconds


@dataclass(frozen=True)
class InhibitRule:
    """Alertmanager's inhibition: while an alert matching every ``source`` matcher fires, the alerts matching every
    ``target`` matcher that share its values of the ``equal`` labels (both empty counts as equal) are not told. An
    alert matching both sides is never muted by another that matches both (nor by itself)."""

    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]
    name: str = ""

    def is_source(self, values: dict[str, str]) -> bool:
        return all(m.matches(values) for m in self.source)

    def is_target(self, values: dict[str, str]) -> bool:
        return all(m.matches(values) for m in self.target)

    def key(self, values: dict[str, str]) -> tuple[str, ...]:
        return tuple(values.get(name, "") for name in self.equal)

    def mutes(self, source: dict[str, str], target: dict[str, str]) -> bool:
        """Whether firing ``source`` mutes ``target`` under this rule."""
        if not (self.is_target(target) and self.is_source(source) and self.key(source) == self.key(target)):
            return False
        return not (self.is_source(target) and self.is_target(source))

    def __str__(self) -> str:
        return ((f"{self.name}: " if self.name else "") +
                f"{{{', '.join(map(str, self.source))}}} mutes {{{', '.join(map(str, self.target))}}}" +
                (f" with equal {', '.join(self.equal)}" if self.equal else ""))


# the built-in rule (``[inhibit] node_over_gpu``): a node-level incident mutes the GPU-level ones of its kind there
NODE_OVER_GPU = InhibitRule((Matcher("node", "!=", ""), Matcher("gpu", "=", "")), (Matcher("gpu", "!=", ""),),
                            ("kind", "node"), name="node_over_gpu")
