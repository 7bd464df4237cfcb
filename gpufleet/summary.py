"""The fleet summary: a few questions an operator asks first, answered with SQL from the store."""
from __future__ import annotations

from decimal import Decimal

QUERIES = {
    "Utilization by pool": """
        SELECT pool,
               round(avg(gpus), 1)                                                   AS avg_gpus,
               round(avg(rented_gpus), 1)                                            AS avg_rented,
               round(sum(util_pct * gpus) / sum(gpus), 1)                            AS util_pct,
               round(sum(rented_util_pct * rented_gpus) / nullIf(sum(rented_gpus), 0), 1) AS rented_util_pct
        FROM pool_usage_1m
        GROUP BY pool
        ORDER BY pool""",
    "Utilization by tenant": """
        SELECT tenant,
               round(sum(gpus) / 60, 1)                        AS gpu_hours,
               round(sum(util_pct * gpus) / sum(gpus), 1)      AS util_pct,
               round(avg(power_w), 0)                          AS power_w
        FROM tenant_usage_1m
        GROUP BY tenant
        ORDER BY gpu_hours DESC""",
    "Idle GPU-hours by tenant (rented, below the idle threshold for the idle window or longer)": """
        SELECT tenant,
               round(sum(duration_s) / 3600, 2)   AS idle_gpu_hours,
               count()                            AS idle_windows,
               round(max(duration_s) / 60, 0)     AS longest_min
        FROM idle_windows
        GROUP BY tenant
        ORDER BY idle_gpu_hours DESC""",
    "Waste by tenant (idle, and the unused share of busy time below billing.underuse_pct; docs/finance.md)": """
        SELECT tenant,
               round(toFloat64(sum(idle_hours)), 2)            AS idle_gpu_hours,
               round(toFloat64(sum(underused_hours)), 2)       AS underused_gpu_hours,
               round(toFloat64(sum(tenant_waste_amount)), 2)   AS paid_for_waste,
               round(toFloat64(sum(unsold_amount)), 2)         AS unsold,
               round(toFloat64(sum(amount)), 2)                AS billed,
               any(currency)                        AS currency
        FROM billing_waste
        GROUP BY tenant
        ORDER BY paid_for_waste DESC""",
    "Longest idle windows": """
        SELECT node, gpu_index AS gpu, tenant, job,
               formatDateTime(started_at, '%Y-%m-%d %H:%i') AS started,
               round(duration_s / 60, 0)                    AS minutes,
               if(open, 'still idle', end_reason)           AS ended
        FROM idle_windows
        ORDER BY duration_s DESC, node, gpu_index
        LIMIT 8""",
    "Alerts": """
        SELECT kind, countIf(status = 'firing') AS incidents, countIf(status = 'resolved') AS resolved
        FROM alerts
        GROUP BY kind
        ORDER BY kind""",
    "Demand forecast (latest per pool: the next 48 hours) and the latest scale decision": """
        SELECT f.pool AS pool,
               formatDateTime(f.made_at, '%Y-%m-%d %H:%i') AS forecast_made,
               round(f.peak, 1)                             AS peak_forecast,
               round(f.peak_p90, 1)                         AS peak_p90,
               formatDateTime(s.decided_at, '%Y-%m-%d %H:%i') AS decided,
               s.rented_gpus                                AS rented,
               s.current_gpus                               AS present,
               s.capacity_gpus                              AS capacity,
               s.target_gpus                                AS target,
               s.action                                     AS action,
               if(s.request_gpus = 0, '-',
                  concat('+', toString(s.request_gpus), ' from ', formatDateTime(s.request_from, '%m-%d %H:%i'),
                         ' to ', formatDateTime(s.request_until, '%m-%d %H:%i')))   AS capacity_request
        FROM (SELECT pool, made_at, max(demand_gpus) AS peak, max(p90) AS peak_p90
              FROM forecasts FINAL
              WHERE (pool, made_at) IN (SELECT pool, max(made_at) FROM forecasts GROUP BY pool)
              GROUP BY pool, made_at) AS f
        LEFT JOIN (SELECT pool, max(at) AS decided_at, argMax(rented_gpus, at) AS rented_gpus,
                          argMax(current_gpus, at) AS current_gpus, argMax(capacity_gpus, at) AS capacity_gpus,
                          argMax(target_gpus, at) AS target_gpus, argMax(action, at) AS action,
                          argMax(request_gpus, at) AS request_gpus, argMax(request_from, at) AS request_from,
                          argMax(request_until, at) AS request_until
                   FROM scale_events FINAL GROUP BY pool) AS s ON s.pool = f.pool
        ORDER BY pool""",
    "Why (the latest scale decision of each pool)": """
        SELECT pool, formatDateTime(max(at), '%Y-%m-%d %H:%i') AS decided, argMax(reason, at) AS why
        FROM scale_events FINAL
        GROUP BY pool
        ORDER BY pool""",
}


def table(headers: list[str], rows: list[tuple]) -> str:
    """Rows as an aligned text table."""
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(_is_number(r[i]) for r in rows if r[i] is not None) and rows for i in range(len(headers))]
    def line(values):
        return "  ".join(v.rjust(w) if numeric[i] else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths)))
    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def _cell(v) -> str:
    """A value as text: floats to at most 3 decimals (ClickHouse returns binary floats such as 10075.006999969)."""
    if v is None:
        return ""
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return str(v)
        if v and abs(v) < 0.001:
            return f"{v:.3g}"
        return f"{v:.3f}".rstrip("0").rstrip(".")
    return str(v)


def _is_number(v) -> bool:
    return isinstance(v, int | float | Decimal) and not isinstance(v, bool)


def render(store) -> str:
    """The whole summary as text."""
    parts = []
    for title, sql in QUERIES.items():
        names, rows = store.select(sql)
        parts.append(f"{title}\n" + (table(names, rows) if rows else "(none)"))
    return "\n\n".join(parts)
