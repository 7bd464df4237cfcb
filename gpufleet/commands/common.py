"""What the commands share: options, progress, settings, the store, the embedded run."""
from __future__ import annotations

import argparse
import json
import sys
import time

from gpufleet.errors import UsageError
from gpufleet.settings import Settings, load_settings


class Parser(argparse.ArgumentParser):
    def error(self, message):   # one line, no usage dump
        raise UsageError(f"{self.prog}: {message}")


class Progress:
    """A one-line progress report on stderr, redrawn at most twice a second."""

    def __init__(self, label: str, total: int | None = None, unit: str = "messages"):
        self.label, self.total, self.unit = label, total, unit
        self.start = self.last = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.shown_pct = -1

    def __call__(self, n: int, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < 0.5:
            return
        self.last = now
        rate = n / max(now - self.start, 1e-9)
        pct = int(100 * n / self.total) if self.total else None
        if not self.tty and not final and (pct is None or pct < self.shown_pct + 10):
            return
        self.shown_pct = pct if pct is not None else self.shown_pct
        of = f"/{self.total:,}" if self.total else ""
        text = f"{self.label}: {n:,}{of} {self.unit}" + (f" ({pct}%)" if pct is not None else "") + \
            f", {rate:,.0f}/s, {now - self.start:.1f} s"
        end = "\n" if final or not self.tty else ""
        print(("\r" if self.tty else "") + text.ljust(78), end=end, file=sys.stderr, flush=True)


def store_options(p: argparse.ArgumentParser, database: str | None = None, inherited: bool = False) -> None:
    """--dsn and --database. ``inherited``: an action's parser under a command that has them too, so that either
    place works (``bill --dsn X rerate`` as ``bill rerate --dsn X``): its defaults are suppressed, never
    overriding a value given before the action."""
    p.add_argument("--dsn", default=argparse.SUPPRESS if inherited else None,
                   help="store: chdb:///<dir> (embedded, the default) or http(s)://host:port")
    p.add_argument("--database", default=argparse.SUPPRESS if inherited else database, help="ClickHouse database" +
                   (f" (default {database})" if database else " (default: setting store.database, gpufleet)"))


def fleet_options(p: argparse.ArgumentParser, hours: float = 6.0, start_default: float | None = None,
                   nodes: int = 8, faults: int = 2, seed: bool = True, interval: bool = True) -> None:
    p.add_argument("--nodes", type=int, default=nodes, help=f"nodes in the fleet (default {nodes})")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    p.add_argument("--hours", type=float, default=hours, help=f"simulated hours (default {hours:g})")
    if interval:
        p.add_argument("--interval", type=float, default=5.0, help="sampling interval in seconds (default 5)")
    if seed:
        p.add_argument("--seed", type=int, default=1,
                       help="random seed: the same seed gives the same fleet (default 1)")
    p.add_argument("--faults", type=int, default=faults,
                   help=f"faults injected of each kind: straggler, IO starvation, memory leak (default {faults})")
    p.add_argument("--start", type=when, default=start_default, metavar="WHEN",
                   help="simulated start, UTC: YYYY-MM-DD[THH:MM] or Unix seconds (default " +
                        ("midnight UTC yesterday)" if start_default is None
                         else "2026-01-05, a Monday)"))


def when(text: str) -> float:
    import datetime as dt
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither YYYY-MM-DD[THH:MM] nor Unix seconds") from None


def yesterday() -> float:
    day = 86400
    return (time.time() // day - 1) * day


_SPEC_FLAGS = {"interval_s": "interval", "faults_per_kind": "faults"}     # FleetSpec's fields by their flags


def fleet_spec(prog: str, **fields):
    """A simulated fleet's spec; a value out of range is a one-line error naming its flag."""
    from gpufleet.collectors.simulator import FleetSpec
    try:
        return FleetSpec(**fields)
    except ValueError as err:
        name, _, why = str(err).partition(": ")
        raise UsageError(f"{prog}: argument --{_SPEC_FLAGS.get(name, name).replace('_', '-')}: {why}") from None


def spec_of(args):
    return fleet_spec(args.prog, nodes=args.nodes, gpus_per_node=args.gpus_per_node, hours=args.hours,
                      interval_s=args.interval, seed=args.seed, faults_per_kind=args.faults,
                      start=args.start if args.start is not None else yesterday())


def numbers(prog: str, flag: str, text: str, kind: type) -> list:
    """A list such as ``1,2,5-8`` (ranges for integers) or ``5,10,30``; a one-line error names the flag."""
    out: list = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-") if kind is int else (part, "", "")
            out += list(range(int(lo), int(hi) + 1)) if hi else [kind(lo)]
    except ValueError:
        raise UsageError(f"{prog}: argument {flag}: {text!r} is not a list such as "
                         + ("1,2,5-8" if kind is int else "5,10,30")) from None
    if not out:
        raise UsageError(f"{prog}: argument {flag}: {text!r} names nothing")
    return out


def settings_of(args) -> Settings:
    store = {k: v for k, v in (("dsn", getattr(args, "dsn", None)), ("database", getattr(args, "database", None)))
             if v is not None}
    stream = {"model": args.model} if getattr(args, "model", None) else {}
    return load_settings(args.config, **({"store": store} if store else {}), **({"stream": stream} if stream else {}))


def connect(settings: Settings, create: bool):
    from gpufleet.sql.store import Store
    s = settings.store
    return Store.connect(s.dsn, s.database, s.password.get_secret_value() if s.password else None, create=create,
                         cluster=s.cluster)


KEPT_WHEN_FRESH = ("silences",)      # an operator's own entries, which a recreated demo database keeps


def writable_store(settings: Settings, fresh: bool = False):
    """The store for a command that writes: the database created and migrated (as `db migrate` does). ``fresh``:
    recreated empty, but for the operator's own entries (``KEPT_WHEN_FRESH``: the silences)."""
    store = connect(settings, create=True)
    if fresh:
        kept = {}
        for table in KEPT_WHEN_FRESH:
            try:
                kept[table] = store.select(f"SELECT * FROM {table}")
            except Exception:                 # noqa: BLE001 -- no such table yet: nothing to keep
                pass
        store.drop()
        store = connect(settings, create=True)
        store.migrate()
        for table, (columns, rows) in kept.items():
            if rows:
                store.write(table, columns, rows, dedup=False)
    store.migrate()
    store.set_raw_retention(settings.store.raw_retention_days)
    return store


def readable_store(settings: Settings, schema: bool = True):
    """The store for a command that only reads: nothing is created or migrated; a missing database is an error."""
    store = connect(settings, create=False)
    if schema:
        try:
            store.require_schema()
        except Exception:
            store.close()
            raise
    return store


def load_model(settings: Settings):
    """The detectors' model: the one named by setting stream.model, or the packaged one."""
    from gpufleet.models.artifact import Model, ModelError
    try:
        return Model.load(settings.stream.model) if settings.stream.model else Model.default()
    except ModelError as err:
        raise UsageError(f"gpufleet: setting stream.model: {err}") from None


def tee(messages, path):
    with open(path, "w", encoding="utf-8") as f:
        for m in messages:
            f.write(json.dumps(m, separators=(",", ":")) + "\n")
            yield m


def kafka_overrides(args) -> dict:
    kafka = {k: v for k, v in (("bootstrap", getattr(args, "bootstrap", None)),
                               ("partitions", getattr(args, "partitions", None)),
                               ("telemetry_topic", getattr(args, "topic", None))) if v is not None}
    return {"kafka": kafka} if kafka else {}


def view_settings(args) -> Settings:
    store = {k: v for k, v in (("dsn", args.dsn), ("database", args.database)) if v is not None}
    return load_settings(args.config, **({"store": store} if store else {}))


def series_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--series", required=True, metavar="CSV", help="demand series: a CSV file with a header line")
    p.add_argument("--time-col", metavar="C", help="column of the times: Unix seconds or ISO 8601 (default ts)")
    p.add_argument("--value-col", metavar="C", help="column of the demand (default: the only other column)")
    p.add_argument("--resample", metavar="STEP", help="resample to this step, e.g. 10min (default: the series' own)")
    p.add_argument("--agg", default="mean", choices=["mean", "max", "min", "sum", "last"],
                   help="how values within a step combine when resampling (default mean)")
    p.add_argument("--test-from", metavar="WHEN", help="start of the test period, UTC: YYYY-MM-DD[THH:MM] or Unix "
                                                         "seconds (default: the last third, from a midnight)")
    p.add_argument("--every", metavar="D", help="a forecast (and, in simulate, a decision) every D (default 1h)")
    p.add_argument("--refit-every", metavar="D", help="fit the forecaster again every D of the test (default 7d)")
