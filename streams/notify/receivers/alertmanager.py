"""Prometheus Alertmanager, API v2: ``POST /api/v2/alerts`` with a list of alerts.

Each alert: labels ``alertname`` (the kind), ``node``, ``gpu``, ``tenant_job`` (the tenant's job: ``job`` is
Prometheus' own scrape label), ``tenant``, ``pool``, ``severity`` (empty ones left out), annotations ``summary``,
``evidence`` (JSON), ``incident``, ``runbook_url`` and, once it changed, ``revision`` and ``change``; ``startsAt``,
and ``endsAt``: for a firing alert a moment four resend intervals ahead, renewed by re-sending it
every ``resend_interval`` while it fires (as Prometheus does), so Alertmanager never resolves it on
its own; for a resolved one the time it resolved. Alertmanager then groups, silences and routes
with its own configuration; it answers 200. Severity is a label, so an incident whose severity changes is a new
label set there: the change sends the new one firing and the old one resolved, together.
"""
from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from ..matchers import parse_duration
from .base import Notification, Receiver, ReceiverConfig, Request, iso, json_body


class AlertmanagerConfig(ReceiverConfig):
    secrets: ClassVar[dict[str, bool]] = {"password": False}

    type: Literal["alertmanager"]
    url: str = Field(description="Alertmanager's base URL, e.g. http://alertmanager:9093")
    resend_interval: float = Field(60.0, description="how often firing alerts are sent again")
    username: str | None = None
    password_env: str | None = None
    password_file: str | None = None

    @field_validator("resend_interval", mode="before")
    @classmethod
    def _duration(cls, v):
        seconds = parse_duration(v)
        if not 1 <= seconds <= 3600:
            raise ValueError("must be between 1s and 1h")
        return seconds

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r} is not an http(s) URL")
        return v.rstrip("/")


class Alertmanager(Receiver):
    kind: ClassVar[str] = "alertmanager"
    Config = AlertmanagerConfig
    batch: ClassVar[int | None] = 500
    reminds: ClassVar[bool] = True
    updates_by_default: ClassVar[bool] = True

    def __init__(self, name, config, operator_url=None, clock: Callable[[], float] = time.time):
        super().__init__(name, config, operator_url)
        self.clock = clock

    @property
    def resend_s(self) -> float:
        assert isinstance(self.config, AlertmanagerConfig)
        return self.config.resend_interval

    def repeat_s(self, route_repeat_s: float) -> float | None:
        return min(route_repeat_s, self.resend_s) if route_repeat_s > 0 else self.resend_s

    def requests(self, n: Notification) -> list[Request]:
        config = self.config
        assert isinstance(config, AlertmanagerConfig)
        headers = {"Content-Type": "application/json"}
        if config.username is not None:
            token = base64.b64encode(f"{config.username}:{self.secrets.get('password', '')}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        out = []
        for lo in range(0, len(n.alerts), self.batch or len(n.alerts)):
            chunk = n.alerts[lo:lo + (self.batch or len(n.alerts))]
            body = [self.alert(a) for a in chunk]
            body += [self.alert({**a, "severity": a["previous_severity"], "status": "resolved", "resolved_at": None})
                     for a in chunk if a["status"] == "firing" and a.get("previous_severity")
                     and a["previous_severity"] != a["severity"]]
            out.append(Request(f"{config.url}/api/v2/alerts", json_body(body), headers,
                               list(range(lo, lo + len(chunk)))))
        return out

    def alert(self, alert: dict) -> dict:
        labels = {"alertname": alert["kind"], "node": alert.get("node"), "gpu": alert.get("gpu_uuid"),
                  "tenant_job": alert.get("job"), "tenant": alert.get("tenant"), "pool": alert.get("pool"),
                  "severity": alert["severity"]}
        now = self.clock()
        if alert["status"] == "resolved":    # never ahead of now (a skewed clock): Alertmanager resolves at endsAt
            ends = min(alert.get("resolved_at") or now, now)
        else:
            ends = now + 4 * self.resend_s
        annotations = {"summary": alert["summary"], "evidence": json.dumps(alert.get("evidence") or {}, sort_keys=True),
                       "incident": alert["id"]}
        if alert.get("runbook_url"):
            annotations["runbook_url"] = alert["runbook_url"]
        if alert.get("revision"):
            annotations["revision"] = str(alert["revision"])
            annotations["change"] = alert.get("change") or "updated"
        out = {"labels": {k: str(v) for k, v in labels.items() if v}, "annotations": annotations,
               "startsAt": iso(alert["started_at"]), "endsAt": iso(max(ends, alert["started_at"]))}
        link = self.operator_url(alert)
        if link:
            out["generatorURL"] = link
        return out
