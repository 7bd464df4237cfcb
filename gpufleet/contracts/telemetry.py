"""The telemetry contract, schema ``gpufleet.telemetry.v1``.

One message per node per sampling tick. Only ``schema``, ``ts``, ``node`` and,
per GPU, ``uuid`` and ``index`` are required; every other field may be null
(lists may be empty) and unknown fields are ignored, so newer collectors can
talk to older workers. Numbers must be finite and inside their ranges; an
invalid message raises :class:`TelemetryError` naming the field path.

This module depends on pydantic only, so that collectors stay light.
"""
from __future__ import annotations

import hashlib
import hmac
import json
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

SCHEMA = "gpufleet.telemetry.v1"

MAX_NAME = 253          # DNS host name length; also bounds pool, tenant, job
MAX_ID = 128            # UUIDs, collector ids, MIG profiles
MAX_GPUS = 64           # per node; MIG splits 8 GPUs into at most 56 instances
MAX_PROCESSES = 256     # per GPU
MAX_XIDS = 64           # per GPU per sample
MAX_MESSAGE_BYTES = 1 << 20



def _not_bool(value):
    """A JSON ``true`` is not the number 1 (pydantic's lax mode would take it as one)."""
    if isinstance(value, bool):
        raise ValueError("Input should be a number, not a boolean")
    return value


NotBool = BeforeValidator(_not_bool)
Pct = Annotated[float, Field(ge=0, le=100), NotBool]
NonNeg = Annotated[float, Field(ge=0), NotBool]
Count = Annotated[int, Field(ge=0), NotBool]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
Ident = Annotated[str, Field(min_length=1, max_length=MAX_ID)]

# Clocks-event reasons that say how the clocks are set, not that the GPU is held back: application clocks
# (0x2), sync boost (0x10, the GPUs of a board kept in step), display clock (0x100). Not throttling.
BENIGN_CLOCK_EVENTS = 0x2 | 0x10 | 0x100
# Fields of a MIG instance that are its physical GPU's (the collector reads them once per GPU): a sum over a
# GPU's instances counts each GPU once (streams/rollups.py splits them evenly over the instances).
PHYSICAL_EXTENSIVE = ("power_w", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s")

_STRICT = ConfigDict(extra="ignore", allow_inf_nan=False, frozen=True, populate_by_name=True)


class Process(BaseModel):
    """A compute process on a GPU."""

    model_config = _STRICT
    pid: Annotated[int, Field(ge=0, le=2**31), NotBool]
    mem_used_bytes: NonNeg | None = None


class Host(BaseModel):
    """Host metrics, as rates between two ticks."""

    model_config = _STRICT
    cpu_util_pct: Pct | None = None
    iowait_pct: Pct | None = None
    disk_read_bytes_per_s: NonNeg | None = None
    net_rx_bytes_per_s: NonNeg | None = None
    mem_used_bytes: NonNeg | None = None
    mem_total_bytes: NonNeg | None = None

    @model_validator(mode="after")
    def _used_within_total(self) -> Host:
        if self.mem_used_bytes is not None and self.mem_total_bytes is not None:
            if self.mem_used_bytes > self.mem_total_bytes:
                raise ValueError("mem_used_bytes exceeds mem_total_bytes")
        return self


class Gpu(BaseModel):
    """One GPU, or one MIG instance where MIG is on."""

    model_config = _STRICT
    uuid: Ident
    parent_uuid: Ident | None = None
    mig_profile: Ident | None = None
    index: Annotated[int, Field(ge=0, le=4096), NotBool]
    model: Name | None = None
    tenant: Name | None = None
    job: Name | None = None
    attribution: Literal["labels", "process_env", "cgroup", "simulated"] | None = None
    util_pct: Pct | None = None
    mem_util_pct: Pct | None = None
    mem_used_bytes: NonNeg | None = None
    mem_total_bytes: NonNeg | None = None
    power_w: NonNeg | None = None
    power_limit_w: NonNeg | None = None
    temp_c: Annotated[float, Field(ge=-50, le=200), NotBool] | None = None
    sm_clock_mhz: NonNeg | None = None
    sm_clock_max_mhz: NonNeg | None = None
    pcie_rx_bytes_per_s: NonNeg | None = None
    pcie_tx_bytes_per_s: NonNeg | None = None
    throttle_reasons: Annotated[int, Field(ge=0, le=2**63 - 1), NotBool] | None = None
    ecc_dbe_total: Count | None = None
    xid_events: Annotated[list[Annotated[int, Field(ge=0, le=2**31), NotBool]], Field(max_length=MAX_XIDS)] = []
    processes: Annotated[list[Process], Field(max_length=MAX_PROCESSES)] = []
    xids_dropped: Count | None = None         # XIDs past MAX_XIDS the collector left out of this sample
    processes_dropped: Count | None = None    # processes past MAX_PROCESSES left out (the smallest)

    @model_validator(mode="after")
    def _used_within_total(self) -> Gpu:
        if self.mem_used_bytes is not None and self.mem_total_bytes is not None:
            if self.mem_used_bytes > self.mem_total_bytes:
                raise ValueError("mem_used_bytes exceeds mem_total_bytes")
        return self


class Telemetry(BaseModel):
    """One node's sample at one tick."""

    model_config = _STRICT
    schema_: Literal["gpufleet.telemetry.v1"] = Field(alias="schema")
    ts: Annotated[float, Field(gt=0, lt=32503680000), NotBool]  # before year 3000
    node: Name
    collector_id: Ident | None = None
    seq: Count | None = None
    interval_s: Annotated[float, Field(gt=0, le=3600), NotBool] | None = None
    pool: Name | None = None
    dropped: Count | None = None
    host: Host | None = None
    gpus: Annotated[list[Gpu], Field(max_length=MAX_GPUS)] = []

    @model_validator(mode="after")
    def _unique_gpus(self) -> Telemetry:
        if len({g.uuid for g in self.gpus}) != len(self.gpus):
            raise ValueError("gpus: the same uuid appears twice")
        return self

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)

    def to_dict(self) -> dict:
        return self.model_dump(by_alias=True)


class TelemetryError(ValueError):
    """A message that is not valid ``gpufleet.telemetry.v1``; ``reason`` names the field path."""

    def __init__(self, reason: str, reason_code: str = "invalid"):
        super().__init__(reason)
        self.reason = reason
        self.reason_code = reason_code


def _describe(err: ValidationError) -> str:
    parts = []
    for e in err.errors(include_url=False, include_input=False)[:3]:
        path = ".".join(str(p) for p in e["loc"]) or "(message)"
        parts.append(f"{path}: {e['msg'].removeprefix('Value error, ')}")
    more = err.error_count() - len(parts)
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def parse(data: str | bytes | dict) -> Telemetry:
    """Validate one message (JSON text, bytes or a decoded dict).

    Raises :class:`TelemetryError` with ``reason_code`` ``too_large`` or
    ``invalid`` and a reason such as ``gpus.3.util_pct: Input should be less
    than or equal to 100``.
    """
    try:
        if isinstance(data, dict):
            return Telemetry.model_validate(data)
        if len(data) > MAX_MESSAGE_BYTES:
            raise TelemetryError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}", "too_large")
        return Telemetry.model_validate_json(data)
    except ValidationError as err:
        raise TelemetryError(_describe(err)) from None
    except TelemetryError:
        raise
    except (RecursionError, MemoryError, ValueError, TypeError) as err:     # nesting, encoding, anything odd
        raise TelemetryError(f"(message): cannot be read: {unreadable(err)}") from None


def unreadable(err: BaseException) -> str:
    """One line for an input that no parser could read (a message, a line, a file)."""
    if isinstance(err, RecursionError):
        return "nested too deeply"
    if isinstance(err, UnicodeDecodeError):
        return f"not UTF-8 (byte {err.start})"
    if isinstance(err, MemoryError):
        return "too large to read"
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}"[:300] if text else type(err).__name__


def check_clock(msg: Telemetry, now: float, max_skew_s: float) -> None:
    """Live mode only: reject a message stamped more than ``max_skew_s`` ahead of ``now``."""
    ahead = msg.ts - now
    if ahead > max_skew_s:
        raise TelemetryError(f"ts: {ahead:.0f} s ahead of the receiver's clock (limit {max_skew_s:g} s)", "clock_skew")


# -- control messages on the telemetry topic --------------------------------------------------------------
CONTROL_SCHEMA = "gpufleet.control.v1"
CONTROL_KINDS = ("end_of_stream",)       # the kinds a worker acts on; any other is dead-lettered
_CONTROL_MARK = CONTROL_SCHEMA.encode()
_SIGNED = ("schema", "kind", "sent_at", "newest")


def end_of_stream(sent_at: float, newest: float | None = None, key: bytes | None = None) -> bytes:
    """The marker `gpufleet publish --end` sends to every partition after a recording: the workers flush
    every open window as `replay` does at the end of its input. ``newest``: the newest ``ts`` of the recording
    (a node silent for ``stream.silent_after_s`` before it is silenced, as replay does). ``key``
    (``kafka.control_key``) signs it: a worker acts only on a marker signed with its own key."""
    doc: dict = {"schema": CONTROL_SCHEMA, "kind": "end_of_stream", "sent_at": sent_at, "newest": newest}
    if key is not None:
        doc["sig"] = control_signature(key, doc)
    return json.dumps(doc).encode()


def control_signature(key: bytes, doc: dict) -> str:
    """HMAC-SHA256 of a control message's fields (sorted, compact JSON), hex."""
    body = json.dumps({k: doc.get(k) for k in _SIGNED}, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def control_newest(payload: str | bytes) -> float | None:
    """The ``newest`` of an end-of-stream marker (None: none given, or not a marker)."""
    try:
        doc = json.loads(payload)
    except (ValueError, RecursionError, TypeError):
        return None
    v = doc.get("newest") if isinstance(doc, dict) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v == v else None


def control_kind(payload: str | bytes | dict | None) -> str | None:
    """The kind of a control message (``end_of_stream``, or one this gpufleet does not know), or None for anything
    else (telemetry, junk, a record without a value)."""
    if payload is None:
        return None
    if isinstance(payload, dict):
        kind = payload.get("kind") if payload.get("schema") == CONTROL_SCHEMA else None
        return kind if isinstance(kind, str) else None
    raw = payload.encode() if isinstance(payload, str) else payload
    if _CONTROL_MARK not in raw[:200]:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    kind = doc.get("kind") if isinstance(doc, dict) and doc.get("schema") == CONTROL_SCHEMA else None
    return kind if isinstance(kind, str) else None


def control_problem(payload: str | bytes | dict | None, key: bytes | None) -> str | None:
    """Why a worker must not act on a control message (the reason it is dead-lettered with), or None: its kind
    is one this gpufleet knows and it is signed with ``key`` (``kafka.control_key``). Anyone who can write to
    the topic can write a marker; only the holder of the key can make the workers flush."""
    kind = control_kind(payload)
    if kind is None:
        return "(message): not a control message"
    if kind not in CONTROL_KINDS:
        return f"kind: {kind[:40]!r} is not a control message this gpufleet knows ({', '.join(CONTROL_KINDS)})"
    if key is None:
        return ("sig: a control message is acted on only when signed with kafka.control_key, and this worker "
                "has none")
    doc = payload if isinstance(payload, dict) else json.loads(payload or b"")
    sig = doc.get("sig")
    if not isinstance(sig, str) or not hmac.compare_digest(sig, control_signature(key, doc)):
        return "sig: not signed with this worker's kafka.control_key (sent by a producer that does not hold it)"
    return None
