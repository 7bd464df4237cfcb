"""Slack incoming webhooks: one Block Kit message per group, with a plain ``text`` fallback.

Slack's limits (docs.slack.dev, Block Kit reference): 50 blocks a message, a header's plain text
150 characters, a section's text 3,000, at most 10 fields of 2,000 each, a context block 10
elements. Messages whose blocks hold more than about 13,000 characters in all are refused
(``msg_blocks_too_long``) though no limit is published, so this keeps them under 11,000. A group
too large for one message shows its first alerts in full and the rest as one line each, cut to fit.
Incoming webhooks take about one message a second, short bursts allowed; a 429 carries Retry-After.
"""
from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

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


class Slack(Receiver):
    kind: ClassVar[str] = "slack"
    Config = SlackConfig
    reminds: ClassVar[bool] = True
    default_rate: ClassVar[tuple[float, int]] = (1.0, 3)

    def requests(self, n: Notification) -> list[Request]:
        payload = self.message(n)
        return [Request(self.secrets["url"], json_body(payload), {"Content-Type": "application/json"},
                        list(range(len(n.alerts))))]

    def headline(self, n: Notification) -> str:
        firing = sum(1 for a in n.alerts if a["status"] == "firing")
        resolved = len(n.alerts) - firing
        counts = []
        if firing:
            counts.append(f"{'STILL FIRING' if n.reminder else 'FIRING'}:{firing}")
        if resolved:
            counts.append(f"RESOLVED:{resolved}")
        kinds = sorted({a["kind"] for a in n.alerts})
        scope = " ".join(v for _, v in sorted(n.group.items()) if v) or ", ".join(kinds)
        title = getattr(self.config, "title", "gpufleet")
        return f"[{', '.join(counts)}] {title}: {scope}"

    def message(self, n: Notification) -> dict:
        header = cut(self.headline(n), MAX_HEADER)
        blocks: list[dict] = [{"type": "header", "text": {"type": "plain_text", "text": header, "emoji": False}}]
        used = len(header)
        shown = 0
        for alert in n.alerts:
            section, context = self.alert_blocks(alert, n.reminder)
            size = len(json.dumps(section)) + len(json.dumps(context))
            # room for this alert's two blocks and the overflow line after them
            if len(blocks) + 3 > MAX_BLOCKS or used + size > MAX_BLOCK_CHARS - 1000:
                break
            blocks += [section, context]
            used += size
            shown += 1
        rest = n.alerts[shown:]
        if rest:
            lines = [f"{'resolved' if a['status'] == 'resolved' else 'firing'} {a['kind']} {where(a)}" for a in rest]
            text = cut(f"…and {len(rest)} more: " + "; ".join(lines), MAX_SECTION)
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": text}]})
        fallback = header + "\n" + "\n".join(f"{a['status']}: {a['summary']}" for a in n.alerts)
        return {"text": cut(fallback, MAX_TEXT), "blocks": blocks}

    def alert_blocks(self, alert: dict, reminder: bool) -> tuple[dict, dict]:
        status = "RESOLVED" if alert["status"] == "resolved" else ("STILL FIRING" if reminder else "FIRING")
        text = f"*{status}* · *{alert['severity']}* · *{alert['kind']}* on {where(alert)}\n{escape(alert['summary'])}"
        section: dict = {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, MAX_SECTION)}}
        evidence = alert.get("evidence") or {}
        fields = [{"type": "mrkdwn", "text": cut(f"*{escape(str(k))}*\n{escape(value_text(v))}", MAX_FIELD)}
                  for k, v in list(evidence.items())[:MAX_FIELDS]]
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
        link = self.operator_url(alert)
        if link:
            elements.append({"type": "mrkdwn", "text": f"<{link}|Open in the operator view>"})
        return section, {"type": "context", "elements": elements[:MAX_CONTEXT]}

    def verdict(self, response: Response) -> Verdict:
        # Slack answers 200 "ok"; errors come as short words: invalid_blocks, channel_not_found, ...
        return classify(response, f"HTTP {response.status}: {response.text.strip()[:200]}")
