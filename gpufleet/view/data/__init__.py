"""What the operator's view reads from the store: every chart's data as plain, JSON-ready values.

Every read is bounded: a time window on the tables' time keys, ``FINAL`` only where repeated rows would change
the answer, and limits on what can grow with the fleet (incidents, peers). Times are Unix seconds (UTC); money is a
decimal string with 6 decimals, never a float (as on the billing records).

"Now" is the fleet's event time: the end of the latest minute of telemetry in the store, so a replayed recording
shows as it was, and a live fleet shows the latest the workers have stored.
"""
from __future__ import annotations

from .alerts import AlertReads
from .billing import BillingReads
from .common import (
    ViewError,
    Window,
    bucket_for,
    iso,
    money,
    month_start,
    next_month,
    parse_hours,
    parse_time,
)
from .demand import DemandReads
from .heatmap import HeatmapReads
from .idle import IdleReads
from .usage import UsageReads
from .waste import WasteReads


class FleetData(HeatmapReads, UsageReads, WasteReads, IdleReads, AlertReads, DemandReads, BillingReads):
    """The reads behind the fleet page, the report, the terminal view and their JSON.

    ``store`` is a :class:`gpufleet.sql.store.Store` (only ``query`` is used); ``currency`` names money where the
    store's records do not (setting billing.currency); incidents still firing are looked for ``alert_days`` back;
    ``underuse_pct`` is setting billing.underuse_pct (waste); ``price_note`` says that the prices are the default
    flat one, where they are.

    One class of reads per section of the page, each in its own module here."""


__all__ = ["FleetData", "ViewError", "Window", "bucket_for", "iso", "money", "month_start", "next_month",
           "parse_hours", "parse_time"]
