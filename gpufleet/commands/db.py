"""``gpufleet db migrate|status``: the store's schema."""
from __future__ import annotations

from . import COMMANDS
from .common import (
    Parser,
    readable_store,
    settings_of,
    store_options,
    writable_store,
)


def cmd_db(args) -> int:
    from gpufleet.sql import StoreMissing, migrations
    settings = settings_of(args)
    if args.db_command == "migrate":
        store = writable_store(settings)
        try:
            applied = store.applied()
        finally:
            store.close()
        print(f"{settings.store.database}: schema at version {applied[-1][0] if applied else 0} "
              f"({len(applied)} migrations applied)")
        return 0
    try:
        store = readable_store(settings, schema=False)
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


def add_db(sub) -> None:
    s = sub.add_parser("db", help=COMMANDS["db"].summary, description="Manage the store's schema.")
    dbsub = s.add_subparsers(dest="db_command", metavar="ACTION", parser_class=Parser)
    dbsub.required = True
    m = dbsub.add_parser("migrate", help="apply pending migrations (idempotent)",
                         description="Create the database if needed and apply, in order, the migrations not "
                                     "applied yet; each is recorded in schema_migrations.")
    store_options(m)
    m = dbsub.add_parser("status", help="list migrations and whether each is applied",
                         description="List the migrations and whether each is applied.")
    store_options(m)
    s.set_defaults(fn=cmd_db)
