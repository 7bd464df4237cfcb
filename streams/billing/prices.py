"""The price table and the other billing settings (section ``billing``), and the tariff that applies them.

A price-table entry names a pool or a GPU model (``match``; ``"*"`` for any), a billing mode and the time it
takes effect (``from``, a whole hour: a change applies from then on, never backwards). For a GPU, the
entries of a mode are looked up by its pool, then by its GPU model, then ``"*"``; of those, the one in effect
at the start of the billing period applies. A tenant is billed in its mode (``tenants``, else
``default_mode``); where the table has no entry of that mode for the GPU, the on-demand entry applies and
the record says so. MIG instances pay their share of the physical GPU: compute slices of the profile
(``3g.40gb``: 3) over the slices of the whole GPU (7; ``mig_slices`` names GPU models with other counts).

Prices are ``Decimal`` in the settings and amounts decimal strings out, never floats; in between the modes
compute with exact fractions, and each amount is rounded once, to 6 decimals (half up), per record.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from decimal import Decimal
from fractions import Fraction
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpufleet.contracts.waste import UNDERUSE_PCT, underused, unused_share

from .commitments import Commitment
from .metered import Metered, hours

HOUR_S = 3600
SCALE = 10**6              # money has 6 decimals
_MIG = re.compile(r"^(\d+)g\.")


def money(amount: Fraction | Decimal | int) -> str:
    """An exact amount as a decimal string with 6 decimals (``"12.345600"``), rounded half up (away from zero)."""
    f = Fraction(amount)
    units, rest = divmod(abs(f.numerator) * SCALE, f.denominator)
    if 2 * rest >= f.denominator:
        units += 1
    sign = "-" if f < 0 and units else ""
    return f"{sign}{units // SCALE}.{units % SCALE:06d}"


def written(value) -> str:
    """A value quoted as the user wrote it: a string as given, a TOML date-time in ISO form, a number as typed."""
    if isinstance(value, dt.datetime | dt.date):
        return repr(value.isoformat().replace("+00:00", "Z"))
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _unix(value) -> float:
    """A time as Unix seconds: a number, an ISO date or date-time (UTC unless it says otherwise), or a TOML date."""
    if isinstance(value, bool):
        raise ValueError("not a time")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            value = dt.datetime.fromisoformat(value)
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp()
    raise ValueError(f"{written(value)} is not a time (Unix seconds, YYYY-MM-DD or YYYY-MM-DDTHH:MM)")


class Price(BaseModel):
    """One entry of the price table."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    match: str = Field("*", min_length=1, max_length=253, description="pool or GPU model name, or * for any")
    mode: str = Field("on_demand", description="billing mode: on_demand, reserved, spot or usage")
    effective_from: float = Field(0.0, alias="from", ge=0,
                                  description="when it takes effect: a whole hour, UTC (default: always)")
    per_gpu_hour: Decimal | None = Field(None, ge=0, le=1_000_000, description="price of one GPU-hour")
    per_gpu_month: Decimal | None = Field(None, ge=0, le=100_000_000,
                                          description="reserved: price of one GPU for a calendar month")
    minimum_s: int = Field(0, ge=0, le=31 * 86400,
                           description="on_demand: every rental is billed at least this many seconds")
    hour_discounts: dict[str, Decimal] = Field(
        default_factory=dict, description='spot: share off by UTC hour or range of hours, e.g. {"0-6" = "0.4"}')
    weight: Literal["busy", "utilization"] = Field(
        "busy", description="usage: bill busy seconds, or every second weighted by utilization")

    @field_validator("effective_from", mode="before")
    @classmethod
    def _time(cls, v):
        t = _unix(v)
        if t % HOUR_S:
            raise ValueError(f"{written(v)} is not a whole hour: a price takes effect at the start of an hour (UTC)")
        return t

    @model_validator(mode="after")
    def _mode(self) -> Price:
        from . import MODES
        mode = MODES.get(self.mode)
        if mode is None:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        problem = mode.check(self)
        if problem:
            raise ValueError(problem)
        return self


def _default_prices() -> list[Price]:
    return [Price(match="*", mode="on_demand", per_gpu_hour=Decimal("2.0"))]


class BillingConfig(BaseModel):
    """The ``billing`` settings section."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(True, description="meter rented GPUs into billing records and the ledger")
    period_s: int = Field(3600, description="billing period; it must divide an hour")
    currency: str = Field("USD", pattern=r"^[A-Z]{3}$", description="currency of every price and amount")
    prices: list[Price] = Field(default_factory=_default_prices, min_length=1, description="the price table")
    default_mode: str = Field("on_demand", description="billing mode of tenants that tenants does not name")
    tenants: dict[str, str] = Field(default_factory=dict, description="billing mode by tenant")
    teams: dict[str, str] = Field(default_factory=dict,
                                  description='team by "tenant" or "tenant/job-prefix" (the longest match wins)')
    gap_policy: Literal["evidence", "bill", "skip"] = Field(
        "evidence", description="which telemetry gaps longer than three intervals of a rental are billed")
    max_gap_s: float = Field(3600.0, gt=0, le=31 * 86400, description="longer gaps are never billed")
    mig_slices: dict[str, int] = Field(default_factory=lambda: {"A30": 4},
                                       description="compute slices of a whole GPU by GPU model (substring); else 7")
    underuse_pct: float = Field(UNDERUSE_PCT, gt=0, le=100,
                                description="a rented GPU's billing period whose busy time ran below this mean "
                                            "utilization is underused: the unused share of it is waste")
    commitments: list[Commitment] = Field(default_factory=list,
                                          description="GPUs tenants commit to for a term, billed whether used or not")
    provider: str = Field("gpufleet", min_length=1, max_length=200,
                          description="the provider's name in FOCUS exports (Provider, Publisher, InvoiceIssuer)")
    spot_interruption_pct: float = Field(5.0, ge=0, lt=100,
                                         description="share of spot GPU-hours expected to be interrupted and run "
                                                     "again: bill --compare-modes prices spot with it")

    def default_price_note(self) -> str | None:
        """What every surface that shows money says when the price table is still the default flat price."""
        if self.prices != _default_prices():
            return None
        price = self.prices[0].per_gpu_hour
        return (f"every amount uses the default price, a flat {price:.2f} {self.currency} per GPU-hour for every GPU "
                "model and pool: set billing.prices to your price list")

    @field_validator("period_s")
    @classmethod
    def _period(cls, v: int) -> int:
        if not 60 <= v <= HOUR_S or HOUR_S % v:
            raise ValueError(f"{v} does not divide an hour into periods of at least 60 s (e.g. 900, 1800, 3600)")
        return v

    @field_validator("default_mode")
    @classmethod
    def _default_mode(cls, v: str) -> str:
        from . import MODES
        if v not in MODES:
            raise ValueError(f"{v!r} is not one of {', '.join(MODES)}")
        return v

    @field_validator("tenants")
    @classmethod
    def _tenant_modes(cls, v: dict[str, str]) -> dict[str, str]:
        from . import MODES
        for tenant, mode in v.items():
            if mode not in MODES:
                raise ValueError(f"tenant {tenant!r}: {mode!r} is not one of {', '.join(MODES)}")
        return v

    @field_validator("mig_slices")
    @classmethod
    def _slices(cls, v: dict[str, int]) -> dict[str, int]:
        for model, n in v.items():
            if not 1 <= n <= 8:
                raise ValueError(f"{model!r}: {n} slices is not between 1 and 8")
        return v

    @model_validator(mode="after")
    def _commitment_names(self) -> BillingConfig:
        seen: set[str] = set()
        for i, c in enumerate(self.commitments):
            if c.name in seen:
                raise ValueError(f"commitments.{i}.name: {c.name!r} names another commitment too")
            seen.add(c.name)
        return self

    @model_validator(mode="after")
    def _catch_all(self) -> BillingConfig:
        if not any(p.match == "*" and p.mode == "on_demand" and p.effective_from == 0 for p in self.prices):
            raise ValueError('the price table needs an on_demand entry with match = "*" and no "from", '
                             "so that every rented second has a price")
        return self


class Tariff:
    """The billing settings compiled for lookups: prices, tenants' modes, teams, MIG shares."""

    def __init__(self, config: BillingConfig | None = None):
        from . import MODES
        self.config = c = config or BillingConfig()
        self.modes = MODES
        self._prices: dict[tuple[str, str], list[Price]] = {}
        for p in sorted(c.prices, key=lambda p: p.effective_from):
            self._prices.setdefault((p.mode, p.match), []).append(p)
        self._teams = sorted(c.teams.items(), key=lambda kv: -len(kv[0]))
        self._versions: dict[tuple, str] = {}

    def price(self, mode: str, pool: str | None, model: str | None, at: float) -> Price | None:
        """The entry of ``mode`` in effect at ``at`` for a GPU of ``pool`` and ``model``, or None."""
        for key in (pool, model, "*"):
            if key is None:
                continue
            found = None
            for p in self._prices.get((mode, key), ()):
                if p.effective_from <= at:
                    found = p
            if found is not None:
                return found
        return None

    def mode_of(self, tenant: str) -> str:
        return self.config.tenants.get(tenant, self.config.default_mode)

    def team_of(self, tenant: str, job: str) -> str:
        for key, team in self._teams:
            who, _, prefix = key.partition("/")
            if who == tenant and job.startswith(prefix):
                return team
        return ""

    def share(self, model: str | None, mig_profile: str | None) -> Fraction:
        """Share of the physical GPU: 1, or a MIG profile's compute slices over the whole GPU's."""
        if not mig_profile:
            return Fraction(1)
        m = _MIG.match(mig_profile)
        if m is None:
            return Fraction(1)
        total = self.slices(model)
        return Fraction(min(int(m.group(1)), total), total)

    def slices(self, model: str | None) -> int:
        """Compute slices of a whole GPU of this model (``mig_slices``, else 7)."""
        return next((n for name, n in self.config.mig_slices.items() if model and name in model), 7)

    def minimum_ms(self, pool: str | None, model: str | None, at: float) -> int:
        p = self.price("on_demand", pool, model, at)
        return 0 if p is None else p.minimum_s * 1000

    def hourly(self, tenant: str, pool: str | None, model: str | None, mig_profile: str | None, at: float) -> str:
        """What one hour of this GPU (or MIG instance) costs the tenant at ``at``, as money: the idle alerts' price."""
        mode = self.mode_of(tenant)
        price = self.price(mode, pool, model, at)
        if price is None:
            mode, price = "on_demand", self.price("on_demand", pool, model, at)
        assert price is not None        # the table has a catch-all on-demand entry
        return money(self.modes[mode].hourly(price, int(at // HOUR_S * HOUR_S)) * self.share(model, mig_profile))

    def bill(self, m: Metered, tenant: str, pool: str | None, model: str | None, share: Fraction) -> dict:
        """The money of one record: the tenant's mode, its hourly price, amount and idle amount, and what the
        record costs in every mode the table prices for this GPU."""
        at = float(m.period_start)
        by_mode: dict[str, tuple[Price, Fraction, Fraction]] = {}
        for name, mode in self.modes.items():
            price = self.price(name, pool, model, at)
            if price is not None:
                amount, idle = mode.charge(price, m)
                by_mode[name] = (price, amount * share, idle * share)
        name = self.mode_of(tenant)
        if name not in by_mode:
            name = "on_demand"
        price, amount, idle = by_mode[name]
        hourly = self.modes[name].hourly(price, m.period_start)
        return {"billing_mode": name, "price_per_gpu_hour": money(hourly), "amount": money(amount),
                "idle_amount": money(idle), "amounts_by_mode": {k: money(v[1]) for k, v in by_mode.items()},
                **self._waste(m, name, price, amount, idle, by_mode, share)}

    def _waste(self, m: Metered, mode: str, price: Price, amount: Fraction, idle: Fraction,
               by_mode: dict, share: Fraction) -> dict:
        """The period's waste (gpufleet/contracts/waste.py): underused busy time, what the tenant paid for the
        unused share of it, and what the provider lost where the tenant pays by utilization."""
        busy = m.busy_priced_ms
        low = underused(busy, m.busy_weighted_ms, self.config.underuse_pct)
        unused = unused_share(busy, m.busy_weighted_ms) if low else Fraction(0)
        listed = by_mode["on_demand"][0] if "on_demand" in by_mode else price
        list_hourly = self.modes["on_demand"].hourly(listed, m.period_start) * share
        tenant = provider = Fraction(0)
        if mode == "usage":
            # a tenant billed by use pays for what it used: its idle time (free, or nearly) and the unused share of
            # its underused time are the provider's unsold capacity, at the list price, never the tenant's waste
            provider = list_hourly * hours(m.idle_priced_ms) - idle + list_hourly * hours(busy) * unused
        else:
            tenant = (amount - idle) * unused
        return {"underused_ms": busy if low else 0, "unused_amount": money(max(tenant, Fraction(0))),
                "unsold_amount": money(max(provider, Fraction(0)))}

    def version(self, tenant: str, pool: str | None, model: str | None, at: float) -> str:
        """The version of the price book that prices this tenant's GPU at ``at``: a digest of what its amounts
        depend on (the tenant's mode, the entry of every mode in effect then, the currency and the waste
        threshold). A price corrected after the fact, or a tenant moved to another mode, gives another version;
        entries that do not apply to the GPU, or that take effect later, do not."""
        entries = tuple(self.price(name, pool, model, at) for name in self.modes)
        key = (self.mode_of(tenant), tuple(id(p) for p in entries), self.slices(model))
        found = self._versions.get(key)
        if found is None:
            text = json.dumps([key[0], [None if p is None else p.model_dump(mode="json", by_alias=True)
                                        for p in entries], self.config.currency, self.config.underuse_pct,
                               str(key[2])], sort_keys=True, default=str)
            found = self._versions[key] = hashlib.blake2b(text.encode(), digest_size=6).hexdigest()
        return found

