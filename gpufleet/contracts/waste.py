"""Waste: one definition, computed once when a billing period closes and read by every surface.

A rented GPU's time in a billing period (``billing.period_s``, an hour by default) is one of:

- **idle**: in an idle window (below ``stream.idle_threshold_pct`` in every sample for ``stream.idle_window_s``):
  all of it is waste;
- **busy**: the rest. The period is **underused** when its busy time's mean utilization is below
  ``billing.underuse_pct`` (60 %): the unused share of that busy time, ``100 % - utilization``, is waste.
  Idle time is never in it (counted once, as idle).

Money, per period, at what that GPU-hour costs its tenant (``price_per_gpu_hour``):

- ``idle_amount``: what the tenant paid for its idle time;
- ``unused_amount``: what the tenant paid for the unused share of an underused period's busy time;
- ``unsold_amount``: what the provider lost where the tenant did not pay for the unused time, at the list
  (on-demand) price: under usage billing the idle time (free, or nearly, to the tenant), and, billed by
  utilization, the unused share of an underused period too.

The waste a tenant pays for is ``idle_amount + unused_amount``; the provider's is ``unsold_amount``. A worked
example: an hour of an H100 at 4.00 an hour, 10 minutes idle, 50 minutes busy at 20 %: idle 10 min (0.67),
underused 50 min, unused share 80 % of 3.33 = 2.67; waste 3.33 of the 4.00 billed. Billed by utilization at the
same price, the tenant pays 0.67 and the provider loses 0.67 + 2.67 = 3.33 (``unsold_amount``).

The stream writes these columns into every billing record (``gpufleet.billing.v1``: ``underused_s``,
``unused_amount``, ``unsold_amount``) and the ledger; the fleet page, the report, ``top``, ``gpufleet bill``, the
finance views, the Grafana dashboards and ``/metrics`` all sum them (``SUMS``), so they give the same GPU-hours
and money.
"""
from __future__ import annotations

from fractions import Fraction

UNDERUSE_PCT = 60.0          # %, default of billing.underuse_pct: a rental held below it is underused


def underused(busy_ms: int, busy_weighted_ms: Fraction, threshold_pct: float) -> bool:
    """Whether a period's busy time (``busy_ms``, its utilization-weighted ``busy_weighted_ms``) is underused."""
    return busy_ms > 0 and Fraction(busy_weighted_ms) * 100 < Fraction(threshold_pct) * busy_ms


def unused_share(busy_ms: int, busy_weighted_ms: Fraction) -> Fraction:
    """The share of the busy time its utilization left unused (0 with no busy time)."""
    return 1 - Fraction(busy_weighted_ms) / busy_ms if busy_ms else Fraction(0)


# The sums every surface reads from billing_ledger (FINAL): seconds as hours, money as the ledger's decimals.
SUMS = ("sum(rented_s) / 3600 AS rented_hours, sum(idle_s) / 3600 AS idle_hours, "
        "sum(underused_s) / 3600 AS underused_hours, sum(idle_amount) AS idle_amount, "
        "sum(unused_amount) AS unused_amount, sum(unsold_amount) AS unsold_amount, sum(amount) AS amount")
FIELDS = ("rented_hours", "idle_hours", "underused_hours", "idle_amount", "unused_amount", "unsold_amount",
          "amount")
