"""gpufleet's commands: one module per command or group of commands, each with an ``add_<command>(sub)`` that
registers its parser and handler (``set_defaults(fn=...)``). Adding a command is a module and an entry here with its
one-line summary; the order here is the order of ``gpufleet --help``, which prints the summaries without importing
any command's module (a command's module is imported only when it runs, or its own ``--help`` is asked for)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CommandInfo:
    """Where a command lives and what it does, in one line (``gpufleet --help``)."""

    module: str           # gpufleet.commands.<module> holds add_<command>
    summary: str


COMMANDS: dict[str, CommandInfo] = {
    "demo": CommandInfo("demo", "simulate a fleet, run it through the embedded pipeline, print a summary"),
    "collect": CommandInfo("collect", "sample this node's GPUs and host, publish to Kafka (the node collector)"),
    "worker": CommandInfo("worker", "run the stream processors on Kafka (the distributed mode)"),
    "notify": CommandInfo("notify", "deliver alerts to Slack, PagerDuty, Alertmanager and webhooks (the router)"),
    "silence": CommandInfo("notify", "mute alerts for a while: add, list, expire"),
    "model": CommandInfo("model", "train and evaluate the anomaly detectors"),
    "topics": CommandInfo("topics", "create the Kafka topics gpufleet uses (idempotent)"),
    "publish": CommandInfo("publish", "send a recorded telemetry file to the Kafka telemetry topic"),
    "status": CommandInfo("status", "how far the workers have got: committed offsets against the topics' ends"),
    "simulate": CommandInfo("simulate", "write a simulated fleet's telemetry and ground-truth labels"),
    "replay": CommandInfo("replay", "run the embedded pipeline over a recorded telemetry file"),
    "db": CommandInfo("db", "manage the store's schema"),
    "summary": CommandInfo("summary", "print the fleet summary from the store"),
    "forecast": CommandInfo("forecast", "demand forecasts: backtest on a series, or make them from the store"),
    "scale": CommandInfo("forecast", "replay a demand series through a scale policy"),
    "serve": CommandInfo("view", "the HTTP service: the fleet page, its JSON, the forecast feed, /metrics"),
    "report": CommandInfo("view", "one self-contained HTML file with the fleet page's charts for a period"),
    "top": CommandInfo("view", "the fleet live in the terminal: pools, idlest rented GPUs, alerts firing"),
    "bill": CommandInfo("bill", "a month's invoice-like summary per tenant; rerate, close, capacity, export"),
    "sql": CommandInfo("sql", "run one SQL query against the store and print the result"),
}
