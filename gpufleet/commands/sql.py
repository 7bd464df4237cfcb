"""``gpufleet sql``: one query against the store, printed as a finance tool reads it.

Decimals print as decimals (``0.909583``, never ``Decimal('0.909583')``), inside maps and arrays too; floats are
rounded to the digits their type holds (7 significant for ``Float32``, 15 for ``Float64``), so a ``Float32`` 5.443
prints 5.443 and not 5.442999839782715; there is always a header, in the table and in TSV; an empty result says
``0 rows``.
"""
from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

from . import COMMANDS
from .common import (
    readable_store,
    settings_of,
    store_options,
)


def _digits(type_name: str) -> int:
    """Significant digits of a float column: 7 for Float32 (or an array or map of them), else 15."""
    return 7 if "Float32" in type_name else 15


def _float(v: float, digits: int) -> str:
    if math.isnan(v) or math.isinf(v):
        return str(v)
    if v == 0:
        return "0"
    text = f"{v:.{digits}g}"
    if "e" in text:
        mantissa, exp = text.split("e")
        if -6 <= int(exp) < 16:          # plain notation for ordinary magnitudes, as a spreadsheet shows them
            text = f"{v:.{max(digits - 1 - int(exp), 0)}f}"
        else:
            return text
    return text.rstrip("0").rstrip(".") if "." in text else text


def value_text(v, type_name: str = "") -> str:
    """One value as text: NULL as empty, decimals exact, floats to their type's digits, maps and arrays alike."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Decimal):
        return format(v, "f") if v.is_finite() else str(v)
    if isinstance(v, float):
        return _float(v, _digits(type_name))
    if isinstance(v, dt.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, dict):
        return "{" + ",".join(f"{_inner(k, type_name)}:{_inner(x, type_name)}" for k, x in v.items()) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(_inner(x, type_name) for x in v) + "]"
    return str(v)


def _inner(v, type_name: str) -> str:
    """A value inside a map or array, strings quoted as ClickHouse writes them (``{'on_demand':2.000000}``)."""
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return value_text(v, type_name)


def _tsv(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def render(names: list[str], types: list[str], rows: list[tuple], tsv: bool) -> str:
    """The result as TSV (a header line, then the rows) or an aligned table; ``0 rows`` when it has none."""
    cells = [[value_text(v, t) for v, t in zip(r, types)] for r in rows]
    if tsv:
        return "\n".join("\t".join(_tsv(c) for c in r) for r in [names, *cells])
    if not names:
        return "0 rows"
    numeric = [bool(rows) and all(isinstance(r[i], int | float | Decimal) and not isinstance(r[i], bool)
                                  for r in rows if r[i] is not None) for i in range(len(names))]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(names)]

    def line(values):
        return "  ".join(v.rjust(w) if numeric[i] else v.ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    out = [line(names), line(["-" * w for w in widths]), *(line(r) for r in cells)]
    out.append(f"{len(rows):,} row" + ("" if len(rows) == 1 else "s"))
    return "\n".join(out)


def _columns(store, query: str) -> tuple[list[str], list[str]]:
    """The columns of a query whose result came back empty (the engine then sends no header): DESCRIBE reads them
    without running it; a statement DESCRIBE does not take (SHOW, EXISTS, ...) has none."""
    from gpufleet.sql import StoreError
    try:
        described = store.query(f"DESCRIBE ({query.strip().rstrip(';')})")
    except StoreError:
        return [], []
    return [r[0] for r in described], [r[1] for r in described]


def cmd_sql(args) -> int:
    store = readable_store(settings_of(args), schema=False)
    try:
        names, types, rows = store.select_typed(args.query)
        if not names:
            names, types = _columns(store, args.query)
        print(render(names, types, rows, args.tsv))
    finally:
        store.close()
    return 0


def add_sql(sub) -> None:
    s = sub.add_parser("sql", help=COMMANDS["sql"].summary,
                       description="Run one SQL query against the store (embedded or server) and print the "
                                   "result as a table with a header and a row count, e.g. gpufleet sql "
                                   "'SELECT * FROM pool_usage_1m LIMIT 5'. Decimals print exactly, floats to the "
                                   "digits their type holds (7 for Float32, 15 for Float64). Reads only.")
    s.add_argument("query", metavar="QUERY", help="a ClickHouse SQL query")
    s.add_argument("--tsv", action="store_true",
                   help="print tab-separated values: a header line, then one line per row (no row count)")
    store_options(s)
    s.set_defaults(fn=cmd_sql)
