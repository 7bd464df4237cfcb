"""``gpufleet notify``, ``gpufleet silence add|list|expire`` and ``--notify`` on replay and demo."""
from __future__ import annotations

import datetime as dt
import getpass
import sys

from gpufleet.errors import UsageError
from gpufleet.settings import load_settings

from . import COMMANDS
from .common import (
    Parser,
    kafka_overrides,
    readable_store,
    settings_of,
    store_options,
    writable_store,
)


def _usage(message: str) -> Exception:
    return UsageError(message)


def load_routes(prog: str, path: str | None, build: bool = True):
    """The routing file, checked; a bad one is a one-line usage error naming the setting."""
    from gpufleet.streams.notify.receivers import RoutesError
    from gpufleet.streams.notify.routing import Routes
    if not path:
        raise _usage(f"{prog}: argument --routes: needed (or setting notify.routes)")
    try:
        return Routes.load(path, build=build)
    except RoutesError as err:
        raise _usage(f"{prog}: {err}") from None


def run_router(args, settings, writable_store) -> int:
    from gpufleet.streams import worker
    from gpufleet.streams.kafka import KafkaUnavailable, ensure_topics
    from gpufleet.streams.notify import service
    from gpufleet.streams.notify.outbox import OutboxError

    routes = load_routes(args.prog, settings.notify.routes)
    if args.check:
        print(f"{settings.notify.routes}: {len(routes.receivers)} receivers, "
              f"{len(routes.inhibit_rules)} inhibition rules")
        for name, r in routes.receivers.items():
            rate, burst = r.rate
            print(f"  receiver {name}: {r.kind}, " + (f"{rate:g}/s, bursts of {burst}" if rate else "no rate limit"))
        for line in routes.describe():
            print("  " + line)
        for rule in routes.inhibit_rules:
            print(f"  inhibit {rule}")
        return 0
    topic = worker.topic_names(settings)["alerts"]
    try:
        ensure_topics(settings.kafka.bootstrap, {topic: settings.kafka.partitions,
                                                 service.dead_letter_topic(topic): settings.kafka.partitions})
    except ValueError:
        pass                                  # it exists with another partition count: the router reads any
    except KafkaUnavailable as err:
        print(f"gpufleet notify: kafka: {err}", file=sys.stderr)
        return 1
    store = writable_store(settings)
    try:
        return service.run(settings, routes, store, topic)
    except OutboxError as err:
        raise _usage(f"{args.prog}: setting notify.outbox_dir: {err}") from None
    finally:
        store.close()


def local_notifier(prog: str, settings, routes, store):
    """The notifier of ``replay`` / ``demo --notify``, started, with routes already loaded."""
    from gpufleet.streams.notify.outbox import OutboxError
    from gpufleet.streams.notify.service import LocalNotifier
    try:
        notifier = LocalNotifier(settings, routes, store)
    except OutboxError as err:
        raise _usage(f"{prog}: setting notify.outbox_dir: {err}") from None
    resumed = notifier.start()
    print(f"notify: routing alerts to {', '.join(f'{n} ({r.kind})' for n, r in routes.receivers.items())}; "
          f"delivery log {notifier.parts.outbox.path}", file=sys.stderr)
    if resumed:
        print(f"notify: {resumed} deliveries a previous run left owed are told first", file=sys.stderr)
    return notifier


def finish(notifier, routing=None) -> int:
    """Deliver what is owed (within notify.finish_wait_s) and say what became of it; 1 if some is still owed."""
    try:
        counts = notifier.finish()
    finally:
        if routing is not None:
            routing.close()
    owed = counts.pop("owed", 0)
    told = ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()) if k != "invalid") or "nothing"
    print(f"notified: {notifier.offered:,} alert events; deliveries {told} (table alert_deliveries)")
    if routing is not None and routing.payloads:
        print(f"notify: the payloads each receiver got are in {routing.payloads}")
    if owed:
        print(f"notify: {owed:,} deliveries still owed after notify.finish_wait_s; they stay in "
              f"{notifier.parts.outbox.path} and are told first at the next run with --notify", file=sys.stderr)
        return 1
    return 0


# -- silences -----------------------------------------------------------------------
def _utc(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def silence(args, settings, writable_store, readable_store) -> int:
    from gpufleet.streams.notify import silences
    from gpufleet.streams.notify.matchers import Matcher, parse_duration
    from gpufleet.summary import table

    if args.silence_command == "add":
        try:
            matchers = [Matcher.parse(m) for m in args.match]
        except ValueError as err:
            raise _usage(f"{args.prog} add: argument --match: {err}") from None
        try:
            duration = parse_duration(args.duration)
        except ValueError as err:
            raise _usage(f"{args.prog} add: argument --for: {err}") from None
        if not 0 < duration <= 366 * 86400:
            raise _usage(f"{args.prog} add: argument --for: {args.duration} is not between 1s and 366d")
        store = writable_store(settings)
        try:
            s = silences.add(store, matchers, duration, args.comment or "", args.author or _user())
        finally:
            store.close()
        print(f"silence {s.id} until {_utc(s.ends_at)}: {', '.join(map(str, s.matchers))}")
        return 0
    if args.silence_command == "list":
        store = readable_store(settings)
        try:
            found = silences.load(store, include_expired=args.all)
        finally:
            store.close()
        import time
        now = time.time()
        print(table(["id", "state", "matchers", "starts", "ends", "created_by", "comment"],
                    [(s.id, s.state(now), ", ".join(map(str, s.matchers)), _utc(s.starts_at), _utc(s.ends_at),
                      s.created_by, s.comment) for s in found]) if found else "no silences")
        return 0
    store = writable_store(settings)
    try:
        s = silences.expire(store, args.id)
    except ValueError as err:
        raise _usage(f"{args.prog} expire: argument ID: {err}") from None
    finally:
        store.close()
    print(f"silence {s.id} expired at {_utc(s.ends_at)}")
    return 0


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


# -- the command line --------------------------------------------------------------------------------



def routes_test(args) -> int:
    """``gpufleet notify routes test LABEL=VALUE...``: the receivers an alert with these labels reaches."""
    from gpufleet.streams.notify.matchers import LABELS
    settings = load_settings(args.config, **({"notify": {"routes": args.routes}} if args.routes else {}))
    routes = load_routes(args.prog, settings.notify.routes, build=False)
    values = dict.fromkeys(LABELS, "")
    for text in args.labels:
        name, eq, value = text.partition("=")
        if not eq or name not in LABELS:
            raise _usage(f"{args.prog}: argument LABEL=VALUE: {text!r} is not one of {', '.join(LABELS)} "
                         f"followed by =VALUE")
        values[name] = value
    alert = {**values, "gpu_uuid": values["gpu"], "dedup_key": "(tested)"}
    matches = routes.match(alert)
    print(",".join(m.receiver for m in matches))
    if args.verbose:
        for m in matches:
            group = ", ".join(f"{k}={v}" for k, v in m.group.items()) or "(one group)"
            print(f"  {m.route.path} -> {m.receiver} [{routes.receivers[m.receiver].config.type}]; group {group}; "
                  f"wait {m.route.group_wait:g}s, interval {m.route.group_interval:g}s, "
                  f"repeat {m.route.repeat_interval:g}s")
        for rule in routes.inhibit_rules:
            side = [name for name, hit in (("source", rule.is_source(values)), ("target", rule.is_target(values)))
                    if hit]
            if side:
                print(f"  inhibit {rule}: this alert is its {' and '.join(side)}")
    if args.verify_receivers is not None:
        want = [r for r in args.verify_receivers.split(",") if r]
        got = [m.receiver for m in matches]
        if sorted(want) != sorted(got):
            print(f"{args.prog}: expected receivers {','.join(want) or '(none)'}, got {','.join(got) or '(none)'}",
                  file=sys.stderr)
            return 1
    return 0


def notify_status(args, settings) -> int:
    """Each receiver's deliveries by state and its circuit breaker, from the delivery log (read only)."""
    from gpufleet.streams.notify.outbox import read_status
    from gpufleet.summary import table
    found = read_status(settings.notify.outbox_dir)
    if found is None:
        print(f"no delivery log in {settings.notify.outbox_dir} (setting notify.outbox_dir): nothing delivered yet")
        return 0
    rows = []
    for name, r in sorted(found.items()):
        states = ", ".join(f"{k} {v:,}" for k, v in sorted(r["states"].items())) or "-"
        breaker = r.get("breaker", "up")
        if breaker == "down":
            breaker = f"DOWN since {_utc(r['since'])}: {r.get('last_error', '')[:80]}" if r.get("since") else "DOWN"
        rows.append((name, breaker, states, _utc(r["last_sent"]) if r.get("last_sent") else "-"))
    print(table(["RECEIVER", "STATE", "DELIVERIES", "LAST SENT"], rows))
    return 1 if any(r.get("breaker") == "down" for r in found.values()) else 0


def cmd_notify_status(args) -> int:
    notify = {"outbox_dir": args.outbox} if args.outbox else {}
    return notify_status(args, load_settings(args.config, **({"notify": notify} if notify else {})))


def cmd_notify(args) -> int:
    notify = {k: v for k, v in (("routes", args.routes), ("group_id", args.group_id),
                                ("metrics_port", args.metrics_port), ("outbox_dir", args.outbox)) if v is not None}
    store = {k: v for k, v in (("dsn", args.dsn), ("database", args.database)) if v is not None}
    settings = load_settings(args.config, **({"notify": notify} if notify else {}),
                             **({"store": store} if store else {}), **kafka_overrides(args))
    return run_router(args, settings, writable_store)


def cmd_routes_test(args) -> int:
    args.routes = args.routes_file or args.routes
    return routes_test(args)


def cmd_silence(args) -> int:
    return silence(args, settings_of(args), writable_store, readable_store)


def add_notify(sub) -> None:
    s = sub.add_parser("notify", help=COMMANDS["notify"].summary,
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
    store_options(s)
    s.set_defaults(fn=cmd_notify)
    nsub = s.add_subparsers(dest="notify_command", metavar="ACTION", parser_class=Parser)
    r = nsub.add_parser("routes", help="test the routing file: routes test LABEL=VALUE...",
                        description="Questions to the routing file.")
    rsub = r.add_subparsers(dest="routes_command", metavar="ACTION", parser_class=Parser)
    rsub.required = True
    t = rsub.add_parser("test", help="print the receivers an alert with these labels reaches",
                        description="Print the receivers (comma-separated, in the order told) that an alert with "
                                    "these labels reaches, as amtool config routes test does. Labels not given are "
                                    "empty. E.g. gpufleet notify routes test --routes routes.toml kind=memory_leak "
                                    "severity=critical tenant=acme. No secret is read.")
    t.add_argument("labels", nargs="*", metavar="LABEL=VALUE", help="kind, severity, tenant, pool, node, job, gpu")
    t.add_argument("--routes", dest="routes_file", metavar="FILE", help="routing file, TOML (setting notify.routes)")
    t.add_argument("--verbose", "-v", action="store_true", help="also the route, group and timers of each match, "
                                                                "and the inhibition rules the alert is a side of")
    t.add_argument("--verify-receivers", metavar="A,B", help="exit 1 unless exactly these receivers are reached")
    t.set_defaults(fn=cmd_routes_test)
    st = nsub.add_parser("status", help="each receiver's deliveries and whether it is up or down",
                         description="Read the delivery log (notify.outbox_dir) and print, per receiver, its "
                                     "deliveries by state, the last one sent, and its circuit breaker: up, or down "
                                     "since when and why (a receiver that failed past notify.retry_for_s; its "
                                     "deliveries are dead-lettered, with a probe every notify.probe_every_s). "
                                     "Exits 1 while a receiver is down. Reads only.")
    st.add_argument("--outbox", metavar="DIR", help="delivery log directory (setting notify.outbox_dir)")
    st.set_defaults(fn=cmd_notify_status)


def add_silence(sub) -> None:
    s = sub.add_parser("silence", help=COMMANDS["silence"].summary,
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
    store_options(m)
    m = ssub.add_parser("list", help="list silences in force or to come", description="List the silences in force "
                                                                                      "or still to start.")
    m.add_argument("--all", action="store_true", help="expired ones too")
    store_options(m)
    m = ssub.add_parser("expire", help="end a silence now", description="End a silence now.")
    m.add_argument("id", metavar="ID", help="the silence's id (or its first characters)")
    store_options(m)
    s.set_defaults(fn=cmd_silence)
