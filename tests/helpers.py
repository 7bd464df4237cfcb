"""Builders of telemetry messages for tests."""
from __future__ import annotations

SCHEMA = "gpufleet.telemetry.v1"


def gpu(index: int = 0, uuid: str | None = None, **fields) -> dict:
    g = {"uuid": uuid or f"GPU-{index}", "index": index, "util_pct": 50.0, "tenant": "acme", "job": "j1",
         "mem_used_bytes": 1e9, "mem_total_bytes": 8e10, "power_w": 300.0, "sm_clock_mhz": 1900.0}
    g.update(fields)
    return g


def message(ts: float, node: str = "n1", gpus: list[dict] | None = None, **fields) -> dict:
    m = {"schema": SCHEMA, "ts": ts, "node": node, "interval_s": 5.0, "pool": "p1",
         "gpus": gpus if gpus is not None else [gpu()]}
    m.update(fields)
    return m


def event_key(e: dict) -> str:
    """What identifies an event: an alert's id, status and revision, a billing record's GPU, tenant, job and
    period."""
    if e["schema"] == "gpufleet.billing.v1":
        return f"billing:{e['gpu_uuid']}/{e['tenant']}/{e['job']}/{e['period_start']}"
    return f"{e['id']}{e['status']}{e.get('revision') or ''}"


def paged(events: list[dict]) -> list[dict]:
    """An incident's life as pages see it: its first firing, a change of severity, its resolve; not the updates of
    its numbers (a firing event with ``change`` "updated", no new page)."""
    return [e for e in events if e.get("status") == "resolved" or e.get("change") != "updated"]
