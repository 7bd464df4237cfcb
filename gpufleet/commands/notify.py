"""``gpufleet notify``, ``gpufleet silence add|list|expire`` and ``--notify`` on replay and demo."""
from __future__ import annotations

import datetime as dt
import getpass
import sys


def _usage(message: str) -> Exception:
    from gpufleet.errors import UsageError
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


def notify(args, settings, writable_store) -> int:
    from gpufleet.streams import worker
    from gpufleet.streams.kafka import KafkaUnavailable, ensure_topics
    from gpufleet.streams.notify import service
    from gpufleet.streams.notify.outbox import OutboxError

    routes = load_routes(args.prog, settings.notify.routes)
    if args.check:
        print(f"{settings.notify.routes}: {len(routes.receivers)} receivers, "
              f"inhibition {'on' if routes.node_over_gpu else 'off'}")
        for name, r in routes.receivers.items():
            rate, burst = r.rate
            print(f"  receiver {name}: {r.kind}, " + (f"{rate:g}/s, bursts of {burst}" if rate else "no rate limit"))
        for line in routes.describe():
            print("  " + line)
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


def local_notifier(prog: str, settings, path: str, store):
    """The notifier of ``replay`` / ``demo --notify FILE``, started."""
    from gpufleet.streams.notify.outbox import OutboxError
    from gpufleet.streams.notify.service import LocalNotifier
    routes = load_routes(prog, path)
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


def finish(notifier) -> None:
    counts = notifier.finish()
    told = ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()) if k != "invalid") or "nothing"
    print(f"notified: {notifier.offered:,} alert events; deliveries {told} (table alert_deliveries)")


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
