"""Slack incoming webhooks: one Block Kit message per group, with a plain ``text`` fallback.

Slack's limits (docs.slack.dev, Block Kit reference): 50 blocks a message, a header's plain text
150 characters, a section's text 3,000, at most 10 fields of 2,000 each, a context block 10
elements. Messages whose blocks hold more than about 13,000 characters in all are refused
(``msg_blocks_too_long``) though no limit is published, so this keeps them under 11,000. A group
too large for one message goes out in as many messages as it takes, each alert in full in one of them.
Incoming webhooks take about one message a second, short bursts allowed; a 429 carries Retry-After.
"""
from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from gpufleet.contracts.units import readable_evidence

from ..http import Response
from .base import Notification, Receiver, ReceiverConfig, Request, Verdict, classify, cut, iso, json_body

MAX_BLOCKS = 50
MAX_HEADER = 150
MAX_SECTION = 3000
MAX_FIELDS = 10
MAX_FIELD = 2000
MAX_CONTEXT = 10
MAX_BLOCK_CHARS = 11_000
MAX_TEXT = 3000                # the fallback: what notifications and old clients show
MAX_ALERT_FIELDS = 4000        # one alert's evidence fields in all: with its text (3,000) it fits one message


class SlackConfig(ReceiverConfig):
    secrets: ClassVar[dict[str, bool]] = {"url": True}      # the webhook URL is the credential

    type: Literal["slack"]
    url_env: str | None = None
    url_file: str | None = None
    title: str = "gpufleet"


def escape(text: str) -> str:
    """Slack mrkdwn: &, < and > are control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def value_text(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"), sort_keys=True)


def where(alert: dict) -> str:
    parts = []
    if alert.get("node"):
        parts.append(f"node `{escape(alert['node'])}`")
    if alert.get("gpu_uuid"):
        parts.append(f"GPU `{escape(alert['gpu_uuid'])}`")
    if alert.get("job"):
        parts.append(f"job `{escape(alert['job'])}`")
    return ", ".join(parts) or escape(alert.get("dedup_key", ""))


def state_word(alert: dict, reminder: bool) -> str:
    """RESOLVED, ESCALATED (was warning), DE-ESCALATED (was critical), UPDATED, STILL FIRING or FIRING."""
    if alert["status"] == "resolved":
        return "RESOLVED"
    change = alert.get("change") if alert.get("revision") else None
    if change in ("escalated", "deescalated") and not reminder:
        word = "ESCALATED" if change == "escalated" else "DE-ESCALATED"
        return f"{word} (was {alert.get('previous_severity') or '?'})"
    if change and not reminder:
        return "UPDATED"
    return "STILL FIRING" if reminder else "FIRING"


class Slack(Receiver):
    kind: ClassVar[str] = "slack"
    Config = SlackConfig
    reminds: ClassVar[bool] = True
    default_rate: ClassVar[tuple[float, int]] = (1.0, 3)

    def requests(self, n: Notification) -> list[Request]:
        """One message, or as many as it takes to show every alert of the group in full (Slack's limits on blocks
        and characters), each naming its part: nothing of the group is left to a line cut short."""
        parts = self.parts(n)
        return [Request(self.secrets["url"], json_body(self.message(n, idx, i, len(parts))),
                        {"Content-Type": "application/json"}, idx) for i, idx in enumerate(parts, 1)]

    def headline(self, n: Notification) -> str:
        """``[FIRING:2, RESOLVED:3]``: each alert counted once, in the state its latest event in the group has
        (an incident that fired and resolved before the group was told is resolved)."""
        latest: dict[str, str] = {}
        for a in n.alerts:
            latest[a.get("id") or a.get("dedup_key", "")] = a["status"]
        firing = sum(1 for status in latest.values() if status == "firing")
        resolved = len(latest) - firing
        counts = []
        if firing:
            counts.append(f"{'STILL FIRING' if n.reminder else 'FIRING'}:{firing}")
        if resolved:
            counts.append(f"RESOLVED:{resolved}")
        kinds = sorted({a["kind"] for a in n.alerts})
        scope = " ".join(v for _, v in sorted(n.group.items()) if v) or ", ".join(kinds)
        title = getattr(self.config, "title", "gpufleet")
        return f"[{', '.join(counts)}] {title}: {scope}"

    def parts(self, n: Notification) -> list[list[int]]:
        """The group's alerts (their indices) split into messages within Slack's limits, in order."""
        room = MAX_BLOCK_CHARS - MAX_HEADER - 200
        parts: list[list[int]] = [[]]
        used = 0
        for i, alert in enumerate(n.alerts):
            section, context = self.alert_blocks(alert, n.reminder)
            size = len(json.dumps(section)) + len(json.dumps(context))
            if parts[-1] and (2 * (len(parts[-1]) + 1) + 1 > MAX_BLOCKS or used + size > room):
                parts.append([])
                used = 0
            parts[-1].append(i)
            used += size
        return parts

    def message(self, n: Notification, indices: list[int] | None = None, part: int = 1, of: int = 1) -> dict:
        indices = list(range(len(n.alerts))) if indices is None else indices
        suffix = f" ({part} of {of})" if of > 1 else ""
        header = cut(self.headline(n), MAX_HEADER - len(suffix)) + suffix
        blocks: list[dict] = [{"type": "header", "text": {"type": "plain_text", "text": header, "emoji": False}}]
        for i in indices:
            blocks += list(self.alert_blocks(n.alerts[i], n.reminder))
        fallback = header + "\n" + "\n".join(f"{n.alerts[i]['status']}: {n.alerts[i]['summary']}" for i in indices)
        return {"text": cut(fallback, MAX_TEXT), "blocks": blocks}

    def alert_blocks(self, alert: dict, reminder: bool) -> tuple[dict, dict]:
        status = state_word(alert, reminder)
        text = f"*{status}* · *{alert['severity']}* · *{alert['kind']}* on {where(alert)}\n{escape(alert['summary'])}"
        section: dict = {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, MAX_SECTION)}}
        evidence = alert.get("evidence") or {}
        shown = readable_evidence(evidence)[:MAX_FIELDS]
        each = min(MAX_FIELD, MAX_ALERT_FIELDS // max(1, len(shown)))      # an alert always fits one message
        fields = [{"type": "mrkdwn", "text": cut(f"*{escape(label)}*\n{escape(text)}", each)} for label, text in shown]
        if fields:
            section["fields"] = fields
        facts = []
        for name in ("tenant", "pool"):
            if alert.get(name):
                facts.append(f"{name} {escape(alert[name])}")
        facts.append(f"started {iso(alert['started_at'])}")
        if alert["status"] == "resolved" and alert.get("resolved_at") is not None:
            facts.append(f"resolved {iso(alert['resolved_at'])}")
        elements = [{"type": "mrkdwn", "text": " · ".join(facts)}]
        if alert.get("runbook_url"):
            elements.append({"type": "mrkdwn", "text": f"<{alert['runbook_url']}|Runbook>"})
        link = self.operator_url(alert)
        if link:
            elements.append({"type": "mrkdwn", "text": f"<{link}|Open in the operator view>"})
        return section, {"type": "context", "elements": elements[:MAX_CONTEXT]}

    def verdict(self, response: Response) -> Verdict:
        # Slack answers 200 "ok"; errors come as short words: invalid_blocks, channel_not_found, ...
        return classify(response, f"HTTP {response.status}: {response.text.strip()[:200]}")
