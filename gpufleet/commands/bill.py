"""``gpufleet bill``: a month's invoice-like summary per tenant; ``bill rerate`` and ``bill close`` (which write),
``bill capacity`` and ``bill export`` (which read)."""
from __future__ import annotations

import datetime as dt
import sys

from gpufleet.errors import UsageError

from . import COMMANDS
from .common import (
    Parser,
    Progress,
    readable_store,
    settings_of,
    store_options,
)


def check_month(prog: str, text: str | None, flag: str = "--month") -> dt.date:
    from gpufleet import bill
    if text is None:
        raise UsageError(f"{prog}: argument {flag} is required (YYYY-MM)")
    try:
        return bill.month_start(text)
    except ValueError as err:
        raise UsageError(f"{prog}: argument {flag}: {err}") from None


def _tariff(settings):
    from gpufleet.streams.billing.prices import Tariff
    return Tariff(settings.billing)


def cmd_bill(args) -> int:
    from gpufleet import bill
    if getattr(args, "bill_command", None):
        return args.bill_fn(args)
    check_month(args.prog, args.month)
    settings = settings_of(args)
    store = readable_store(settings)
    try:
        invoices = bill.invoice(store, args.month, args.tenant, args.compare_modes, _tariff(settings))
    finally:
        store.close()
    if args.format == "json":
        print(bill.as_json(invoices))
    elif args.format == "csv":
        print(bill.as_csv(invoices, args.compare_modes), end="")
    else:
        print(bill.as_table(invoices, args.compare_modes, settings.billing.underuse_pct))
    return 0


def when(prog: str, flag: str, text: str) -> dt.datetime:
    """A time as YYYY-MM, YYYY-MM-DD or YYYY-MM-DDTHH:MM (UTC), on a whole hour."""
    import re
    m = re.match(r"^(\d{4})-(0[1-9]|1[0-2])$", text)
    try:
        t = (dt.datetime(int(m.group(1)), int(m.group(2)), 1) if m else dt.datetime.fromisoformat(text))
    except ValueError:
        raise UsageError(f"{prog}: argument {flag}: {text!r} is not a time as YYYY-MM, YYYY-MM-DD or "
                         "YYYY-MM-DDTHH:MM (UTC)") from None
    t = t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)
    if t.minute or t.second or t.microsecond:
        raise UsageError(f"{prog}: argument {flag}: {text!r} is not on a whole hour")
    return t


def cmd_rerate(args) -> int:
    from gpufleet import finance
    start, end = when(args.prog, "--from", args.start), when(args.prog, "--to", args.end)
    if end <= start:
        raise UsageError(f"{args.prog}: argument --to: {args.end!r} is not after --from {args.start!r}")
    if not args.reason.strip():
        raise UsageError(f"{args.prog}: argument --reason: {args.reason!r} is empty: say why the prices changed")
    settings = settings_of(args)
    store = readable_store(settings)
    try:
        progress = Progress("rerate", unit="rows")
        done = finance.rerate(store, _tariff(settings), start, end, args.reason, progress, write=not args.dry_run)
        progress(done["rows"], final=True)
    finally:
        store.close()
    verb = "would change" if args.dry_run else "changed"
    print(f"{done['rows']:,} rows from {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC priced again: "
          f"{verb} {done['changed']:,} ({done['ledger']:,} in the ledger, {done['adjustments']:,} as adjustments "
          f"of closed months)" + ("" if args.dry_run or not done["changed"]
                                  else f"; audit: billing_rerate_audit, rerate_id {done['rerate_id']}"))
    for (tenant, currency), change in sorted(done["by_tenant"].items()):
        print(f"  {tenant}: {change:+} {currency}")
    return 0


def cmd_close(args) -> int:
    from gpufleet import finance
    month = check_month(args.prog, args.month)
    if not args.reason.strip():
        raise UsageError(f"{args.prog}: argument --reason: {args.reason!r} is empty")
    settings = settings_of(args)
    store = readable_store(settings)
    try:
        try:
            done = finance.close(store, _tariff(settings), month, args.reason)
        except ValueError as err:
            raise UsageError(f"{args.prog}: argument --month: {err}") from None
    finally:
        store.close()
    if done["already"]:
        print(f"{month:%Y-%m} was closed already: nothing changed")
    else:
        print(f"{month:%Y-%m} closed: {done['rows']:,} ledger rows frozen, {done['commitments']} commitment months "
              "recorded; later data and re-ratings of it go to billing_adjustments, invoiced next month")
    return 0


def cmd_capacity(args) -> int:
    from gpufleet import bill, finance
    month = check_month(args.prog, args.month)
    settings = settings_of(args)
    store = readable_store(settings)
    try:
        rows = finance.capacity(store, _tariff(settings), month, args.pool)
    finally:
        store.close()
    print(bill.capacity_text(rows, month, settings.billing.currency, args.format, args.hourly), end="")
    return 0


def cmd_export(args) -> int:
    from gpufleet import focus
    month = check_month(args.prog, args.month)
    settings = settings_of(args)
    store = readable_store(settings)
    try:
        rows = focus.rows(store, _tariff(settings), month)
    finally:
        store.close()
    try:
        n = focus.write(rows, args.output, args.format)
    except OSError as err:
        raise UsageError(f"{args.prog}: argument -o: cannot write {args.output!r}: {err.strerror}") from None
    print(f"{n:,} FOCUS {focus.FOCUS_VERSION} rows for {month:%Y-%m} written to {args.output}", file=sys.stderr)
    return 0


def add_bill(sub) -> None:
    s = sub.add_parser("bill", help=COMMANDS["bill"].summary,
                       description="Print, per tenant, a month's billing from the ledger: a line per pool and GPU "
                                   "model with rented, busy and idle hours, the idle time's cost, hours billed "
                                   "across telemetry gaps and the amount; the total; waste beyond idle (rentals "
                                   "busy below billing.underuse_pct utilization, over-provisioned multi-GPU jobs); "
                                   "the commitments (billed whether used or not, with their amortized and unused "
                                   "cost) and the adjustments to closed months invoiced this month; what is due. "
                                   "Reads only. The actions below: rerate and close write, capacity and export "
                                   "read.")
    s.add_argument("--month", metavar="YYYY-MM", help="the month (UTC); required without an action")
    s.add_argument("--tenant", help="only this tenant")
    s.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output (default table)")
    s.add_argument("--compare-modes", action="store_true",
                   help="also what the month would have cost on demand, with the commitment size that costs least "
                        "for the usage seen (at the price table's reserved price per GPU-month), on spot with the "
                        "expected interruptions (billing.spot_interruption_pct) and billed by use; the cheapest "
                        "complete one marked; with --format csv, only that")
    store_options(s)
    s.set_defaults(fn=cmd_bill, bill_command=None)
    actions = s.add_subparsers(dest="bill_command", metavar="ACTION", parser_class=Parser)

    r = actions.add_parser("rerate", help="WRITES: price stored usage again under the current price book",
                           description="WRITES to the store. Price the ledger rows of [--from, --to) again under "
                                       "the current price book (billing.prices and billing.tenants). Each row whose "
                                       "money or price version changes is written again with rerated_at and "
                                       "recorded in billing_rerate_audit (old and new amount, versions, when, "
                                       "--reason); rows of closed months are not changed: their changes go to "
                                       "billing_adjustments, invoiced in the next open month. Idempotent: run "
                                       "again, it changes nothing.")
    r.add_argument("--from", dest="start", required=True, metavar="WHEN",
                   help="first hour, UTC: YYYY-MM, YYYY-MM-DD or YYYY-MM-DDTHH:MM")
    r.add_argument("--to", dest="end", required=True, metavar="WHEN", help="end (not included), same forms")
    r.add_argument("--reason", required=True, help="why, recorded with every change (e.g. 'H100 price corrected')")
    r.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    store_options(r, inherited=True)
    r.set_defaults(bill_fn=cmd_rerate)

    c = actions.add_parser("close", help="WRITES: close a month that is over, freezing its ledger rows",
                           description="WRITES to the store. Close a month that is over: its ledger rows are frozen "
                                       "(billing_months) and its commitments recorded as they stand "
                                       "(billing_commitment_ledger). Data arriving for it later, and re-ratings of "
                                       "it, go to billing_adjustments and show on the next month's invoice. "
                                       "Closing a closed month again changes nothing.")
    c.add_argument("--month", required=True, metavar="YYYY-MM", help="the month (UTC)")
    c.add_argument("--reason", default="month end", help="recorded with the close (default 'month end')")
    store_options(c, inherited=True)
    c.set_defaults(bill_fn=cmd_close)

    k = actions.add_parser("capacity", help="installed, rented and unsold GPU-hours per pool, unsold at list price",
                           description="Per pool, the month's installed GPU-hours (GPUs reporting telemetry), "
                                       "rented and unsold ones (billing_capacity_hourly), the unsold hours priced "
                                       "at list (the pool's on-demand price then). Reads only.")
    k.add_argument("--month", required=True, metavar="YYYY-MM", help="the month (UTC)")
    k.add_argument("--pool", help="only this pool")
    k.add_argument("--hourly", action="store_true", help="one line per pool and hour (default: per pool and day)")
    k.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output (default table)")
    store_options(k, inherited=True)
    k.set_defaults(bill_fn=cmd_capacity)

    e = actions.add_parser("export", help="the month as a FOCUS cost and usage file (CSV or Parquet)",
                           description="Write the month's billing as a FinOps FOCUS 1.0 dataset: one row per "
                                       "tenant, pool, GPU model, billing mode and day of usage, the commitments' "
                                       "purchases and unused commitment, and the adjustments invoiced this month. "
                                       "Checked by the FinOps Foundation's focus-validator. Reads the store only; "
                                       "writes the file.")
    e.add_argument("--month", required=True, metavar="YYYY-MM", help="the billing period (UTC)")
    e.add_argument("--format", required=True, choices=["focus-csv", "focus-parquet"],
                   help="focus-csv (exact decimals) or focus-parquet (needs pyarrow: pip install 'gpufleet[finance]')")
    e.add_argument("-o", "--output", required=True, metavar="FILE", help="the file to write")
    store_options(e, inherited=True)
    e.set_defaults(bill_fn=cmd_export)
