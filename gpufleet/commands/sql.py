"""``gpufleet sql``: one query against the store."""
from __future__ import annotations

from .common import (
    readable_store,
    settings_of,
    store_options,
)


def cmd_sql(args) -> int:
    from gpufleet.summary import table
    store = readable_store(settings_of(args), schema=False)
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


def add_sql(sub) -> None:
    s = sub.add_parser("sql", help="run one SQL query against the store and print the result",
                       description="Run one SQL query against the store (embedded or server) and print the "
                                   "result as a table, e.g. gpufleet sql 'SELECT * FROM pool_usage_1m LIMIT 5'.")
    s.add_argument("query", metavar="QUERY", help="a ClickHouse SQL query")
    s.add_argument("--tsv", action="store_true", help="print tab-separated values with a header line")
    store_options(s)
    s.set_defaults(fn=cmd_sql)
