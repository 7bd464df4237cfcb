"""The ``gpufleet`` command line."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

from gpufleet import __version__
from gpufleet.collectors.nvml_standin import PROFILES
from gpufleet.collectors.simulator import DEFAULT_START
from gpufleet.commands import notify as notify_commands
from gpufleet.errors import UsageError
from gpufleet.settings import Settings, SettingsError, load_settings

EPILOG = """settings: every command reads GPUFLEET_* environment variables and an optional TOML
file (--config or GPUFLEET_CONFIG); see the README for the full list.
exit codes: 0 done, 1 failed while running, 2 bad argument or setting."""


# the optional dependency groups (pyproject.toml) by the module that tells one is missing
EXTRAS = {"clickhouse_connect": "store", "chdb": "embedded", "faust": "worker", "mode": "worker",
          "numpy": "train", "sklearn": "train", "matplotlib": "train", "msgspec": "embedded",
          "cramjam": "embedded"}
# a module in more than one group: the smaller install that a command needs it from
EXTRAS_OF_COMMAND = {("numpy", "forecast"): "forecast", ("numpy", "scale"): "forecast",
                     ("sklearn", "forecast"): "forecast", ("sklearn", "scale"): "forecast",
                     ("msgspec", "worker"): "worker", ("cramjam", "worker"): "worker"}


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


# -- shared options ---------------------------------------------------------
def _store_options(p: argparse.ArgumentParser, database: str | None = None) -> None:
    p.add_argument("--dsn", help="store: chdb:///<dir> (embedded, the default) or http(s)://host:port")
    p.add_argument("--database", default=database, help="ClickHouse database" +
                   (f" (default {database})" if database else " (default: setting store.database, gpufleet)"))


def _fleet_options(p: argparse.ArgumentParser, hours: float = 6.0, start_default: float | None = None,
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
    p.add_argument("--start", type=_when, default=start_default, metavar="WHEN",
                   help="simulated start, UTC: YYYY-MM-DD[THH:MM] or Unix seconds (default " +
                        ("midnight UTC yesterday)" if start_default is None
                         else "2026-01-05, a Monday)"))


def _when(text: str) -> float:
    import datetime as dt
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither YYYY-MM-DD[THH:MM] nor Unix seconds") from None


def _yesterday() -> float:
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


def _spec(args):
    return fleet_spec(args.prog, nodes=args.nodes, gpus_per_node=args.gpus_per_node, hours=args.hours,
                      interval_s=args.interval, seed=args.seed, faults_per_kind=args.faults,
                      start=args.start if args.start is not None else _yesterday())


def _numbers(prog: str, flag: str, text: str, kind: type) -> list:
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


def _settings(args) -> Settings:
    store = {k: v for k, v in (("dsn", getattr(args, "dsn", None)), ("database", getattr(args, "database", None)))
             if v is not None}
    stream = {"model": args.model} if getattr(args, "model", None) else {}
    return load_settings(args.config, **({"store": store} if store else {}), **({"stream": stream} if stream else {}))


def _connect(settings: Settings, create: bool):
    from gpufleet.sql.store import Store
    s = settings.store
    return Store.connect(s.dsn, s.database, s.password.get_secret_value() if s.password else None, create=create)


def _writable_store(settings: Settings, fresh: bool = False):
    """The store for a command that writes: the database created and migrated (as `db migrate` does)."""
    store = _connect(settings, create=True)
    if fresh:
        store.drop()
        store = _connect(settings, create=True)
    store.migrate()
    store.set_raw_retention(settings.store.raw_retention_days)
    return store


def _readable_store(settings: Settings, schema: bool = True):
    """The store for a command that only reads: nothing is created or migrated; a missing database is an error."""
    store = _connect(settings, create=False)
    if schema:
        try:
            store.require_schema()
        except Exception:
            store.close()
            raise
    return store


# -- commands ---------------------------------------------------------------
def cmd_simulate(args) -> int:
    from gpufleet.collectors.simulator import Simulation
    spec = _spec(args)
    labels_path = args.labels or (args.out[:-6] if args.out.endswith(".jsonl") else args.out) + ".labels.jsonl"
    sim = Simulation(spec)
    progress = Progress("simulate", spec.messages_total)
    n = 0
    with open(args.out, "w", encoding="utf-8") as f:
        for n, msg in enumerate(sim.messages(), 1):
            f.write(json.dumps(msg, separators=(",", ":")) + "\n")
            if n % 1000 == 0:
                progress(n)
    progress(n, final=True)
    labels = sim.labels()
    with open(labels_path, "w", encoding="utf-8") as f:
        for label in labels:
            f.write(json.dumps(label) + "\n")
    kinds: dict[str, int] = {}
    for label in labels:
        kinds[label["kind"]] = kinds.get(label["kind"], 0) + 1
    print(f"wrote {n:,} messages ({n * spec.gpus_per_node:,} GPU samples) to {args.out}")
    print(f"wrote {len(labels)} labels to {labels_path}: " + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())))
    return 0


def _model(settings: Settings):
    """The detectors' model: the one named by setting stream.model, or the packaged one."""
    from gpufleet.models.artifact import Model, ModelError
    try:
        return Model.load(settings.stream.model) if settings.stream.model else Model.default()
    except ModelError as err:
        raise UsageError(f"gpufleet: setting stream.model: {err}") from None


def _run_embedded(settings: Settings, source, total, label: str, events_path=None, dead_path=None,
                  store=None, notifier=None):
    from gpufleet.streams import embedded
    from gpufleet.streams.pipeline import Pipeline
    from gpufleet.streams.sink import Sink

    pipeline = Pipeline(settings.stream, model=_model(settings), billing=settings.billing)
    sink = Sink(store, settings.store.batch_rows, settings.store.batch_seconds) if store is not None else None
    events, dead = embedded.JsonLines(events_path), embedded.JsonLines(dead_path)
    if notifier is not None:
        events = notifier.tap(events)
    progress = Progress(label, total)
    started = time.monotonic()
    forecasts = None
    try:
        n = embedded.run(source, pipeline, sink, events, dead, progress=progress)
        progress(n, final=True)
        if store is not None:        # demand is the store's: forecasts and scale decisions over what it holds
            from gpufleet.commands.forecast import embedded_forecasts
            forecasts = embedded_forecasts(settings, store, events)
    finally:
        events.close()
        dead.close()
    return EmbeddedRun(pipeline, sink, events, dead, time.monotonic() - started, forecasts)


@dataclass
class EmbeddedRun:
    pipeline: Any
    sink: Any
    events: Any
    dead: Any
    seconds: float
    forecasts: Any = None


def _report(run: EmbeddedRun, events_path, dead_path) -> None:
    c, sink, events, seconds = run.pipeline.out.counts, run.sink, run.events, run.seconds
    dead_total = sum(v for k, v in c.items() if k.startswith("dead_"))
    print(f"processed {c['messages']:,} messages, {c['gpu_samples']:,} GPU samples in {seconds:.1f} s "
          f"({c['gpu_samples'] / max(seconds, 1e-9):,.0f} samples/s); duplicates ignored: {c['duplicates']:,}")
    if dead_total:
        reasons = ", ".join(f"{v} {k[5:]}" for k, v in sorted(c.items()) if k.startswith("dead_"))
        print(f"dead letters: {dead_total:,} ({reasons})" + (f", written to {dead_path}" if dead_path else ""))
    print(f"events: {events.count:,}" + (f", written to {events_path}" if events_path else ""))
    if sink is not None:
        print("stored rows: " + ", ".join(f"{t} {n:,}" for t, n in sorted(sink.written.items())))
    f = run.forecasts
    if f is not None:
        print(f"forecasts: {f.forecasts:,} ({len(f.made_at)} times, every forecast.every_s), scale decisions: "
              f"{f.decisions:,}" + ("" if f.made_at else " (less demand history than forecast.min_history_s "
                                                         "plus forecast.every_s)"))


def cmd_replay(args) -> int:
    import os

    from gpufleet.streams.embedded import file_source
    if not os.path.isfile(args.file):
        raise UsageError(f"{args.prog}: argument FILE: no such file {args.file!r}")
    settings = _settings(args)
    store = None if args.no_store else _writable_store(settings)
    source = file_source(args.file)
    try:
        notifier = _notifier(args, settings, store)
        result = _run_embedded(settings, source, None, "replay", args.events, args.dead_letters, store, notifier)
        _report(result, args.events, args.dead_letters)
        if notifier is not None:
            notify_commands.finish(notifier)
        counts = result.pipeline.out.counts
        if counts.get("dead_invalid") or counts.get("dead_too_large") or counts.get("dead_internal_error"):
            _show_dead(args.dead_letters)
    finally:
        if store is not None:
            store.close()
    if source.error:
        print(f"gpufleet replay: {source.error}; the lines before it were processed", file=sys.stderr)
        return 1
    return 0


def _show_dead(path: str | None) -> None:
    if not path:
        print("(pass --dead-letters FILE to keep every dead letter with its payload)")
        return
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i == 5:
                print("  ...")
                break
            d = json.loads(line)
            print(f"  {d['source']}: {d['reason_code']}: {d['reason']}")


def cmd_demo(args) -> int:
    import os

    from gpufleet.collectors.simulator import Simulation
    from gpufleet.streams.embedded import dict_source
    from gpufleet.summary import render

    spec = _spec(args)
    settings = _settings(args)
    print(f"gpufleet demo: {spec.nodes} nodes x {spec.gpus_per_node} GPUs, {spec.hours:g} simulated hours at "
          f"{spec.interval_s:g} s, {spec.faults_per_kind} faults of each kind, seed {spec.seed}")
    print(f"store: {settings.store.dsn}, database {settings.store.database} (recreated)")
    store = _writable_store(settings, fresh=True)
    sim = Simulation(spec)
    messages = sim.messages()
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        messages = _tee(messages, os.path.join(args.save, "telemetry.jsonl"))
        with open(os.path.join(args.save, "labels.jsonl"), "w", encoding="utf-8") as f:
            for label in sim.labels():
                f.write(json.dumps(label) + "\n")
    events_path = os.path.join(args.save, "events.jsonl") if args.save else None
    try:
        notifier = _notifier(args, settings, store)
        result = _run_embedded(settings, dict_source(messages), spec.messages_total, "pipeline", events_path,
                               None, store, notifier)
        _report(result, events_path, None)
        if notifier is not None:
            notify_commands.finish(notifier)
        print()
        print(render(store))
    finally:
        store.close()
    print(f"\nExplore it with SQL, e.g.: gpufleet sql --database {settings.store.database} "
          "'SELECT * FROM idle_windows ORDER BY duration_s DESC LIMIT 5'  (README: 'Querying the store')")
    if not args.notify:
        print("Send these alerts to Slack, PagerDuty, Alertmanager or a signed webhook: gpufleet demo --notify "
              "routes.toml  (README: 'Alert delivery')")
    return 0


def _notifier(args, settings: Settings, store):
    """The notifier of --notify FILE, started, or None."""
    if not getattr(args, "notify", None):
        return None
    return notify_commands.local_notifier(args.prog, settings, args.notify, store)


def _tee(messages, path):
    with open(path, "w", encoding="utf-8") as f:
        for m in messages:
            f.write(json.dumps(m, separators=(",", ":")) + "\n")
            yield m


def cmd_db(args) -> int:
    from gpufleet.sql import StoreMissing, migrations
    settings = _settings(args)
    if args.db_command == "migrate":
        store = _writable_store(settings)
        try:
            applied = store.applied()
        finally:
            store.close()
        print(f"{settings.store.database}: schema at version {applied[-1][0] if applied else 0} "
              f"({len(applied)} migrations applied)")
        return 0
    try:
        store = _readable_store(settings, schema=False)
    except StoreMissing as err:
        print(f"{err}; every migration is pending")
        return 0
    try:
        exists = store.query("EXISTS TABLE schema_migrations")[0][0]
        done = dict(store.applied()) if exists else {}
    finally:
        store.close()
    for m in migrations():
        print(f"{m.version:04d} {m.name}: {'applied' if m.version in done else 'pending'}")
    return 0


def cmd_summary(args) -> int:
    from gpufleet.summary import render
    store = _readable_store(_settings(args))
    try:
        print(render(store))
    finally:
        store.close()
    return 0


def cmd_sql(args) -> int:
    from gpufleet.summary import table
    store = _readable_store(_settings(args), schema=False)
    try:
        names, rows = store.select(args.query)
        if args.tsv:
            for r in [names, *rows]:
                print("\t".join("" if v is None else str(v) for v in r))
        else:
            print(table(names, rows) if names else "ok")
    finally:
        store.close()
    return 0


def cmd_bill(args) -> int:
    from gpufleet import bill
    try:
        bill.month_start(args.month)
    except ValueError as err:
        raise UsageError(f"{args.prog}: argument --month: {err}") from None
    store = _readable_store(_settings(args))
    try:
        invoices = bill.invoice(store, args.month, args.tenant, args.compare_modes)
    finally:
        store.close()
    if args.format == "json":
        print(bill.as_json(invoices))
    elif args.format == "csv":
        print(bill.as_csv(invoices, args.compare_modes), end="")
    else:
        print(bill.as_table(invoices, args.compare_modes))
    return 0


def cmd_collect(args) -> int:
    from gpufleet.collectors import daemon
    from gpufleet.collectors.nvml import NvmlUnavailable

    overrides = {k: v for k, v in (("interval_s", args.interval), ("node", args.node), ("pool", args.pool),
                                   ("spool_dir", args.spool), ("labels_file", args.labels),
                                   ("metrics_port", args.metrics_port)) if v is not None}
    kafka = {k: v for k, v in (("bootstrap", args.bootstrap), ("telemetry_topic", args.topic)) if v is not None}
    settings = load_settings(args.config, **({"collect": overrides} if overrides else {}),
                             **({"kafka": kafka} if kafka else {}))
    if args.fake_gpus is not None and not 0 <= args.fake_gpus <= 64:
        raise UsageError(f"{args.prog}: argument --fake-gpus: {args.fake_gpus} is not between 0 and 64")
    lib = None
    if args.fake_gpus is not None:
        import pynvml

        from gpufleet.collectors.nvml_standin import StandIn
        StandIn(gpus=args.fake_gpus, seed=args.seed, profile=args.fake_driver).install()    # for this process
        lib = pynvml
    try:
        if args.check:
            return _collect_check(daemon.build(settings.collect, lib)[0])
        if args.once:
            reader, collector = daemon.build(settings.collect, lib)
            try:
                reader.start()
                collector.collect()                                  # rates need two readings
                time.sleep(min(1.0, settings.collect.interval_s))
                print(json.dumps(collector.collect(), indent=2))
            finally:
                reader.close()
            return 0
        return daemon.run(settings.collect, settings.kafka.bootstrap, settings.kafka.telemetry_topic, lib)
    except NvmlUnavailable as err:
        raise UsageError(f"{args.prog}: {err} (or try it with --fake-gpus N)") from None


def _collect_check(reader) -> int:
    """``collect --check``: what this node's driver and GPUs let the collector read."""
    try:
        v = reader.versions()
        print(f"driver {v['driver'] or '?'}, NVML {v['nvml'] or '?'}, CUDA {v['cuda'] or '?'}; "
              f"{len(reader.physical)} GPUs, {len(reader.devices)} sampled devices")
        for d, ways in reader.capabilities():
            what = f"MIG {d.mig_profile} of GPU {d.index}" if d.parent else f"GPU {d.index}"
            print(f"\n{what}: {d.model or '?'} {d.uuid}")
            for name, how in ways.items():
                print(f"  {name}: {how}")
    finally:
        reader.close()
    return 0


def _kafka_overrides(args) -> dict:
    kafka = {k: v for k, v in (("bootstrap", getattr(args, "bootstrap", None)),
                               ("partitions", getattr(args, "partitions", None)),
                               ("telemetry_topic", getattr(args, "topic", None))) if v is not None}
    return {"kafka": kafka} if kafka else {}


def cmd_worker(args) -> int:
    from gpufleet.streams import worker
    from gpufleet.streams.kafka import KafkaUnavailable, anchor_offsets, ensure_topics

    store = {k: v for k, v in (("dsn", args.dsn), ("database", args.database)) if v is not None}
    w = {k: v for k, v in (("web_port", args.web_port), ("data_dir", args.data_dir), ("app_id", args.app_id))
         if v is not None}
    stream = {"model": args.model} if args.model else {}
    settings = load_settings(args.config, **({"store": store} if store else {}), **({"worker": w} if w else {}),
                             **({"stream": stream} if stream else {}), **_kafka_overrides(args))
    if settings.store.dsn.startswith("chdb:"):
        print("gpufleet worker: note: writing to an embedded store; a ClickHouse server (--dsn http://...) "
              "lets several workers share it", file=sys.stderr)
    try:
        ensure_topics(settings.kafka.bootstrap, worker.internal_topics(settings))
        sources = worker.topic_names(settings)
        anchor_offsets(settings.kafka.bootstrap, settings.worker.app_id, [sources["telemetry"], sources["by_job"]])
    except (KafkaUnavailable, ValueError) as err:
        print(f"gpufleet worker: kafka: {err}", file=sys.stderr)
        return 1
    model = _model(settings)
    store_ = _writable_store(settings)
    return worker.run(settings, store_, model, loglevel=args.log_level)


def cmd_topics(args) -> int:
    from gpufleet.streams import worker
    from gpufleet.streams.forecast_events import topic_names
    from gpufleet.streams.kafka import KafkaUnavailable, ensure_topics
    from gpufleet.streams.notify.service import dead_letter_topic
    settings = load_settings(args.config, **_kafka_overrides(args))
    topics = worker.internal_topics(settings)
    topics.update({t: settings.kafka.partitions for t in topic_names(settings).values()})
    topics[dead_letter_topic(worker.topic_names(settings)["alerts"])] = settings.kafka.partitions
    try:
        ensure_topics(settings.kafka.bootstrap, topics)
    except (KafkaUnavailable, ValueError) as err:
        print(f"gpufleet topics: kafka: {err}", file=sys.stderr)
        return 1
    for name, n in sorted(topics.items()):
        print(f"{name}: {n} partitions")
    return 0


def cmd_publish(args) -> int:
    import os

    from gpufleet.contracts.telemetry import end_of_stream
    from gpufleet.streams.kafka import KafkaUnavailable, ensure_topics, produce, produce_to_every_partition
    if not os.path.isfile(args.file):
        raise UsageError(f"{args.prog}: argument FILE: no such file {args.file!r}")
    settings = load_settings(args.config, **_kafka_overrides(args))
    topic = settings.kafka.telemetry_topic
    try:
        ensure_topics(settings.kafka.bootstrap, {topic: settings.kafka.partitions})
    except (KafkaUnavailable, ValueError) as err:
        print(f"gpufleet publish: kafka: {err}", file=sys.stderr)
        return 1
    from gpufleet.streams.embedded import JsonLines, file_source
    source, check = file_source(args.file), LineCheck()
    progress = Progress("publish")

    def keyed():
        for i, (where, line) in enumerate(source, 1):
            if i % 1000 == 0:
                progress(i)
            key = check(where, line)
            if key is not None:
                yield key, line.rstrip(b"\n")
    try:
        n = produce(settings.kafka.bootstrap, topic, keyed())     # what was queued is flushed whatever happens
    finally:
        dead = JsonLines(args.dead_letters)
        dead.write(check.dead)
        dead.close()
    progress(n, final=True)
    print(f"published {n:,} messages to {topic} (key = node)")
    failed = check.report(args.dead_letters)
    if source.error:
        print(f"gpufleet publish: {source.error}; the lines before it were published", file=sys.stderr)
        failed = True
    if args.end:
        parts = produce_to_every_partition(settings.kafka.bootstrap, topic, end_of_stream(time.time()))
        print(f"sent the end-of-stream marker to the {parts} partitions: the workers flush every open window, "
              f"as replay does; `gpufleet status --wait` tells when all is processed")
    return 1 if failed else 0


class LineCheck:
    """``publish`` checks each line as the workers will, before it is sent: a good line's key (its node), or
    None for a bad one, kept as a dead letter with its line number (nothing that would be dead-lettered is sent)."""

    def __init__(self) -> None:
        self.dead: list[dict] = []

    def __call__(self, where: str, line: bytes) -> str | None:
        from gpufleet.contracts.events import dead_letter
        from gpufleet.contracts.telemetry import TelemetryError, control_kind, unreadable
        from gpufleet.streams.decode import decode
        if control_kind(line) is not None:
            return ""                                # a marker the workers act on: sent as it is
        try:
            return str(decode(line, share_names=False).node)
        except TelemetryError as err:
            code, reason = err.reason_code, err.reason
        except Exception as err:                     # the decoder's own failure: the line still is not sent
            code, reason = "internal_error", unreadable(err)
        self.dead.append(dead_letter(code, reason, where, time.time(), line))
        return None

    def report(self, path: str | None) -> bool:
        """Print the lines refused (the first five, and where the rest are); True if there were any."""
        if not self.dead:
            return False
        print(f"refused {len(self.dead):,} lines that are not valid telemetry (not sent)" +
              (f", written to {path}" if path else ""), file=sys.stderr)
        for d in self.dead[:5]:
            print(f"  {d['source']}: {d['reason_code']}: {d['reason']}", file=sys.stderr)
        if len(self.dead) > 5:
            print("  ..." if path else "  ... (pass --dead-letters FILE to keep every one with its payload)",
                  file=sys.stderr)
        return True


def cmd_status(args) -> int:
    from gpufleet.streams import worker
    from gpufleet.streams.kafka import KafkaUnavailable, group_progress
    from gpufleet.summary import table
    if args.wait is not None and not 0 < args.wait <= 86400:
        raise UsageError(f"{args.prog}: argument --wait: {args.wait:g} is not between 0 and 86400 seconds")
    overrides = _kafka_overrides(args)
    if args.app_id:
        overrides["worker"] = {"app_id": args.app_id}
    settings = load_settings(args.config, **overrides)
    names = worker.topic_names(settings)
    deadline = time.monotonic() + (args.wait or 0)
    clear = 0
    while True:
        try:
            progress = group_progress(settings.kafka.bootstrap, settings.worker.app_id,
                                      [names["telemetry"], names["by_job"]])
        except KafkaUnavailable as err:
            print(f"gpufleet status: kafka: {err}", file=sys.stderr)
            return 1
        lag = sum(end - (committed or 0) for _, _, committed, end in progress)
        clear = clear + 1 if lag == 0 else 0
        if args.wait is None or clear >= 2 or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    print(table(["topic", "partition", "committed", "end", "lag"],
                [(t, p, c, e, e - (c or 0)) for t, p, c, e in progress]))
    if lag == 0:
        print(f"all processed: group {settings.worker.app_id} has committed every message published")
        return 0
    print(f"{lag:,} messages not processed yet by group {settings.worker.app_id}")
    return 1 if args.wait is not None else 0


def cmd_notify(args) -> int:
    notify = {k: v for k, v in (("routes", args.routes), ("group_id", args.group_id),
                                ("metrics_port", args.metrics_port), ("outbox_dir", args.outbox)) if v is not None}
    store = {k: v for k, v in (("dsn", args.dsn), ("database", args.database)) if v is not None}
    settings = load_settings(args.config, **({"notify": notify} if notify else {}),
                             **({"store": store} if store else {}), **_kafka_overrides(args))
    return notify_commands.notify(args, settings, _writable_store)


def cmd_silence(args) -> int:
    return notify_commands.silence(args, _settings(args), _writable_store, _readable_store)


def cmd_model(args) -> int:
    from gpufleet.commands import model as model_commands
    prog = f"{args.prog} {args.model_command}"
    seeds = _numbers(prog, "--seeds", args.seeds, int)
    training = args.model_command == "train"
    intervals = _numbers(prog, "--intervals", args.intervals, float) if training else [args.interval]
    specs = [fleet_spec(prog, nodes=args.nodes, gpus_per_node=args.gpus_per_node, hours=args.hours, seed=s,
                        faults_per_kind=args.faults, interval_s=intervals[i % len(intervals)], start=args.start)
             for i, s in enumerate(seeds)]
    if training:
        if not args.faults:
            raise UsageError(f"{prog}: argument --faults: 0 faults leave nothing to learn")
        return model_commands.train(args, specs)
    if args.telemetry and not args.labels:
        raise UsageError(f"{prog}: argument --labels: needed with --telemetry")
    if args.held_out is not None:
        import os
        if not os.path.isdir(args.held_out):
            raise UsageError(f"{prog}: argument --held-out: no such directory {args.held_out!r}")
        if not model_commands.held_out_pairs(args.held_out):
            raise UsageError(f"{prog}: argument --held-out: no NAME.telemetry.jsonl[.gz] with its "
                             f"NAME.labels.jsonl in {args.held_out!r} "
                             "(make them with: python -m bench.evalfleet)")
    from gpufleet.models.artifact import Model, ModelError
    try:
        model = Model.load(args.model) if args.model else Model.default()
    except ModelError as err:
        raise UsageError(f"{prog}: argument --model: {err}") from None
    return model_commands.evaluate_command(args, specs, model, Progress("record", None, "messages"))


def cmd_forecast(args) -> int:
    from gpufleet.commands import forecast as fc
    try:
        if args.forecast_command == "backtest":
            return fc.backtest_command(args)
        overrides: dict = {"store": {k: v for k, v in (("dsn", args.dsn), ("database", args.database)) if v}}
        if args.dry_run:
            overrides["scale"] = {"dry_run": True}
        settings = load_settings(args.config, **{k: v for k, v in overrides.items() if v}, **_kafka_overrides(args))
        if args.dry_run:    # every pool, whatever its own policy says
            settings = settings.model_copy(update={"scale": settings.scale.model_copy(update={
                "pools": {p: {**v, "dry_run": True} for p, v in settings.scale.pools.items()}})})
        store = _writable_store(settings)
        try:
            return fc.run_command(args, settings, store)
        finally:
            store.close()
    except fc.ArgumentError as err:
        raise UsageError(f"{args.prog} {args.forecast_command}: {err}") from None


def cmd_scale(args) -> int:
    from gpufleet.commands import forecast as fc
    try:
        return fc.simulate_command(args)
    except fc.ArgumentError as err:
        raise UsageError(f"{args.prog} simulate: {err}") from None


def cmd_serve(args) -> int:
    from gpufleet.commands import forecast as fc
    serve = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    store = {k: v for k, v in (("dsn", args.dsn), ("database", args.database)) if v is not None}
    settings = load_settings(args.config, **({"serve": serve} if serve else {}), **({"store": store} if store else {}))
    store_ = _readable_store(settings)
    try:
        return fc.serve_command(args, settings, store_)
    finally:
        store_.close()


def _view_settings(args) -> Settings:
    store = {k: v for k, v in (("dsn", args.dsn), ("database", args.database)) if v is not None}
    return load_settings(args.config, **({"store": store} if store else {}))


def cmd_report(args) -> int:
    from gpufleet.commands import view as view_commands
    view_commands.check_report_args(args)
    settings = _view_settings(args)
    store = _readable_store(settings)
    try:
        return view_commands.report_command(args, settings, store)
    finally:
        store.close()


def cmd_top(args) -> int:
    from gpufleet.commands import view as view_commands
    view_commands.check_top_args(args)
    settings = _view_settings(args)
    store = _readable_store(settings)
    try:
        return view_commands.top_command(args, settings, store)
    finally:
        store.close()


def _series_options(p: argparse.ArgumentParser) -> None:
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


def build_parser() -> Parser:
    p = Parser(prog="gpufleet", description="Telemetry, anomaly detection and metering for rented GPU fleets.",
               epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    p.add_argument("--config", metavar="FILE", help="TOML settings file (default: $GPUFLEET_CONFIG)")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="log verbosity on stderr (default WARNING; INFO for the worker, whose rebalances "
                        "an operator follows)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    s = sub.add_parser("demo", help="simulate a fleet, run it through the embedded pipeline, print a summary",
                       description="Simulate a fleet, run its telemetry through the embedded pipeline into "
                                   "ClickHouse (in-process), then print a fleet summary read back with SQL.")
    _fleet_options(s, start_default=None)
    _store_options(s, database="gpufleet_demo")
    s.add_argument("--save", metavar="DIR", help="also write telemetry.jsonl, labels.jsonl and events.jsonl there")
    s.add_argument("--notify", metavar="FILE", help="also deliver the alerts with this routing file (TOML)")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("collect", help="sample this node's GPUs and host, publish to Kafka (the node collector)",
                       description="Sample every GPU (or MIG instance) through NVML and the host through /proc "
                                   "every interval, attribute GPUs to tenants and jobs, and publish one "
                                   "gpufleet.telemetry.v1 message per tick to Kafka (key = node). Messages go "
                                   "through a bounded on-disk spool first, so a broker outage loses nothing "
                                   "within the bound. SIGTERM flushes and exits.")
    s.add_argument("--fake-gpus", type=int, metavar="N",
                   help="N simulated GPUs behind the real pynvml (a stand-in for the driver's library; no GPU needed)")
    s.add_argument("--fake-driver", default="R550", metavar="BRANCH", choices=sorted(PROFILES),
                   help=f"driver branch of the fake GPUs: {', '.join(sorted(PROFILES))} (default R550)")
    s.add_argument("--seed", type=int, default=0, help="seed of the fake GPUs (default 0)")
    s.add_argument("--once", action="store_true", help="print one message to stdout and exit (no Kafka)")
    s.add_argument("--check", action="store_true",
                   help="print what this node can read (driver and NVML versions, every GPU and MIG instance, "
                        "each field and the NVML function that gives it) and exit")
    s.add_argument("--interval", type=float, help="sampling interval in seconds (setting collect.interval_s, 5)")
    s.add_argument("--node", help="node name (setting collect.node, default: the host name)")
    s.add_argument("--pool", help="capacity pool (setting collect.pool)")
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    s.add_argument("--topic", help="telemetry topic (setting kafka.telemetry_topic, gpufleet.telemetry)")
    s.add_argument("--spool", metavar="DIR", help="spool directory (setting collect.spool_dir)")
    s.add_argument("--labels", metavar="FILE", help="GPU UUID to tenant/job JSON file (setting collect.labels_file)")
    s.add_argument("--metrics-port", type=int,
                   help="serve Prometheus metrics on this port (setting collect.metrics_port)")
    s.set_defaults(fn=cmd_collect)

    s = sub.add_parser("worker", help="run the stream processors on Kafka (the distributed mode)",
                       description="Run the stream processors as a faust-streaming worker: consume the telemetry "
                                   "topic, validate (bad messages to the dead-letter topic), compute rollups, idle "
                                   "windows and alerts with state in Faust tables, and write to ClickHouse. Start "
                                   "as many as there are partitions; they share the load and take over from a "
                                   "worker that dies. Serves /health and /metrics on --web-port.")
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    s.add_argument("--partitions", type=int, help="partitions of the topics it creates (setting kafka.partitions, 4)")
    s.add_argument("--topic", help="telemetry topic (setting kafka.telemetry_topic)")
    s.add_argument("--web-port", type=int, help="port of /health and /metrics (setting worker.web_port, 6066)")
    s.add_argument("--data-dir", help="Faust data directory (setting worker.data_dir)")
    s.add_argument("--app-id", help="Faust app id, the consumer group (setting worker.app_id, gpufleet)")
    s.add_argument("--model", help="detectors' model file (setting stream.model; default: the packaged model)")
    _store_options(s)
    s.set_defaults(fn=cmd_worker)

    s = sub.add_parser("notify", help="deliver alerts to Slack, PagerDuty, Alertmanager and webhooks (the router)",
                       description="Read the alert topic as a consumer group and deliver each alert as the routing "
                                   "file says: routed, grouped, silenced, inhibited, rate-limited, retried, told once "
                                   "per (incident, status, receiver) across restarts. An alert's offset is committed "
                                   "once every delivery it owes is sent or dead-lettered; every delivery is a row of "
                                   "alert_deliveries. Start several for availability (one consumer group).")
    s.add_argument("--routes", metavar="FILE", help="routing file, TOML (setting notify.routes)")
    s.add_argument("--check", action="store_true", help="check the routing file (secrets included), print the "
                                                        "routes and exit")
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    s.add_argument("--partitions", type=int, help="partitions if the alert topic is created (setting kafka.partitions)")
    s.add_argument("--group-id", help="consumer group (setting notify.group_id, gpufleet-notify)")
    s.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port (setting "
                                                    "notify.metrics_port)")
    s.add_argument("--outbox", metavar="DIR", help="delivery log directory (setting notify.outbox_dir)")
    _store_options(s)
    s.set_defaults(fn=cmd_notify)

    s = sub.add_parser("silence", help="mute alerts for a while: add, list, expire",
                       description="Silences mute the alerts they match (recorded as silenced, not sent) from now "
                                   "for a duration. They live in the store, so every router applies them.")
    ssub = s.add_subparsers(dest="silence_command", metavar="ACTION", parser_class=Parser)
    ssub.required = True
    m = ssub.add_parser("add", help="add a silence", description="Add a silence, e.g. gpufleet silence add --match "
                                                               "kind=idle --match tenant=acme --for 2h --comment "
                                                               "'maintenance'. Matchers: LABEL=V, LABEL!=V, LABEL=~RE, "
                                                               "LABEL!~RE on kind, severity, tenant, pool, node, job, "
                                                               "gpu; all must match.")
    m.add_argument("--match", action="append", required=True, metavar="MATCHER", help="LABEL=VALUE (or !=, =~, !~); "
                                                                                      "repeat for more")
    m.add_argument("--for", dest="duration", required=True, metavar="DURATION", help="e.g. 30m, 2h, 1d")
    m.add_argument("--comment", help="why")
    m.add_argument("--author", help="who (default: the user name)")
    _store_options(m)
    m = ssub.add_parser("list", help="list silences in force or to come", description="List the silences in force "
                                                                                      "or still to start.")
    m.add_argument("--all", action="store_true", help="expired ones too")
    _store_options(m)
    m = ssub.add_parser("expire", help="end a silence now", description="End a silence now.")
    m.add_argument("id", metavar="ID", help="the silence's id (or its first characters)")
    _store_options(m)
    s.set_defaults(fn=cmd_silence)

    s = sub.add_parser("model", help="train and evaluate the anomaly detectors",
                       description="Train the detectors (stragglers, IO starvation, memory leaks) on simulated "
                                   "fleets with ground truth, or evaluate a model against labelled telemetry, side "
                                   "by side with a threshold baseline and an isolation forest.")
    msub = s.add_subparsers(dest="model_command", metavar="ACTION", parser_class=Parser)
    msub.required = True
    m = msub.add_parser("train", help="fit a model on simulated fleets and write it as JSON",
                        description="Simulate labelled fleets (one per seed), record every window the detectors "
                                    "evaluate, fit gradient-boosted trees per kind and tune their thresholds on "
                                    "incidents. The packaged model: gpufleet model train --seeds 101-104 "
                                    "--intervals 5,10,30,60")
    _fleet_options(m, hours=12.0, start_default=DEFAULT_START, nodes=16, faults=12, seed=False, interval=False)
    m.set_defaults(seeds="101-104")
    m.add_argument("--seeds", help="simulated fleets to train on, e.g. 1,2,5-8 (default 101-104)")
    m.add_argument("--intervals", default="5",
                   help="sampling intervals the seeds cycle through, e.g. 5,10 (default 5)")
    m.add_argument("--max-false", type=float, default=0.3, help="false alerts per 1,000 GPU-hours allowed per kind "
                                                                 "when tuning thresholds (default 0.3)")
    m.add_argument("-o", "--out", default="model.json", help="model file to write (default model.json)")
    m = msub.add_parser("eval", help="score a model against ground truth, with baselines, goals and a chart",
                        description="Replay labelled telemetry (a file, or simulated fleets of the given seeds) "
                                    "through the detectors and score their incidents: precision, recall, F1, "
                                    "detection delay, false alerts per 1,000 GPU-hours, leak lead time; beside a "
                                    "threshold baseline and an isolation forest on the same windows.")
    _fleet_options(m, hours=24.0, start_default=DEFAULT_START, nodes=32, faults=35, seed=False)
    m.set_defaults(seeds="9001")
    m.add_argument("--model", help="model file (default: the packaged model)")
    m.add_argument("--telemetry", metavar="FILE", help="telemetry JSONL to evaluate on (else simulated fleets)")
    m.add_argument("--labels", metavar="FILE", help="its ground-truth labels (JSONL, as gpufleet simulate writes)")
    m.add_argument("--seeds", help="simulated fleets to evaluate on when no --telemetry (default 9001)")
    m.add_argument("--held-out", metavar="DIR",
                   help="also evaluate the held-out family: every NAME.telemetry.jsonl[.gz] with its "
                        "NAME.labels.jsonl in DIR (made by bench/evalfleet, never used for training); reported beside "
                        "the simulated one")
    m.add_argument("--chart", metavar="PNG", help="draw a timeline of faults and incidents")
    m.add_argument("--report", metavar="JSON", help="write the figures as JSON")
    m.add_argument("--no-baselines", action="store_true", help="skip the baselines")
    s.set_defaults(fn=cmd_model)

    s = sub.add_parser("topics", help="create the Kafka topics gpufleet uses (idempotent)",
                       description="Create the telemetry, dead-letter, alert, billing and internal topics with their "
                                   "partition counts, or check that existing ones have them.")
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    s.add_argument("--partitions", type=int, help="partitions (setting kafka.partitions, 4)")
    s.set_defaults(fn=cmd_topics)

    s = sub.add_parser("publish", help="send a recorded telemetry file to the Kafka telemetry topic",
                       description="Produce every line of a telemetry JSONL file to the telemetry topic, keyed by "
                                   "node, for the workers to process (a replay in the distributed mode). Each line "
                                   "is checked first: a line that is not valid telemetry is not sent but reported "
                                   "with its line number, and the exit code is 1; the good lines are all sent.")
    s.add_argument("file", metavar="FILE", help="telemetry JSONL file (.gz too)")
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    s.add_argument("--topic", help="telemetry topic (setting kafka.telemetry_topic)")
    s.add_argument("--partitions", type=int, help="partitions if the topic is created (setting kafka.partitions)")
    s.add_argument("--end", action="store_true",
                   help="after the file, mark the end of the stream on every partition: the workers then flush "
                        "every open window as replay does at the end of its input")
    s.add_argument("--dead-letters", metavar="OUT",
                   help="write every line refused (not valid telemetry) here as a dead letter with its line number")
    s.set_defaults(fn=cmd_publish)

    s = sub.add_parser("status", help="how far the workers have got: committed offsets against the topics' ends",
                       description="For the workers' consumer group (worker.app_id), each partition of the "
                                   "telemetry and by-job topics: the offset committed, the end, and the lag. "
                                   "Zero lag everywhere means everything published has been processed and is "
                                   "stored (after `gpufleet publish --end`, windows included).")
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    s.add_argument("--topic", help="telemetry topic (setting kafka.telemetry_topic)")
    s.add_argument("--app-id", help="the workers' app id, their consumer group (setting worker.app_id)")
    s.add_argument("--wait", type=float, metavar="SECONDS",
                   help="wait up to SECONDS for zero lag everywhere; exit 1 if it does not come")
    s.set_defaults(fn=cmd_status)

    s = sub.add_parser("simulate", help="write a simulated fleet's telemetry and ground-truth labels",
                       description="Write a simulated fleet's telemetry (one gpufleet.telemetry.v1 message a "
                                   "line) and its ground-truth labels (one injected fault a line).")
    _fleet_options(s, start_default=DEFAULT_START)
    s.add_argument("-o", "--out", default="telemetry.jsonl", help="telemetry file (default telemetry.jsonl)")
    s.add_argument("--labels", help="labels file (default: OUT with .labels.jsonl)")
    s.set_defaults(fn=cmd_simulate)

    s = sub.add_parser("replay", help="run the embedded pipeline over a recorded telemetry file",
                       description="Run the embedded pipeline over a file of telemetry messages (JSONL, .gz "
                                   "too; any order within the allowed lateness), store the results and write "
                                   "every event it emits. Bad lines are dead-lettered and counted, never fatal.")
    s.add_argument("file", metavar="FILE", help="telemetry JSONL file")
    s.add_argument("--events", metavar="OUT", help="write every emitted event here, one JSON object a line")
    s.add_argument("--dead-letters", metavar="OUT", help="write every dead letter here, one JSON object a line")
    s.add_argument("--no-store", action="store_true", help="do not write to the store")
    s.add_argument("--model", help="detectors' model file (setting stream.model; default: the packaged model)")
    s.add_argument("--notify", metavar="FILE", help="also deliver the alerts with this routing file (TOML), through "
                                                    "the durable outbox in notify.outbox_dir")
    _store_options(s)
    s.set_defaults(fn=cmd_replay)

    s = sub.add_parser("db", help="manage the store's schema", description="Manage the store's schema.")
    dbsub = s.add_subparsers(dest="db_command", metavar="ACTION", parser_class=Parser)
    dbsub.required = True
    m = dbsub.add_parser("migrate", help="apply pending migrations (idempotent)",
                         description="Create the database if needed and apply, in order, the migrations not "
                                     "applied yet; each is recorded in schema_migrations.")
    _store_options(m)
    m = dbsub.add_parser("status", help="list migrations and whether each is applied",
                         description="List the migrations and whether each is applied.")
    _store_options(m)
    s.set_defaults(fn=cmd_db)

    s = sub.add_parser("summary", help="print the fleet summary from the store",
                       description="Print the fleet summary (utilization by pool and tenant, idle GPU-hours, "
                                   "longest idle windows, alerts) read from the store with SQL.")
    _store_options(s)
    s.set_defaults(fn=cmd_summary)

    s = sub.add_parser("forecast", help="demand forecasts: backtest on a series, or make them from the store",
                       description="Forecast each pool's demand 48 hours ahead with a p10-p90 band: backtest the "
                                   "forecaster on any demand series against naive baselines, or run the forecast "
                                   "process that makes forecasts and scale decisions from the store.")
    fsub = s.add_subparsers(dest="forecast_command", metavar="ACTION", parser_class=Parser)
    fsub.required = True
    m = fsub.add_parser("backtest", help="rolling-origin backtest against last value, yesterday and last week",
                        description="From every origin of the test period (one an hour), forecast the next "
                                    "--horizon from the values before it only, refitting the forecaster every "
                                    "--refit-every on everything before; print MAE, RMSE, SMAPE and p10-p90 "
                                    "coverage per horizon for the forecaster and the naive baselines, and the goals.")
    _series_options(m)
    m.add_argument("--horizon", default="48h", metavar="H", help="how far ahead, e.g. 48h (default 48h)")
    m.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    m.add_argument("--chart", metavar="PNG", help="draw forecast against actuals with the band, and SMAPE by horizon")
    m = fsub.add_parser("run", help="make forecasts and scale decisions from the store, publish them to Kafka",
                        description="Read each pool's demand from the store, make the forecasts and scale decisions "
                                    "due (every forecast.every_s of event time), publish them to "
                                    "<prefix>.forecast and <prefix>.scale and store them; then look again every "
                                    "forecast.poll_s seconds.")
    m.add_argument("--once", action="store_true", help="make what is due now, then exit")
    m.add_argument("--dry-run", action="store_true",
                   help="every pool's scale decisions are recorded only (setting scale.dry_run)")
    m.add_argument("--bootstrap", help="Kafka bootstrap servers (setting kafka.bootstrap)")
    _store_options(m)
    s.set_defaults(fn=cmd_forecast)

    s = sub.add_parser("scale", help="replay a demand series through a scale policy",
                       description="Scale policies: replay a demand series through one.")
    ssub = s.add_subparsers(dest="scale_command", metavar="ACTION", parser_class=Parser)
    ssub.required = True
    m = ssub.add_parser("simulate", help="GPU-hours, idle and shortfall of a policy against static peak and reactive",
                        description="Replay a demand series through a scale policy fed by the forecaster (fitted on "
                                    "the history before the test period, refitted as it goes) and print GPU-hours "
                                    "provisioned, idle GPU-hours and shortfall, against a static capacity at the "
                                    "series' peak and a purely reactive policy.")
    _series_options(m)
    m.add_argument("--policy", required=True, metavar="FILE",
                   help="TOML policy: the keys of the [scale] settings section (README)")
    m.add_argument("--pool", help="use the policy's [pools.POOL] values")
    m.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    s.set_defaults(fn=cmd_scale)

    s = sub.add_parser("serve", help="the HTTP service: the fleet page, its JSON, the forecast feed, /metrics",
                       description="Serve from the store over HTTP: the fleet page (GET /), incident pages "
                                   "(/incident?id=), the JSON behind every chart (/v1/fleet/...), the forecast "
                                   "feed (GET /v1/forecast?pool=P, GET /v1/scale?pool=P: the value for KEDA's "
                                   "metrics-api scaler, valueLocation target_gpus, /v1/pools), /metrics and "
                                   "/health. Only reads the store.")
    s.add_argument("--host", help="address to bind (setting serve.host, 127.0.0.1)")
    s.add_argument("--port", type=int, help="port (setting serve.port, 8080; 0: any free port)")
    _store_options(s)
    s.set_defaults(fn=cmd_serve)

    s = sub.add_parser("report", help="one self-contained HTML file with the fleet page's charts for a period",
                       description="Write the operator's view of a period as one HTML file that opens without "
                                   "network: utilization by node and GPU, incidents, utilization and idle cost by "
                                   "pool and tenant, demand with forecasts and scale decisions, billing. With "
                                   "--tenant, only that tenant's GPUs, incidents and billing. Reads only.")
    s.add_argument("--from", dest="start", required=True, type=_when, metavar="WHEN",
                   help="start, UTC: YYYY-MM-DD[THH:MM] or Unix seconds")
    s.add_argument("--to", dest="end", required=True, type=_when, metavar="WHEN",
                   help="end, UTC: YYYY-MM-DD[THH:MM] or Unix seconds")
    s.add_argument("-o", "--out", default="report.html", help="the HTML file to write (default report.html)")
    s.add_argument("--tenant", help="only this tenant (a report for a customer)")
    _store_options(s)
    s.set_defaults(fn=cmd_report)

    s = sub.add_parser("top", help="the fleet live in the terminal: pools, idlest rented GPUs, alerts firing",
                       description="A live terminal view of the fleet (like nvtop, for a fleet): pools with "
                                   "utilization bars, the idlest rented GPUs with what they cost so far, the alerts "
                                   "firing; redrawn in place. Keys: q quits, r reads now. Reads only.")
    s.add_argument("--interval", type=float, default=5.0, metavar="SECONDS",
                   help="seconds between two reads of the store (default 5)")
    s.add_argument("--once", action="store_true", help="print one snapshot to standard output and exit")
    _store_options(s)
    s.set_defaults(fn=cmd_top)

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
    _store_options(s)
    s.set_defaults(fn=cmd_bill)

    s = sub.add_parser("sql", help="run one SQL query against the store and print the result",
                       description="Run one SQL query against the store (embedded or server) and print the "
                                   "result as a table, e.g. gpufleet sql 'SELECT * FROM pool_usage_1m LIMIT 5'.")
    s.add_argument("query", metavar="QUERY", help="a ClickHouse SQL query")
    s.add_argument("--tsv", action="store_true", help="print tab-separated values with a header line")
    _store_options(s)
    s.set_defaults(fn=cmd_sql)
    return p


def main(argv: list[str] | None = None) -> int:
    from gpufleet.sql import StoreError, StoreMissing

    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(argv)
        args.prog = f"gpufleet {args.command}"
        if args.log_level is None:
            args.log_level = "INFO" if args.command in ("worker", "notify") else "WARNING"
        logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return args.fn(args)
    except (UsageError, SettingsError) as err:
        print(f"gpufleet: {err}" if isinstance(err, SettingsError) else str(err), file=sys.stderr)
        return 2
    except StoreMissing as err:
        print(f"gpufleet: setting store.database: {err}".splitlines()[0], file=sys.stderr)
        return 2
    except StoreError as err:
        print(f"gpufleet: store: {err}".splitlines()[0], file=sys.stderr)
        return 1
    except ModuleNotFoundError as err:
        module = (err.name or "").split(".")[0]
        extra = EXTRAS_OF_COMMAND.get((module, getattr(args, "command", ""))) or EXTRAS.get(module)
        if extra is None:
            raise
        print(f"gpufleet {getattr(args, 'command', '')}: needs the {extra} install, which lacks {err.name}: "
              f"pip install 'gpufleet[{extra}]'", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpufleet: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
