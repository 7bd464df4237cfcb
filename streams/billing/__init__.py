"""Billing, all of it: what a rented GPU-second costs, and every output finance reads.

- the price table (the ``billing`` settings section) and the tariff that prices records (``prices.py``), the
  billing modes (one module each, found through :data:`MODES`: a mode is a module and a line below), commitments
  (``commitments.py``);
- metering, rented seconds into billing records in each node's stream (``metering.py``), and the underuse rule
  over those records (``underuse.py``);
- the ledger: its rows, closed months and adjustments (``ledger.py``), re-rating (``rerate.py``), closing a month
  and the finance views' reads (``finance.py``);
- the invoice (``invoice.py``) and the FOCUS export (``focus.py``).

Money is ``Decimal`` in the settings and in the stored rows, exact fractions in between, never a float.
"""
from __future__ import annotations

from . import on_demand, reserved, spot, usage_weighted

MODES = {m.NAME: m for m in (on_demand, reserved, spot, usage_weighted)}
