"""Settings of the stream processors (the ``stream`` section of gpufleet's settings)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpufleet.contracts.events import DEFAULT_MANUAL_URL

# settings that the price table (billing.prices, streams/billing/prices.py) replaced
MOVED = {"prices": "billing.prices, one entry per pool or GPU model",
         "default_price_per_gpu_hour": 'billing.prices, the entry with match = "*"',
         "currency": "billing.currency"}


class StreamConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    lateness_s: float = Field(30.0, ge=0, le=3600, description="allowed lateness behind a node's newest sample")
    dedup_horizon_s: float = Field(
        900.0, ge=0, le=86400,
        description="how long released sample times are remembered to tell a repeat from a late one")
    default_interval_s: float = Field(5.0, gt=0, le=3600,
                                      description="sampling interval assumed when a message has none")
    idle_threshold_pct: float = Field(5.0, gt=0, le=100, description="a rented GPU below this utilization is idle")
    idle_window_s: float = Field(600.0, gt=0, le=7 * 86400,
                                 description="how long a GPU must stay idle before it counts")
    max_clock_skew_s: float = Field(300.0, gt=0,
                                    description="live mode: messages further ahead of the clock are dead-lettered")
    raw_samples: bool = Field(True, description="store every GPU sample (with a TTL) besides the rollups")
    node_idle_s: float = Field(
        120.0, gt=0, le=86400,
        description="live mode: a node silent this long (wall clock) while its partition is read to the end no "
                    "longer holds the job stage back")
    clock_step_s: float = Field(
        600.0, gt=0, le=86400,
        description="messages ahead of their collector's sequence (a clock that stepped forward, a copy stamped in "
                    "the future) hold a node's watermark until they have agreed with each other for this long of "
                    "their own time; then the node's clock is taken to have stepped")
    silent_after_s: float = Field(
        600.0, gt=0, le=7 * 86400,
        description="a node whose telemetry has a gap longer than this is silent: its alerts resolve as \"no "
                    "telemetry since\" its last message (found by the gap itself, and sooner by stream time in replay "
                    "and the demo, by wall clock in the live mode)")
    manual_url: str = Field(
        DEFAULT_MANUAL_URL, pattern=r"^https?://[^\s]+/$",
        description="the manual's base URL (ending in /): every alert's runbook_url points at its kind's runbook in "
                    "it; the default is the manual gpufleet serve serves at /manual/ once make docs built it")
    model: str | None = Field(None,
                              description="path of a trained model (gpufleet model train); default: the packaged one")
    hold_down_s: dict[str, float] = Field(
        default_factory=dict,
        description="per alert kind, seconds a cleared condition must stay clear before its incident resolves (one "
                    "that comes back within it is the same incident); a kind not named keeps its default "
                    "(the manual: detectors, hold-downs)")

    @field_validator("hold_down_s")
    @classmethod
    def _known_kinds(cls, v: dict[str, float]) -> dict[str, float]:
        from gpufleet.models.detectors import KINDS
        for kind, seconds in v.items():
            if kind not in KINDS:
                raise ValueError(f"{kind!r} is not an alert kind the detectors raise ({', '.join(KINDS)})")
            if not 0 <= seconds <= 86400:
                raise ValueError(f"{kind}: {seconds:g} is not between 0 and 86400 seconds")
        return v

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data):
        if isinstance(data, dict):
            for name in MOVED:
                if name in data:
                    raise ValueError(f"{name} moved to the billing section: {MOVED[name]} (docs/billing.md)")
        return data
