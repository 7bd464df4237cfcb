"""Events the stream emits (``gpufleet.alert.v1``, ``gpufleet.billing.v1``) and its dead letters
(``gpufleet.deadletter.v1``).

These field names are the contract every consumer reads. Events are plain dicts on the hot path;
the pydantic models here define and check the contract (tests, consumers).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

ALERT_SCHEMA: Literal["gpufleet.alert.v1"] = "gpufleet.alert.v1"
DEADLETTER_SCHEMA: Literal["gpufleet.deadletter.v1"] = "gpufleet.deadletter.v1"
BILLING_SCHEMA: Literal["gpufleet.billing.v1"] = "gpufleet.billing.v1"
MAX_DEAD_PAYLOAD = 64 * 1024

# a detector's kind (models/detectors registry: straggler, io_starvation, memory_leak, ...) or the stream's own (idle)
AlertKind = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,62}$")]
ReasonCode = Literal["invalid", "late", "clock_skew", "too_large", "internal_error"]
Severity = Literal["info", "warning", "critical"]
# what a firing event after an incident's first says: its severity rose or fell (told to every route the new
# severity reaches), or its numbers moved (an update: no new page)
Change = Literal["escalated", "deescalated", "updated"]
SEVERITIES = ("info", "warning", "critical")
DEESCALATE_AFTER_S = 900.0    # stream seconds a lower severity must hold before an open incident is told de-escalated
UPDATE_EVERY_S = 1800.0       # stream seconds between two updates of an open incident's numbers (at most)
DEFAULT_MANUAL_URL = "http://127.0.0.1:8080/manual/"     # the manual as gpufleet serve serves it (make docs)


class Alert(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_: Literal["gpufleet.alert.v1"] = Field(ALERT_SCHEMA, alias="schema")
    id: str
    dedup_key: str
    kind: AlertKind
    status: Literal["firing", "resolved"]
    severity: Severity
    node: str | None
    gpu_uuid: str | None
    job: str | None
    tenant: str | None
    pool: str | None
    started_at: float
    detected_at: float
    resolved_at: float | None
    score: float
    summary: str
    evidence: dict
    revision: int = Field(0, ge=0)
    change: Change | None = None
    previous_severity: Severity | None = None
    runbook_url: str | None = None


class AlertIn(BaseModel):
    """An alert as a reader takes it from the topic: the fields it relies on, each of its type; newer fields and
    kinds pass (a newer worker may add them), a field of the wrong type or shape does not."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, strict=True)
    schema_: Literal["gpufleet.alert.v1"] = Field(alias="schema")
    id: Annotated[str, Field(min_length=1, max_length=200)]
    dedup_key: Annotated[str, Field(min_length=1, max_length=1000)]
    kind: Annotated[str, Field(min_length=1, max_length=100)]
    status: Literal["firing", "resolved"]
    severity: Literal["info", "warning", "critical"] = "warning"
    node: str | None = None
    gpu_uuid: str | None = None
    job: str | None = None
    tenant: str | None = None
    pool: str | None = None
    started_at: Annotated[float, Field(allow_inf_nan=False)] | None = None
    detected_at: Annotated[float, Field(allow_inf_nan=False)] | None = None
    resolved_at: Annotated[float, Field(allow_inf_nan=False)] | None = None
    score: Annotated[float, Field(allow_inf_nan=False)] | None = None
    summary: Annotated[str, Field(max_length=10_000)] = ""
    evidence: dict = {}
    revision: Annotated[int, Field(ge=0)] = 0
    change: Change | None = None
    previous_severity: Severity | None = None
    runbook_url: Annotated[str, Field(max_length=2000)] | None = None


def alert_problem(event: object) -> str | None:
    """Why ``event`` (decoded JSON) is not an alert a router can route and tell, or None."""
    if not isinstance(event, dict):
        return f"(message): an alert is an object, not {type(event).__name__}"
    try:
        AlertIn.model_validate(event)
    except ValidationError as err:
        e = err.errors(include_url=False, include_input=False)[0]
        path = ".".join(str(p) for p in e["loc"]) or "(message)"
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        return f"{path}: {e['msg']}{more}"
    except (RecursionError, ValueError, TypeError) as err:
        return f"(message): cannot be read: {type(err).__name__}"
    return None


Money = Annotated[str, Field(pattern=r"^-?\d+\.\d{6}$")]     # a decimal string with 6 decimals, never a float
ExactSeconds = Annotated[str, Field(pattern=r"^-?\d+\.\d{8}$")]  # utilization-weighted seconds, exact: 8 decimals


class Billing(BaseModel):
    """One billing record: a GPU's time in one billing period for one tenant and job, with
    the optional fields metering adds (data quality, utilization, what every billing mode would charge)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_: Literal["gpufleet.billing.v1"] = Field(BILLING_SCHEMA, alias="schema")
    tenant: str
    pool: str | None
    gpu_uuid: str
    job: str | None
    gpu_model: str | None
    period_start: int
    period_end: int
    rented_s: float
    busy_s: float
    idle_s: float
    price_per_gpu_hour: Money
    amount: Money
    idle_amount: Money
    currency: str
    node: str | None = None
    gpu_index: int | None = None
    mig_profile: str | None = None
    gpu_share: str | None = None
    team: str | None = None
    billing_mode: str | None = None
    samples: int | None = None
    interval_s: float | None = None
    estimated_s: float | None = None
    unbilled_s: float | None = None
    minimum_topup_s: float | None = None
    data_quality: Literal["measured", "estimated", "incomplete"] | None = None
    util_pct: float | None = None
    busy_util_pct: float | None = None
    amounts_by_mode: dict[str, Money] | None = None
    underused_s: float | None = None          # waste (gpufleet/contracts/waste.py): busy time of an underused period
    unused_amount: Money | None = None        # what the tenant paid for its unused share
    unsold_amount: Money | None = None        # what the provider lost where the tenant pays by use
    # what re-rating prices again: the price book's version, the utilization-weighted busy and idle
    # seconds that usage billing prices, and the time billed across gaps between idle samples (idle for pricing)
    price_version: str | None = None
    busy_weighted_s: ExactSeconds | None = None
    idle_weighted_s: ExactSeconds | None = None
    estimated_idle_s: float | None = None


class DeadLetter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_: Literal["gpufleet.deadletter.v1"] = Field(DEADLETTER_SCHEMA, alias="schema")
    reason_code: ReasonCode
    reason: str
    source: str
    received_at: float
    payload: str


def alert_id(dedup_key: str, started_at: float) -> str:
    """Stable id of one incident: the same replay yields the same ids."""
    return hashlib.blake2b(f"{dedup_key}@{started_at:.3f}".encode(), digest_size=12).hexdigest()


@dataclass(frozen=True)
class Where:
    """What an alert names (None where it names none): its node, GPU, job, tenant and pool."""

    node: str | None = None
    gpu_uuid: str | None = None
    job: str | None = None
    tenant: str | None = None
    pool: str | None = None


@dataclass(frozen=True)
class Told:
    """What an alert says: one human sentence and the numbers behind it."""

    summary: str
    evidence: dict


@dataclass(frozen=True)
class Facts:
    """Everything an alert event carries beside its kind and target."""

    status: str                      # firing, resolved
    severity: str                    # info, warning, critical
    where: Where
    started_at: float
    detected_at: float
    resolved_at: float | None
    score: float
    told: Told
    revision: int = 0                # 0: the incident's first event; each later firing event one more
    change: str | None = None        # a later firing event's: escalated, deescalated or updated (Change)
    previous_severity: str | None = None     # an escalation's or de-escalation's severity before it


def alert(kind: str, target: str, facts: Facts) -> dict:
    """A ``gpufleet.alert.v1`` event as a dict; ``target`` is the GPU uuid, node or job. Its ``runbook_url`` is
    stamped where it leaves the stream (:func:`with_runbook`)."""
    key, f, w = f"{kind}:{target}", facts, facts.where
    event = {
        "schema": ALERT_SCHEMA, "id": alert_id(key, f.started_at), "dedup_key": key, "kind": kind,
        "status": f.status, "severity": f.severity, "node": w.node, "gpu_uuid": w.gpu_uuid, "job": w.job,
        "tenant": w.tenant, "pool": w.pool, "started_at": round(f.started_at, 3),
        "detected_at": round(f.detected_at, 3),
        "resolved_at": None if f.resolved_at is None else round(f.resolved_at, 3), "score": round(f.score, 4),
        "summary": f.told.summary, "evidence": f.told.evidence, "revision": f.revision,
    }
    if f.change is not None:
        event["change"] = f.change
    if f.previous_severity is not None:
        event["previous_severity"] = f.previous_severity
    return event


def runbook_url(base: str, kind: str) -> str:
    """The runbook page of alerts of ``kind`` in the manual at ``base``."""
    return f"{base.rstrip('/')}/runbooks/{kind}/"


def change_of(before: str, after: str) -> str:
    """What a firing event says of a severity moving from ``before`` to ``after``: escalated, deescalated or
    updated (unchanged)."""
    if before == after or before not in SEVERITIES or after not in SEVERITIES:
        return "updated"
    return "escalated" if SEVERITIES.index(after) > SEVERITIES.index(before) else "deescalated"


def dead_letter(reason_code: str, reason: str, source: str, received_at: float, payload: str | bytes) -> dict:
    """A ``gpufleet.deadletter.v1`` record; the payload is cut to 64 KiB."""
    if isinstance(payload, bytes | bytearray):
        payload = bytes(payload[:MAX_DEAD_PAYLOAD]).decode("utf-8", "replace")
    return {
        "schema": DEADLETTER_SCHEMA, "reason_code": reason_code, "reason": reason[:1000], "source": source,
        "received_at": round(received_at, 3), "payload": payload[:MAX_DEAD_PAYLOAD],
    }
