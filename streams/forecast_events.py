"""The forecast process's contracts: events ``gpufleet.forecast.v1`` and ``gpufleet.scale.v1`` and the tables
that keep them (``forecasts``, ``scale_events``).

These field names are the contract every consumer reads. Events are plain dicts; the pydantic models define and
check the contract (tests, consumers such as the feed).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.contracts import tables
from gpufleet.models.scaling import Decision

FORECAST_SCHEMA: Literal["gpufleet.forecast.v1"] = "gpufleet.forecast.v1"
SCALE_SCHEMA: Literal["gpufleet.scale.v1"] = "gpufleet.scale.v1"

FORECASTS, SCALE_EVENTS = tables.FORECASTS, tables.SCALE_EVENTS


def topic_names(settings) -> dict[str, str]:
    """The topics of the two events (key = pool): ``<prefix>.forecast`` and ``<prefix>.scale``."""
    p = settings.kafka.topic_prefix
    return {"forecast": f"{p}.forecast", "scale": f"{p}.scale"}


class ForecastPoint(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ts: float
    demand_gpus: float = Field(ge=0)
    p10: float = Field(ge=0)
    p90: float = Field(ge=0)


class ForecastEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_: Literal["gpufleet.forecast.v1"] = Field(FORECAST_SCHEMA, alias="schema")
    pool: str
    made_at: float
    step_s: float = Field(gt=0)
    points: list[ForecastPoint]


class CapacityRequest(BaseModel):
    """Demand beyond what the pool has: ``gpus`` more from ``from`` until ``until``, and the forecast's highest p90
    in that time (the peak rented, where the demand observed is already beyond the pool)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    gpus: int = Field(gt=0)
    from_: float = Field(alias="from")
    until: float
    p90: float = Field(ge=0)


class ScaleEvent(BaseModel):
    """A scale decision: ``at`` is when it was made (event time), ``target_gpus`` never exceeds ``capacity_gpus``,
    ``action`` compares the target with ``current_gpus``, ``reason`` is one sentence. Events written before
    ``rented_gpus``, ``capacity_gpus`` and ``capacity_request`` were added lack them."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_: Literal["gpufleet.scale.v1"] = Field(SCALE_SCHEMA, alias="schema")
    pool: str
    at: float
    action: Literal["scale_up", "scale_down", "hold"]
    current_gpus: int = Field(ge=0)
    target_gpus: int = Field(ge=0)
    reason: str
    rented_gpus: int | None = Field(None, ge=0)
    capacity_gpus: int | None = Field(None, ge=0)
    capacity_request: CapacityRequest | None = None


def _r(x: float) -> float:
    return round(float(x), 3)


def forecast_event(pool: str, made_at: float, step_s: float, demand: Sequence[float], p10: Sequence[float],
                   p90: Sequence[float]) -> dict:
    """A ``gpufleet.forecast.v1`` event: point ``k`` is the step starting at ``made_at + k * step_s``."""
    return {"schema": FORECAST_SCHEMA, "pool": pool, "made_at": _r(made_at), "step_s": _r(step_s),
            "points": [{"ts": _r(made_at + k * step_s), "demand_gpus": _r(m), "p10": _r(lo), "p90": _r(hi)}
                       for k, (m, lo, hi) in enumerate(zip(demand, p10, p90))]}


def scale_event(pool: str, d: Decision) -> dict:
    """A ``gpufleet.scale.v1`` event of a scale decision; its ``capacity_request`` is ``{"gpus", "from", "until",
    "p90"}`` or None."""
    return {"schema": SCALE_SCHEMA, "pool": pool, "at": _r(d.at), "action": d.action,
            "current_gpus": int(d.current_gpus), "target_gpus": int(d.target_gpus), "reason": d.reason,
            "rented_gpus": int(d.rented_gpus), "capacity_gpus": int(d.capacity_gpus),
            "capacity_request": d.capacity_request.to_dict() if d.capacity_request else None}


def forecast_rows(event: dict, methods: Sequence[str]) -> list[tuple]:
    """The rows of ``forecasts`` for one event (``methods``: the candidate behind each point)."""
    return [(event["pool"], int(event["made_at"]), int(p["ts"]), int(event["step_s"]), p["demand_gpus"], p["p10"],
             p["p90"], m) for p, m in zip(event["points"], methods)]


def scale_row(event: dict, dry_run: bool, lead_time_s: float, changed: bool) -> tuple:
    """The row of ``scale_events`` for one event (a request's columns 0 where there is none)."""
    r = event["capacity_request"] or {"gpus": 0, "from": 0, "until": 0, "p90": 0.0}
    return (event["pool"], int(event["at"]), event["action"], event["current_gpus"], event["target_gpus"],
            event["rented_gpus"], event["reason"], int(dry_run), int(lead_time_s), event["capacity_gpus"],
            int(r["gpus"]), int(r["from"]), int(math.ceil(r["until"])), float(r["p90"]), int(changed))
