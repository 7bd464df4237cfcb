"""The receivers, one module each, found by their ``type`` in the routing file through this registry."""
from __future__ import annotations

from .alertmanager import Alertmanager
from .base import Notification, Receiver, ReceiverConfig, Request, RoutesError, Verdict
from .pagerduty import PagerDuty
from .slack import Slack
from .webhook import Webhook

RECEIVERS: dict[str, type[Receiver]] = {r.kind: r for r in (Slack, PagerDuty, Alertmanager, Webhook)}

__all__ = ["RECEIVERS", "Notification", "Receiver", "ReceiverConfig", "Request", "RoutesError", "Verdict"]
