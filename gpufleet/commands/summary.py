"""``gpufleet summary``: the fleet summary from the store."""
from __future__ import annotations

from . import COMMANDS
from .common import (
    readable_store,
    settings_of,
    store_options,
)


def cmd_summary(args) -> int:
    from gpufleet.summary import render
    store = readable_store(settings_of(args))
    try:
        print(render(store))
    finally:
        store.close()
    return 0


def add_summary(sub) -> None:
    s = sub.add_parser("summary", help=COMMANDS["summary"].summary,
                       description="Print the fleet summary (utilization by pool and tenant, idle GPU-hours, "
                                   "longest idle windows, alerts) read from the store with SQL.")
    store_options(s)
    s.set_defaults(fn=cmd_summary)
