"""Commitments (``billing.commitments``): GPUs a tenant commits to for a term, billed whether used or not.

A commitment names a tenant, the pool it covers (``"*"``: any of the tenant's pools), how many GPUs, its first
month and its term in months, and its price per GPU and calendar month. Each month of the term bills
``gpus x per_gpu_month`` (the billed cost), whatever was used. In each billing period the commitment covers up to
``gpus x period_s`` GPU-seconds of the tenant's rented time in its pool (MIG instances by their share): that usage
is paid by the commitment (its amount at the tenant's other mode is taken off the invoice, ``covered_amount``);
usage beyond it falls to the tenant's other mode (``billing.tenants``, else ``default_mode``), as the ledger
already priced it. The fee is amortized evenly over the month's periods: a period's amortized cost is
``fee x period_s / month_s``, used in the share of the committed GPU-seconds that were used; what is left is the
unused commitment (``unused_amount``). Commitments of one pool are applied before those of ``"*"``, then in the
order given. All money is exact (fractions), rounded once per month and commitment to 6 decimals.

:func:`best_size` answers ``bill --compare-modes``: the number of committed GPUs that would have cost least for
the usage seen, at a price per GPU-month (the price table's ``reserved`` entry), against paying on demand.
"""
from __future__ import annotations

import calendar
import datetime as dt
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])(?:-01)?$")


def month_seconds(month: dt.date) -> int:
    return calendar.monthrange(month.year, month.month)[1] * 86400


def add_months(month: dt.date, n: int) -> dt.date:
    k = month.year * 12 + month.month - 1 + n
    return dt.date(k // 12, k % 12 + 1, 1)


class Commitment(BaseModel):
    """One entry of ``billing.commitments``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field("", max_length=200, description="the commitment's id (default tenant/pool/start)")
    tenant: str = Field(min_length=1, max_length=253, description="the tenant that commits")
    pool: str = Field("*", min_length=1, max_length=253, description="the pool it covers, or * for any")
    gpus: int = Field(ge=1, le=1_000_000, description="GPUs committed")
    start: dt.date = Field(description="its first month, YYYY-MM (UTC)")
    term_months: int = Field(12, ge=1, le=120, description="months it lasts")
    per_gpu_month: Decimal = Field(ge=0, le=100_000_000, description="price of one committed GPU for a month")

    @field_validator("start", mode="before")
    @classmethod
    def _month(cls, v):
        if isinstance(v, dt.datetime):
            v = v.date()
        if isinstance(v, dt.date):
            if v.day != 1:
                raise ValueError(f"{v.isoformat()!r} is not the first day of a month: a commitment starts with a "
                                 "month (YYYY-MM)")
            return v
        m = _MONTH.match(str(v))
        if m is None:
            raise ValueError(f"{v!r} is not a month as YYYY-MM")
        return dt.date(int(m.group(1)), int(m.group(2)), 1)

    @model_validator(mode="after")
    def _name(self) -> Commitment:
        if not self.name:
            object.__setattr__(self, "name", f"{self.tenant}/{self.pool}/{self.start:%Y-%m}")
        return self

    @property
    def end(self) -> dt.date:
        """The first month after its term."""
        return add_months(self.start, self.term_months)

    def active(self, month: dt.date) -> bool:
        return self.start <= month < self.end

    def covers(self, tenant: str, pool: str) -> bool:
        return tenant == self.tenant and self.pool in ("*", pool)


@dataclass
class Month:
    """One commitment's month: fee, amortized used and unused cost, committed and used GPU-hours, and the usage it
    covered (at the tenant's other mode's prices)."""

    commitment: Commitment
    month: dt.date
    fee: Fraction = Fraction(0)
    amortized: Fraction = Fraction(0)
    committed_s: Fraction = Fraction(0)
    used_s: Fraction = Fraction(0)
    covered: Fraction = Fraction(0)
    by_pool: dict[str, Fraction] = field(default_factory=dict)      # covered amount per pool
    taken: dict[tuple[str, int], Fraction] = field(default_factory=dict)   # (pool, period) -> GPU-seconds covered

    @property
    def rate(self) -> Fraction:
        """The amortized cost of one covered GPU-second: the fee over the committed GPU-seconds."""
        return self.fee / self.committed_s if self.committed_s else Fraction(0)

    @property
    def unused(self) -> Fraction:
        return self.fee - self.amortized


def allocate(commitments: list[Commitment], tenant: str, month: dt.date, period_s: int,
             usage: dict[tuple[str, int], tuple[Fraction, Fraction]]) -> list[Month]:
    """The tenant's commitments active in ``month`` applied to its usage: ``usage`` maps (pool, period start) to
    (GPU-seconds rented, their amount at the tenant's other mode)."""
    mine = [c for c in commitments if c.tenant == tenant and c.active(month)]
    mine.sort(key=lambda c: c.pool == "*")                     # a pool's own first, then the catch-alls
    periods = month_seconds(month) // period_s
    left = {k: v[0] for k, v in usage.items()}
    out = []
    for c in mine:
        fee = Fraction(c.per_gpu_month) * c.gpus
        cap = Fraction(c.gpus * period_s)
        m = Month(c, month, fee=fee, committed_s=cap * periods)
        used_by_period: dict[int, Fraction] = {}
        for (pool, start), (used, amount) in sorted(usage.items()):
            if not c.covers(tenant, pool) or not left[(pool, start)]:
                continue
            room = cap - used_by_period.get(start, Fraction(0))
            take = min(room, left[(pool, start)])
            if take <= 0:
                continue
            used_by_period[start] = used_by_period.get(start, Fraction(0)) + take
            left[(pool, start)] -= take
            m.taken[(pool, start)] = take
            share = amount * take / used if used else Fraction(0)
            m.covered += share
            m.by_pool[pool] = m.by_pool.get(pool, Fraction(0)) + share
        m.used_s = sum(used_by_period.values(), Fraction(0))
        m.amortized = fee * m.used_s / m.committed_s
        out.append(m)
    return out


def best_size(price_per_gpu_month: Fraction, period_s: int,
              usage: dict[int, tuple[Fraction, Fraction]]) -> tuple[int, Fraction]:
    """The commitment size (GPUs) that costs least for one pool's month of usage, and that cost: ``usage`` maps a
    period start to (GPU-seconds rented, their on-demand amount). A commitment of N GPUs costs N months of the
    price; the usage beyond N GPUs in a period is paid on demand."""
    most = max((math.ceil(used / period_s) for used, _ in usage.values()), default=0)
    best: tuple[int, Fraction] | None = None
    for n in range(most + 1):
        cost = price_per_gpu_month * n
        for used, amount in usage.values():
            beyond = used - n * period_s
            if beyond > 0:
                cost += amount * beyond / used
        if best is None or cost < best[1]:
            best = (n, cost)
    assert best is not None
    return best
