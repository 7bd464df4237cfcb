"""Billing: the price table (the ``billing`` settings section), the billing modes, and the tariff that prices records.

Each billing mode is one module here (its checks of a price-table entry and its formula), found through
:data:`MODES`; adding a mode is a module and a line below. Money is ``Decimal`` in the settings and in the
stored rows, exact fractions in between, never a float. Metering itself (rented seconds into records) is
``streams/metering.py``.
"""
from __future__ import annotations

from . import on_demand, reserved, spot, usage_weighted

MODES = {m.NAME: m for m in (on_demand, reserved, spot, usage_weighted)}
