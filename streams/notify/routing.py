"""The routing file (TOML): receivers, the routing tree and inhibition, read and checked once at start.

The tree works as Alertmanager's: every alert enters at ``[route]``; its children are tried in order
and the first that matches takes the alert, unless it says ``continue = true``, in which case the
next ones are tried too; a route none of whose children match takes the alert itself. A child
inherits its parent's receiver, ``group_by`` and timers unless it sets them. Alerts that reach the
same route and receiver with the same values of the ``group_by`` labels form a group: the group's
first notification waits ``group_wait`` (to gather what comes together), later ones at least
``group_interval`` after the last, and firing alerts are told again every ``repeat_interval`` by
receivers that remind (Slack, Alertmanager). ``group_by = ["..."]`` makes every incident its own group.

A route matches with ``match`` (label = value) and ``match_re`` (label = regular expression matching
the whole value) on the labels kind, severity, tenant, pool, node, job and gpu. A receiver reached by
two routes of one alert is told once, by the first.

``[[inhibit_rules]]`` (``source_matchers``, ``target_matchers``, ``equal``) are Alertmanager's; the built-in
``[inhibit] node_over_gpu`` is one more rule (see :data:`matchers.NODE_OVER_GPU`).
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpufleet.contracts.files import FileError, read_toml

from .matchers import LABELS, NODE_OVER_GPU, InhibitRule, Matcher, labels, parse_duration
from .receivers import RECEIVERS, Receiver, RoutesError

DEFAULTS = {"group_wait": 30.0, "group_interval": 300.0, "repeat_interval": 4 * 3600.0}
LINK_FIELDS = (*LABELS, "id", "dedup_key", "status")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class RouteSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    receiver: str | None = None
    match: dict[str, str] = {}
    match_re: dict[str, str] = {}
    continue_: bool = Field(False, alias="continue")
    group_by: list[str] | None = None
    group_wait: float | None = None
    group_interval: float | None = None
    repeat_interval: float | None = None
    routes: list[RouteSpec] = []

    @field_validator("match", "match_re")
    @classmethod
    def _labels(cls, v: dict[str, str], info) -> dict[str, str]:
        for name, value in v.items():
            Matcher(name, "=~" if info.field_name == "match_re" else "=", value)    # raises naming the problem
        return v

    @field_validator("group_by")
    @classmethod
    def _group_by(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and v != ["..."]:
            unknown = [n for n in v if n not in LABELS]
            if unknown:
                raise ValueError(f"unknown label {unknown[0]!r} (one of {', '.join(LABELS)}, or [\"...\"] for all)")
        return v

    @field_validator("group_wait", "group_interval", "repeat_interval", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float | None:
        if v is None:
            return None
        seconds = parse_duration(v)
        if seconds > 30 * 86400:
            raise ValueError(f"{v!r} is longer than 30 days")
        return seconds


class InhibitSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    node_over_gpu: bool = Field(True, description="a firing node-level incident mutes the GPU-level ones of the "
                                                  "same kind on that node")


class InhibitRuleSpec(BaseModel):
    """One ``[[inhibit_rules]]`` table, as Alertmanager writes it."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    source_matchers: list[str] = Field(min_length=1)
    target_matchers: list[str] = Field(min_length=1)
    equal: list[str] = []

    @field_validator("source_matchers", "target_matchers")
    @classmethod
    def _matchers(cls, v: list[str]) -> list[str]:
        for text in v:
            Matcher.parse(text)                  # raises naming the problem
        return v

    @field_validator("equal")
    @classmethod
    def _equal(cls, v: list[str]) -> list[str]:
        unknown = [n for n in v if n not in LABELS]
        if unknown:
            raise ValueError(f"unknown label {unknown[0]!r} (one of {', '.join(LABELS)})")
        return v

    def rule(self, name: str) -> InhibitRule:
        return InhibitRule(tuple(map(Matcher.parse, self.source_matchers)),
                           tuple(map(Matcher.parse, self.target_matchers)), tuple(self.equal), name)


class RoutingFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    route: RouteSpec
    receivers: dict[str, dict[str, Any]]
    inhibit: InhibitSpec = InhibitSpec()
    inhibit_rules: list[InhibitRuleSpec] = []
    operator_url: str | None = Field(None, description="link to the operator view, with {node}, {gpu}, {job}, ... "
                                                       "filled from the alert")

    @field_validator("operator_url")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r} is not an http(s) URL")
        try:
            names = [f for _, f, _, _ in string.Formatter().parse(v) if f is not None]
        except ValueError as err:
            raise ValueError(f"not a template: {err}") from None
        unknown = [n for n in names if n not in LINK_FIELDS]
        if unknown:
            raise ValueError(f"unknown field {{{unknown[0]}}} (one of {', '.join(LINK_FIELDS)})")
        return v


@dataclass(frozen=True)
class Route:
    """A route with what it inherited filled in."""

    path: str
    receiver: str
    matchers: tuple[Matcher, ...]
    cont: bool
    group_by: tuple[str, ...] | None        # None: every label (each incident its own group)
    group_wait: float
    group_interval: float
    repeat_interval: float
    children: tuple[Route, ...]

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(frozen=True)
class Match:
    """Where one alert goes: a route, its receiver, and the group it joins there."""

    route: Route
    receiver: str
    group_key: str
    group: dict[str, str]


class Routes:
    def __init__(self, root: Route, receivers: dict[str, Receiver], node_over_gpu: bool = True,
                 operator_url: str | None = None, inhibit_rules: tuple[InhibitRule, ...] = ()):
        self.root, self.receivers = root, receivers
        self.inhibit_rules = ((NODE_OVER_GPU,) if node_over_gpu else ()) + tuple(inhibit_rules)
        self.operator_url_template = operator_url
        for route in root.walk():
            if route.receiver not in receivers:
                raise ValueError(f"{route.path}.receiver: unknown receiver {route.receiver!r}")

    # -- reading the file --------------------------------------------------------
    @classmethod
    def load(cls, path: str, build: bool = True) -> Routes:
        """Read and check a routing file; raises :class:`RoutesError` with one line naming the setting.
        ``build=False`` checks the file without reading any secret."""
        try:
            raw = read_toml(path)
        except FileError as err:
            raise RoutesError(f"routes file {err}") from None
        try:
            return cls.parse(raw, build=build)
        except RoutesError as err:
            raise RoutesError(f"routes file {path}: {err}") from None

    @classmethod
    def parse(cls, raw: dict, build: bool = True) -> Routes:
        try:
            spec = RoutingFile.model_validate(raw)
        except ValidationError as err:
            raise RoutesError(_describe(err)) from None
        receivers: dict[str, Receiver] = {}
        link = _link(spec.operator_url)
        for name, config in spec.receivers.items():
            if not _NAME.match(name):
                raise RoutesError(f"receivers.{name}: a receiver's name is letters, digits, '_', '.' or '-'")
            kind = RECEIVERS.get(str(config.get("type")))
            if kind is None:
                raise RoutesError(f"receivers.{name}.type: {config.get('type')!r} is not one of "
                                  f"{', '.join(sorted(RECEIVERS))}")
            try:
                checked = kind.Config.model_validate(config)
            except ValidationError as err:
                raise RoutesError(_describe(err, f"receivers.{name}")) from None
            if build:
                receivers[name] = kind(name, checked, link)
            else:
                receivers[name] = _Unbuilt(name, checked)
        if spec.route.receiver is None:
            raise RoutesError("route.receiver: the root route needs a receiver")
        if spec.route.match or spec.route.match_re:
            raise RoutesError("route.match: the root route takes every alert and cannot match")
        root = _resolve(spec.route, "route", None)
        try:
            return cls(root, receivers, spec.inhibit.node_over_gpu, spec.operator_url,
                       tuple(r.rule(f"inhibit_rules[{i}]") for i, r in enumerate(spec.inhibit_rules)))
        except ValueError as err:
            raise RoutesError(str(err)) from None

    # -- routing -------------------------------------------------------------------
    def match(self, alert: dict) -> list[Match]:
        values = labels(alert)
        out: list[Match] = []
        seen: set[str] = set()
        for route in _matching(self.root, values):
            if route.receiver in seen:
                continue
            seen.add(route.receiver)
            if route.group_by is None:
                group = {**values, "incident": alert.get("dedup_key", "")}
            else:
                group = {name: values[name] for name in route.group_by}
            key = f"{route.path}|{route.receiver}|" + ",".join(f"{k}={v}" for k, v in sorted(group.items()))
            out.append(Match(route, route.receiver, key, group))
        return out

    def describe(self) -> list[str]:
        """The tree, one line a route, for ``gpufleet notify --check``."""
        lines = []
        for route in self.root.walk():
            depth = route.path.count(".")
            cond = " ".join(map(str, route.matchers)) or "(every alert)"
            lines.append(f"{'  ' * depth}{cond} -> {route.receiver} [{self.receivers[route.receiver].config.type}]"
                         f"{' continue' if route.cont else ''}; group_by "
                         f"{'...' if route.group_by is None else ','.join(route.group_by) or '(none)'}, wait "
                         f"{route.group_wait:g}s, interval {route.group_interval:g}s, "
                         f"repeat {route.repeat_interval:g}s")
        return lines


class _Unbuilt(Receiver):
    """A receiver checked but not built (no secret read): for ``--check`` without the environment."""

    kind = "unbuilt"

    def __init__(self, name: str, config):
        self.name, self.config, self.secrets = name, config, {}

    def requests(self, notification) -> list:
        raise RuntimeError(f"receiver {self.name} was only checked (no secret read): it does not deliver")


def _matching(route: Route, values: dict[str, str]) -> list[Route]:
    if not all(m.matches(values) for m in route.matchers):
        return []
    found: list[Route] = []
    for child in route.children:
        below = _matching(child, values)
        if below:
            found += below
            if not child.cont:
                break
    return found or [route]


def _resolve(spec: RouteSpec, path: str, parent: Route | None) -> Route:
    def inherit(name: str) -> float:
        own = getattr(spec, name)
        return own if own is not None else (getattr(parent, name) if parent else DEFAULTS[name])

    if spec.group_by is not None:
        group_by: tuple[str, ...] | None = None if spec.group_by == ["..."] else tuple(spec.group_by)
    else:
        group_by = parent.group_by if parent else ()
    matchers = tuple([Matcher(k, "=", v) for k, v in spec.match.items()] +
                     [Matcher(k, "=~", v) for k, v in spec.match_re.items()])
    receiver = spec.receiver or (parent.receiver if parent else "")
    route = Route(path, receiver, matchers, spec.continue_, group_by, inherit("group_wait"),
                  inherit("group_interval"), inherit("repeat_interval"), ())
    children = tuple(_resolve(child, f"{path}.routes[{i}]", route) for i, child in enumerate(spec.routes))
    return Route(path, receiver, matchers, spec.continue_, group_by, route.group_wait, route.group_interval,
                 route.repeat_interval, children)


def _link(template: str | None):
    if template is None:
        return None

    def render(alert: dict) -> str:
        values = {**labels(alert), "id": alert.get("id", ""), "dedup_key": alert.get("dedup_key", ""),
                  "status": alert.get("status", "")}
        return template.format_map({k: quote(str(v), safe="") for k, v in values.items()})
    return render


def _describe(err: ValidationError, prefix: str = "") -> str:
    e = err.errors(include_url=False)[0]
    path = prefix
    for part in e["loc"]:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + str(part)
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        msg = "unknown setting"
    return f"{path}: {msg}" if path else msg
