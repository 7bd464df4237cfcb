"""``gpufleet report`` and ``gpufleet top``: the operator's view as a file and in a terminal (docs/view.md)."""
from __future__ import annotations

import os
import stat
import sys
import tempfile

from gpufleet.errors import UsageError
from gpufleet.settings import Settings, load_settings

from . import COMMANDS
from .common import (
    readable_store,
    store_options,
    view_settings,
    when,
)


def _usage(message: str) -> Exception:
    return UsageError(message)


def through_server(err, prog: str) -> str:
    """The URL of the ``gpufleet serve`` holding the embedded store (``err``, a StoreBusy), said on stderr; or the
    error again where no server holds it."""
    url = err.holder.get("url")
    if not url:
        raise err
    print(f"{prog}: the embedded store is open in gpufleet serve (pid {err.holder['pid']}): reading through it at "
          f"{url}", file=sys.stderr)
    return url


def fetch(url: str, what: str) -> bytes:
    import urllib.error
    import urllib.request

    from gpufleet.sql import StoreUnavailable
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        raise StoreUnavailable(f"{what}: the server answered {e.code}: "
                               f"{e.read()[:300].decode('utf-8', 'replace')}") from None
    except OSError as e:
        raise StoreUnavailable(f"{what}: cannot reach the server holding the store at {url}: {e}") from None


def write_document(out: str, document: str) -> None:
    """Write the report to `out`: a regular file (or a new one) is replaced whole, so a reader never sees half
    a report; anything else (/dev/stdout, /dev/null, a named pipe) is written to in place, never replaced."""
    if os.path.exists(out) and not stat.S_ISREG(os.stat(out).st_mode):
        with open(out, "w", encoding="utf-8") as f:
            f.write(document)
        return
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


def report_command(args, settings: Settings, store, url: str | None = None) -> int:
    from urllib.parse import urlencode

    from gpufleet.view import pages
    from gpufleet.view.data import FleetData, Window, iso

    window = Window(args.start, args.end, args.tenant or None)
    out = os.path.abspath(args.out)
    if url is not None:
        query = {"from": int(window.start), "to": int(window.end), **({"tenant": window.tenant} if window.tenant
                                                                       else {})}
        document = fetch(f"{url}/report?{urlencode(query)}", "report").decode("utf-8")
    else:
        data = FleetData(store, settings.billing.currency, settings.serve.alert_days,
                         silent_after_s=settings.stream.silent_after_s, underuse_pct=settings.billing.underuse_pct,
                         price_note=settings.billing.default_price_note())
        document = pages.report(data, window, settings.serve.forecast_ahead_hours)
    write_document(out, document)
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


def top_command(args, settings: Settings, store, url: str | None = None) -> int:
    import json

    from gpufleet.sql import StoreError
    from gpufleet.view import top
    from gpufleet.view.data import FleetData

    def read():
        if url is not None:
            return top.Snapshot(**json.loads(fetch(f"{url}/v1/top", "top")))
        return top.snapshot(FleetData(store, settings.billing.currency, settings.serve.alert_days,
                                      silent_after_s=settings.stream.silent_after_s,
                                      underuse_pct=settings.billing.underuse_pct,
                                      price_note=settings.billing.default_price_note()))
    if args.once:
        width = os.get_terminal_size().columns if sys.stdout.isatty() else 160
        for text, _ in top.render(read(), width, 10_000, args.interval):
            print(text)
        return 0
    top.run(read, args.interval, errors=(StoreError,))
    return 0


# -- the command line --------------------------------------------------------------------------------



def cmd_serve(args) -> int:
    from .forecast import serve_command
    serve = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    store = {k: v for k, v in (("dsn", args.dsn), ("database", args.database)) if v is not None}
    settings = load_settings(args.config, **({"serve": serve} if serve else {}), **({"store": store} if store else {}))
    store_ = readable_store(settings)
    try:
        return serve_command(args, settings, store_)
    finally:
        store_.close()


def _open_or_server(args, settings):
    """The store, or (None, the URL of the gpufleet serve that holds the embedded store)."""
    from gpufleet.sql import StoreBusy
    try:
        return readable_store(settings), None
    except StoreBusy as err:
        return None, through_server(err, args.prog)


def cmd_report(args) -> int:
    check_report_args(args)
    settings = view_settings(args)
    store, url = _open_or_server(args, settings)
    try:
        return report_command(args, settings, store, url)
    finally:
        if store is not None:
            store.close()


def cmd_top(args) -> int:
    check_top_args(args)
    settings = view_settings(args)
    store, url = _open_or_server(args, settings)
    try:
        return top_command(args, settings, store, url)
    finally:
        if store is not None:
            store.close()


def add_serve(sub) -> None:
    s = sub.add_parser("serve", help=COMMANDS["serve"].summary,
                       description="Serve from the store over HTTP: the fleet page (GET /), incident pages "
                                   "(/incident?id=), the JSON behind every chart (/v1/fleet/...), the forecast "
                                   "feed (GET /v1/forecast?pool=P, GET /v1/scale?pool=P: the value for KEDA's "
                                   "metrics-api scaler, valueLocation target_gpus, /v1/pools), /metrics and "
                                   "/health. Only reads the store.")
    s.add_argument("--host", help="address to bind (setting serve.host, 127.0.0.1)")
    s.add_argument("--port", type=int, help="port (setting serve.port, 8080; 0: any free port)")
    store_options(s)
    s.set_defaults(fn=cmd_serve)


def add_report(sub) -> None:
    s = sub.add_parser("report", help=COMMANDS["report"].summary,
                       description="Write the operator's view of a period as one HTML file that opens without "
                                   "network: utilization by node and GPU, incidents, utilization and idle cost by "
                                   "pool and tenant, demand with forecasts and scale decisions, billing. With "
                                   "--tenant, only that tenant's GPUs, incidents and billing. Reads only.")
    s.add_argument("--from", dest="start", required=True, type=when, metavar="WHEN",
                   help="start, UTC: YYYY-MM-DD[THH:MM] or Unix seconds")
    s.add_argument("--to", dest="end", required=True, type=when, metavar="WHEN",
                   help="end, UTC: YYYY-MM-DD[THH:MM] or Unix seconds")
    s.add_argument("-o", "--out", default="report.html", help="the HTML file to write (default report.html)")
    s.add_argument("--tenant", help="only this tenant (a report for a customer)")
    store_options(s)
    s.set_defaults(fn=cmd_report)


def add_top(sub) -> None:
    s = sub.add_parser("top", help=COMMANDS["top"].summary,
                       description="A live terminal view of the fleet (like nvtop, for a fleet): pools with "
                                   "utilization bars, the idlest rented GPUs with what they cost so far, the alerts "
                                   "firing; redrawn in place. Keys: q quits, r reads now. Reads only.")
    s.add_argument("--interval", type=float, default=5.0, metavar="SECONDS",
                   help="seconds between two reads of the store (default 5)")
    s.add_argument("--once", action="store_true", help="print one snapshot to standard output and exit")
    store_options(s)
    s.set_defaults(fn=cmd_top)
