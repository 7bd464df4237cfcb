"""A generic webhook: each alert event as JSON, signed.

Headers: ``X-Gpufleet-Timestamp`` (Unix seconds when this attempt was made), ``X-Gpufleet-Signature``
(``v1=`` and the hex HMAC-SHA256, keyed with the signing key, of ``<timestamp>.<body>``),
``X-Gpufleet-Delivery`` (``<alert id>:<step>``, the step ``firing``, ``firing.N`` for revision N or
``resolved``; the same on every attempt and after restarts: a
receiver keeps the first and drops repeats) and ``X-Gpufleet-Event`` (the schema). A receiver checks
the signature with :func:`verify` (or the few lines docs/alerting.md shows) and refuses timestamps older
than a few minutes, so a captured request cannot be replayed later.
"""
from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from typing import ClassVar, Literal

from pydantic import model_validator

from gpufleet import __version__

from ..outbox import step_of
from .base import Notification, Receiver, ReceiverConfig, Request, checked_url, json_body, read_secret

TOLERANCE_S = 300


def signature(key: str | bytes, timestamp: str, body: bytes) -> str:
    key = key.encode() if isinstance(key, str) else key
    return "v1=" + hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def verify(key: str | bytes, body: bytes, timestamp: str, signature_header: str, tolerance_s: float = TOLERANCE_S,
           now: Callable[[], float] = time.time) -> bool:
    """True if ``signature_header`` signs ``body`` at ``timestamp`` with ``key`` and the timestamp is
    within ``tolerance_s`` of now (a receiver's side of the check)."""
    try:
        if abs(now() - int(timestamp)) > tolerance_s:
            return False
    except ValueError:
        return False
    return hmac.compare_digest(signature(key, timestamp, body), signature_header.strip())


class WebhookConfig(ReceiverConfig):
    secrets: ClassVar[dict[str, bool]] = {"signing_key": True}

    type: Literal["webhook"]
    url: str | None = None              # may be written in clear; url_env / url_file when it holds a token
    url_env: str | None = None
    url_file: str | None = None
    signing_key_env: str | None = None
    signing_key_file: str | None = None

    @model_validator(mode="after")
    def _one_url(self):
        given = [k for k in ("url", "url_env", "url_file") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of url, url_env or url_file")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} is not an http(s) URL")
        return self


class Webhook(Receiver):
    kind: ClassVar[str] = "webhook"
    Config = WebhookConfig
    batch: ClassVar[int | None] = 1
    updates_by_default: ClassVar[bool] = True

    def __init__(self, name, config, operator_url=None, clock: Callable[[], float] = time.time):
        super().__init__(name, config, operator_url)
        assert isinstance(config, WebhookConfig)
        self.clock = clock
        if config.url:
            self.url = checked_url(f"receivers.{name}.url", config.url)
        else:
            self.url = read_secret(name, config, "url") or ""
            self.secrets["url"] = self.url

    def requests(self, n: Notification) -> list[Request]:
        return [Request(self.url, json_body(alert),
                        {"Content-Type": "application/json", "User-Agent": f"gpufleet/{__version__}",
                         "X-Gpufleet-Event": alert.get("schema", "gpufleet.alert.v1"),
                         "X-Gpufleet-Delivery": f"{alert['id']}:{step_of(alert)}"}, [i])
                for i, alert in enumerate(n.alerts)]

    def sign(self, request: Request) -> dict[str, str]:
        timestamp = str(int(self.clock()))
        return {"X-Gpufleet-Timestamp": timestamp,
                "X-Gpufleet-Signature": signature(self.secrets["signing_key"], timestamp, request.body)}
