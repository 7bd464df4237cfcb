"""``gpufleet bill``: a month's invoice-like summary per tenant; ``bill rerate`` and ``bill close`` (which write),
``bill capacity`` and ``bill export`` (which read)."""
from __future__ import annotations

import datetime as dt
import sys
from decimal import Decimal

from gpufleet.errors import UsageError
from gpufleet.summary import table

from . import COMMANDS
from .common import (
    Parser,
    Progress,
    readable_store,
    settings_of,
    store_options,
)


def check_month(prog: str, text: str | None, flag: str = "--month") -> dt.date:
    from gpufleet.streams.billing import invoice as bill
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
    from gpufleet.streams.billing import invoice as bill
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
        print(invoice_text(invoices, args.compare_modes, settings.billing.underuse_pct))
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
    from gpufleet.streams.billing import finance
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
    from gpufleet.streams.billing import finance
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
    from gpufleet.streams.billing import finance
    month = check_month(args.prog, args.month)
    settings = settings_of(args)
    store = readable_store(settings)
    try:
        rows = finance.capacity(store, _tariff(settings), month, args.pool)
    finally:
        store.close()
    print(capacity_text(rows, month, settings.billing.currency, args.format, args.hourly), end="")
    return 0


def cmd_export(args) -> int:
    from gpufleet.streams.billing import focus
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


# -- text output ----------------------------------------------------------------------------------------------
def invoice_text(bill: dict, compare_modes: bool = False, underuse_pct: float = 60.0) -> str:
    """The invoices as text tables, one per tenant and currency."""
    from gpufleet.streams.billing.invoice import LINE_COLUMNS, _cents, _money
    if not bill["invoices"]:
        return f"no billing records for {bill['month']}"
    parts = []
    for inv in bill["invoices"]:
        cur = inv["currency"]
        rows = [tuple(_cents(line[c]) if c in ("idle_amount", "amount") else line[c] for c in LINE_COLUMNS)
                for line in inv["lines"]]
        t = inv["total"]
        rows.append(("total", "", None, t["rented_hours"], t["busy_hours"], t["idle_hours"], _cents(t["idle_amount"]),
                     t["estimated_hours"], _cents(t["amount"])))
        text = [f"{inv['tenant']}: {bill['month']}, {cur}",
                table(["pool", "GPU model", "GPUs", "rented h", "busy h", "idle h", "idle cost", "estimated h",
                       "amount"], rows) if inv["lines"] else "no usage this month"]
        waste = []
        low = inv["waste"]["low_utilization"]
        if low:
            waste.append(f"  underused (busy below {underuse_pct:g} % utilization in a billing period): "
                         f"{low['rentals']} rentals, {low['busy_hours']} busy hours; the unused share paid by the "
                         f"tenant {_money(low['unused_amount'])} {cur}")
            if Decimal(low["unsold_amount"]):
                waste.append(f"  not paid by the tenant (billed by use), the provider's unsold capacity: "
                             f"{_money(low['unsold_amount'])} {cur}")
        for job in inv["waste"]["overprovisioned"]:
            waste.append(f"  over-provisioned: job {job['job']} left {job['idle_gpus']} of its {job['gpus']} GPUs "
                         f"idle, {job['idle_gpu_hours']} GPU-hours, {_money(job['idle_gpu_amount'])} {cur}")
        if inv["lines"]:
            text.append("waste beyond idle:\n" + ("\n".join(waste) if waste else "  none"))
        if inv["commitments"]:
            text.append("commitments (billed whether used or not):\n" + table(
                ["commitment", "pool", "GPUs", "committed h", "used h", "billed", "amortized", "unused",
                 "usage covered"],
                [(c["commitment"], c["pool"], c["gpus"], c["committed_hours"], c["used_hours"],
                  _cents(c["billed_amount"]), _cents(c["amortized_amount"]), _cents(c["unused_amount"]),
                  _cents(c["covered_amount"])) for c in inv["commitments"]]))
        if inv["adjustments"]:
            text.append("adjustments to closed months:\n" + table(
                ["month of use", "kind", "rows", "amount"],
                [(a["usage_month"], a["kind"], a["rows"], _cents(a["amount"])) for a in inv["adjustments"]]))
        due = inv["due"]
        if inv["commitments"] or inv["adjustments"]:
            text.append(f"due: usage {_money(due['usage'])} - covered by commitments "
                        f"{_money(-due['covered_by_commitments'])} + commitments {_money(due['commitments'])} + "
                        f"adjustments {_money(due['adjustments'])} = {_money(due['total'])} {cur}")
        else:
            text.append(f"due: {_money(due['total'])} {cur}")
        if compare_modes:
            modes = inv.get("modes", [])
            text.append("in each billing mode:\n" + (table(
                ["mode", "amount", "billed", "difference", "saving", "priced h", "rented h", ""],
                [(m["mode"], _cents(m["amount"]), _cents(m["billed_amount"]), _cents(m["difference"]),
                  "" if m["saving"] is None else _cents(m["saving"]), m["priced_hours"], m["rented_hours"],
                  "cheapest" if m["cheapest"] else "") for m in modes])
                if modes else "  (no modes priced)"))
            text.extend(f"  {m['mode']}: {m['detail']}" for m in modes if m.get("detail"))
        parts.append("\n".join(text))
    return "\n\n".join(parts)



def capacity_text(rows: list[dict], month: dt.date, currency: str, fmt: str, hourly: bool) -> str:
    """``bill capacity``: per pool and day (or hour), installed, rented and unsold GPU-hours and the unsold ones
    at list price, with each pool's month."""
    from gpufleet.streams.billing import invoice as bill
    lines, pools = bill.capacity_lines(rows, hourly)
    if fmt == "json":
        return bill.capacity_json(lines, pools, month, currency)
    if fmt == "csv":
        return bill.capacity_csv(lines, currency)
    if not lines:
        return f"no telemetry for {month:%Y-%m}\n"
    head = ["pool", "hour" if hourly else "day", "GPUs", "installed GPU-h", "rented GPU-h", "unsold GPU-h",
            f"unsold at list, {currency}"]
    body = [tuple(g[c] for c in bill.CAPACITY_COLUMNS) for g in lines]
    body += [tuple({**p, "when": f"{month:%Y-%m}"}[c] for c in bill.CAPACITY_COLUMNS) for p in pools]
    return (f"unsold capacity, {month:%Y-%m} (installed: GPUs reporting telemetry; unsold: installed less "
            "rented, priced at the pool's on-demand list price)\n" + table(head, body) + "\n")


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
