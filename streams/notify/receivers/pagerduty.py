"""PagerDuty Events API v2: a ``trigger`` per firing alert and a ``resolve`` per resolved one, both
with the incident's ``dedup_key``, so PagerDuty keeps one alert per incident however often it hears.

Format (developer.pagerduty.com, Events API v2, "Send an Alert Event"): ``routing_key``,
``event_action``, ``dedup_key`` (255 characters at most), ``payload`` with ``summary`` (1,024 at
most), ``source``, ``severity`` (critical, error, warning or info), ``timestamp``, ``component``,
``group``, ``class`` and ``custom_details``; ``client``, ``client_url`` and ``links``. 202 means
accepted; 400 is never retried (PagerDuty's ``errors`` are kept as the reason); 429 and 5xx are.
The limit is about 120 events a minute per integration key: 2 a second, bursts of 10.
"""
from __future__ import annotations

import json
from typing import ClassVar, Literal

from pydantic import field_validator

from ..http import Response
from .base import Notification, Receiver, ReceiverConfig, Request, Verdict, classify, cut, iso, json_body, url_problem

EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
PD_SEVERITY = Literal["critical", "error", "warning", "info"]
SEVERITY: dict[str, str] = {"critical": "critical", "warning": "warning", "info": "info"}


class PagerDutyConfig(ReceiverConfig):
    secrets: ClassVar[dict[str, bool]] = {"routing_key": True}

    type: Literal["pagerduty"]
    routing_key_env: str | None = None
    routing_key_file: str | None = None
    url: str = EVENTS_URL
    severity: dict[Literal["info", "warning", "critical"], PD_SEVERITY] = {}
    client: str = "gpufleet"

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        problem = url_problem(v)
        if problem:
            raise ValueError(f"{v!r}: {problem}")
        return v.strip()


def changed(alert: dict) -> dict:
    """What an incident's later trigger adds: its revision, and the severity it changed from."""
    if not alert.get("revision"):
        return {}
    out = {"revision": alert["revision"], "change": alert.get("change") or "updated"}
    if alert.get("previous_severity"):
        out["previous_severity"] = alert["previous_severity"]
    return out


class PagerDuty(Receiver):
    kind: ClassVar[str] = "pagerduty"
    Config = PagerDutyConfig
    batch: ClassVar[int | None] = 1
    default_rate: ClassVar[tuple[float, int]] = (2.0, 10)

    def requests(self, n: Notification) -> list[Request]:
        return [Request(self.config.url, json_body(self.event(alert)),           # type: ignore[attr-defined]
                        {"Content-Type": "application/json"}, [i]) for i, alert in enumerate(n.alerts)]

    def event(self, alert: dict) -> dict:
        config = self.config
        assert isinstance(config, PagerDutyConfig)
        key = cut(alert["dedup_key"], 255)
        if alert["status"] == "resolved":
            return {"routing_key": self.secrets["routing_key"], "event_action": "resolve", "dedup_key": key}
        payload: dict = {
            "summary": cut(alert["summary"], 1024),
            "source": alert.get("node") or alert.get("job") or alert.get("gpu_uuid") or "gpufleet",
            "severity": config.severity.get(alert["severity"], SEVERITY.get(alert["severity"], "warning")),
            "timestamp": iso(alert["detected_at"]),
            "class": alert["kind"],
            "custom_details": {**(alert.get("evidence") or {}), **changed(alert)},
        }
        component = alert.get("gpu_uuid") or alert.get("job")
        if component:
            payload["component"] = component
        if alert.get("pool"):
            payload["group"] = alert["pool"]
        event = {"routing_key": self.secrets["routing_key"], "event_action": "trigger", "dedup_key": key,
                 "payload": payload, "client": config.client}
        links = []
        if alert.get("runbook_url"):
            links.append({"href": alert["runbook_url"], "text": f"Runbook: {alert['kind']}"})
        link = self.operator_url(alert)
        if link:
            event["client_url"] = link
            links.append({"href": link, "text": "Operator view"})
        if links:
            event["links"] = links
        return event

    def verdict(self, response: Response) -> Verdict:
        if response.status == 400:
            try:
                answer = json.loads(response.body)
                why = f"{answer.get('message', '')}: {'; '.join(map(str, answer.get('errors', [])))}"
            except (ValueError, AttributeError):
                why = response.text.strip()[:500]
            return Verdict("rejected", f"HTTP 400 from PagerDuty: {why}")
        return classify(response)
