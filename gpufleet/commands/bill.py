"""``gpufleet bill``: a month's invoice-like summary per tenant."""
from __future__ import annotations

from gpufleet.errors import UsageError

from .common import (
    readable_store,
    settings_of,
    store_options,
)


def cmd_bill(args) -> int:
    from gpufleet import bill
    try:
        bill.month_start(args.month)
    except ValueError as err:
        raise UsageError(f"{args.prog}: argument --month: {err}") from None
    settings = settings_of(args)
    store = readable_store(settings)
    try:
        invoices = bill.invoice(store, args.month, args.tenant, args.compare_modes)
    finally:
        store.close()
    if args.format == "json":
        print(bill.as_json(invoices))
    elif args.format == "csv":
        print(bill.as_csv(invoices, args.compare_modes), end="")
    else:
        print(bill.as_table(invoices, args.compare_modes, settings.billing.underuse_pct))
    return 0


def add_bill(sub) -> None:
    s = sub.add_parser("bill", help="a month's invoice-like summary per tenant, from the billing ledger",
                       description="Print, per tenant, a month's billing from the ledger: a line per pool and GPU "
                                   "model with rented, busy and idle hours, the idle time's cost, hours billed "
                                   "across telemetry gaps and the amount; the total; waste beyond idle (rentals "
                                   "busy below 60% utilization, over-provisioned multi-GPU jobs). Reads only.")
    s.add_argument("--month", required=True, metavar="YYYY-MM", help="the month (UTC)")
    s.add_argument("--tenant", help="only this tenant")
    s.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output (default table)")
    s.add_argument("--compare-modes", action="store_true",
                   help="also what the month would have cost in each billing mode the price table prices "
                        "(the cheapest complete one marked); with --format csv, only that")
    store_options(s)
    s.set_defaults(fn=cmd_bill)
