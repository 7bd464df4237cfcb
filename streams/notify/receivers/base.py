"""What every receiver is: its settings (checked when the routing file is read), how it turns a
notification into HTTP requests, and how it reads the answer. Sending (rate limits, retries, dead
letters, the delivery log) is the sender's job, the same for all.

Secrets (webhook URLs, routing keys, signing keys) are never written in the routing file: a setting
``<name>_env`` names an environment variable, ``<name>_file`` a file, and the value is read at start.
Receivers never put a secret in a log line or an error: :meth:`Receiver.mask` removes them.
"""
from __future__ import annotations

import os
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.contracts.files import FileError, read_text

from ..http import Response


class RoutesError(ValueError):
    """A routing file that cannot be used: one line naming the setting."""


class ReceiverConfig(BaseModel):
    """Settings every receiver has; a receiver's module adds its own."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # secret name -> whether it is required; each is given as <name>_env or <name>_file
    secrets: ClassVar[dict[str, bool]] = {}

    type: str
    rate_per_s: float | None = Field(None, ge=0, le=10_000,
                                     description="requests a second at most (0: no limit; default: the receiver's)")
    burst: int | None = Field(None, ge=1, le=10_000, description="requests allowed at once beyond the rate")
    timeout_s: float | None = Field(None, gt=0, le=300, description="HTTP timeout (default: notify.timeout_s)")
    send_resolved: bool = Field(True, description="tell this receiver when an incident resolves")
    send_updates: bool | None = Field(None, description="tell this receiver when an open incident's numbers move on "
                                                        "(duration, amount so far; every 30 min at most); default: "
                                                        "yes for alertmanager and webhook, no for slack and pagerduty "
                                                        "(a change of severity is always told)")

    @model_validator(mode="before")
    @classmethod
    def _secrets_not_in_clear(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name, required in cls.secrets.items():
            if name in data:
                raise ValueError(f"{name}: a secret is never written in the routing file; name an environment "
                                 f"variable ({name}_env) or a file ({name}_file) that holds it")
            given = [k for k in (f"{name}_env", f"{name}_file") if data.get(k)]
            if len(given) > 1:
                raise ValueError(f"{name}: give {name}_env or {name}_file, not both")
            if required and not given:
                raise ValueError(f"{name}_env or {name}_file is required")
        return data


def url_problem(url: str) -> str | None:
    """Why ``url`` is not one a receiver can be sent to (an http or https URL with a host), or None."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(url.strip())
        parts.port                                   # noqa: B018 -- a port that is not a number raises here
    except ValueError as err:
        return f"not a URL ({err})"
    if parts.scheme not in ("http", "https"):
        return "not an http(s) URL" if parts.scheme else "not a URL (no http:// or https://)"
    if not parts.hostname:
        return "a URL without a host"
    return None


def checked_url(where: str, url: str) -> str:
    """``url`` if a receiver can be sent to it; else :class:`RoutesError` naming ``where`` (the value is not
    repeated: it may hold a token)."""
    problem = url_problem(url)
    if problem:
        raise RoutesError(f"{where}: {problem}")
    return url.strip()


def read_secret(receiver: str, config: BaseModel, name: str) -> str | None:
    """The value of secret ``name`` from the environment variable or file its settings name."""
    var, path = getattr(config, f"{name}_env", None), getattr(config, f"{name}_file", None)
    where = f"receivers.{receiver}.{name}_env" if var else f"receivers.{receiver}.{name}_file"
    if var:
        value = os.environ.get(var, "").strip()
        if not value:
            raise RoutesError(f"{where}: environment variable {var} is not set")
        return checked_url(f"{where} ({var})", value) if name == "url" else value
    if path:
        try:
            value = read_text(path, 64 << 10).strip()         # a secret is a line; a file of 64 KiB is not one
        except FileError as err:
            raise RoutesError(f"{where}: {err}") from None
        if not value:
            raise RoutesError(f"{where}: {path} is empty")
        return checked_url(f"{where} ({path})", value) if name == "url" else value
    return None


@dataclass(frozen=True)
class Notification:
    """What one group owes one receiver now: alerts in order (firing and resolved), or, for a
    reminder, the firing alerts already told, again."""

    receiver: str
    group: dict[str, str]
    alerts: list[dict]
    reminder: bool = False


@dataclass
class Request:
    url: str
    body: bytes
    headers: dict[str, str]
    alerts: list[int] = field(default_factory=list)     # positions in Notification.alerts it carries


@dataclass(frozen=True)
class Verdict:
    outcome: Literal["delivered", "retry", "rate_limited", "rejected"]
    detail: str = ""
    retry_after_s: float | None = None


def retry_after(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - now())
    except (TypeError, ValueError, IndexError):
        return None


def classify(response: Response, detail: str | None = None) -> Verdict:
    """The usual reading of an HTTP answer: 2xx delivered, 429 rate limited, 408 and 5xx worth a
    retry, any other status rejected (a retry would get the same answer)."""
    status = response.status
    text = detail if detail is not None else f"HTTP {status}: {response.text.strip()[:500]}"
    if 200 <= status < 300:
        return Verdict("delivered")
    if status == 429:
        return Verdict("rate_limited", text, retry_after(response.headers.get("retry-after")))
    if status == 408 or status >= 500:
        return Verdict("retry", text)
    if 300 <= status < 400:
        return Verdict("rejected", f"HTTP {status}: redirected; point the receiver at the final address")
    return Verdict("rejected", text)


class Receiver(ABC):
    """One receiver: a name from the routing file and its settings. Subclasses set the class
    attributes and implement :meth:`requests`."""

    kind: ClassVar[str]
    Config: ClassVar[type[ReceiverConfig]]
    batch: ClassVar[int | None] = None        # alerts per request at most; None: a notification per request
    reminds: ClassVar[bool] = False           # repeats firing alerts every repeat_interval
    default_rate: ClassVar[tuple[float, int]] = (0.0, 1)   # requests a second (0: no limit), burst
    updates_by_default: ClassVar[bool] = False              # told when an open incident's numbers move on

    def __init__(self, name: str, config: ReceiverConfig, operator_url: Callable[[dict], str | None] | None = None):
        self.name, self.config = name, config
        self.operator_url = operator_url or (lambda alert: None)
        self.secrets: dict[str, str] = {}
        for secret in type(config).secrets:
            value = read_secret(name, config, secret)
            if value is not None:
                self.secrets[secret] = value

    @property
    def rate(self) -> tuple[float, int]:
        rate, burst = self.default_rate
        c = self.config
        return (c.rate_per_s if c.rate_per_s is not None else rate, c.burst if c.burst is not None else burst)

    @property
    def updates(self) -> bool:
        """Whether this receiver is told an open incident's updates (its severity unchanged)."""
        given = self.config.send_updates
        return self.updates_by_default if given is None else given

    @abstractmethod
    def requests(self, notification: Notification) -> list[Request]:
        """The HTTP requests that deliver ``notification`` to this receiver."""

    def sign(self, request: Request) -> dict[str, str]:
        """Headers computed at each attempt (a signature over a fresh timestamp); none by default."""
        return {}

    def verdict(self, response: Response) -> Verdict:
        return classify(response)

    def repeat_s(self, route_repeat_s: float) -> float | None:
        """How often firing alerts already told are told again, or None."""
        return route_repeat_s if self.reminds and route_repeat_s > 0 else None

    def mask(self, text: str) -> str:
        """``text`` without any of this receiver's secrets in it."""
        for value in self.secrets.values():
            if value:
                text = text.replace(value, "***")
        return text


def json_body(payload: Any) -> bytes:
    import json
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[:max(0, limit - 1)] + "…"


def iso(ts: float | None) -> str | None:
    """RFC 3339 UTC with milliseconds, as Alertmanager and PagerDuty read times."""
    if ts is None:
        return None
    import datetime as dt
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
