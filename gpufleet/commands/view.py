"""``gpufleet report`` and ``gpufleet top``: the operator's view as a file and in a terminal (README: "The
operator's view")."""
from __future__ import annotations

import os
import sys
import tempfile

from gpufleet.settings import Settings


def _usage(message: str) -> Exception:
    from gpufleet.errors import UsageError
    return UsageError(message)


def report_command(args, settings: Settings, store) -> int:
    from gpufleet.view import pages
    from gpufleet.view.data import FleetData, Window, iso

    window = Window(args.start, args.end, args.tenant or None)
    out = os.path.abspath(args.out)
    data = FleetData(store, settings.billing.currency, settings.serve.alert_days)
    document = pages.report(data, window, settings.serve.forecast_ahead_hours)
    fd, tmp = tempfile.mkstemp(prefix=".report-", suffix=".html", dir=os.path.dirname(out))
    try:
        umask = os.umask(0o022)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)        # a file to share, as any other the user writes (mkstemp's is 0600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(document)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
    who = f" for tenant {window.tenant}" if window.tenant else ""
    print(f"wrote {args.out}: the report{who} from {iso(window.start)} to {iso(window.end)} "
          f"({len(document.encode()) / 1024:,.0f} KiB, one file, opens without network)")
    return 0


def check_report_args(args) -> None:
    if args.end <= args.start:
        raise _usage(f"{args.prog}: argument --to: must be after --from")
    if args.end - args.start > 366 * 86400:
        raise _usage(f"{args.prog}: arguments --from/--to: a report covers at most 366 days")
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):
        raise _usage(f"{args.prog}: argument -o/--out: no such directory {folder!r}")


def check_top_args(args) -> None:
    if not 0.5 <= args.interval <= 3600:
        raise _usage(f"{args.prog}: argument --interval: {args.interval:g} is not between 0.5 and 3600 "
                             "seconds")
    if not args.once and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise _usage(f"{args.prog}: needs a terminal; --once prints one snapshot instead")


def top_command(args, settings: Settings, store) -> int:
    from gpufleet.sql import StoreError
    from gpufleet.view import top
    from gpufleet.view.data import FleetData

    def read():
        return top.snapshot(FleetData(store, settings.billing.currency, settings.serve.alert_days))
    if args.once:
        width = os.get_terminal_size().columns if sys.stdout.isatty() else 160
        for text, _ in top.render(read(), width, 10_000, args.interval):
            print(text)
        return 0
    top.run(read, args.interval, errors=(StoreError,))
    return 0
