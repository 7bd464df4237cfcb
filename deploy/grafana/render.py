"""Render gpufleet's Grafana dashboards as JSON, ready to import (README.md here says how).

    python deploy/grafana/render.py            # writes deploy/grafana/gpufleet-fleet.json and gpufleet-services.json
    python deploy/grafana/render.py --check    # exit 1 if the files there are not current

- gpufleet-fleet.json: the fleet page's panels over the store, through the ClickHouse data source (the official
  grafana-clickhouse-datasource plugin, v4: SQL editor, its macros $__timeFilter, $__fromTime, $__toTime and
  $__timeInterval). Variables: the data source, the database (store.database) and the pools.
- gpufleet-services.json: the Prometheus metrics of the stream workers (gpufleet_worker_*), the node collectors
  (gpufleet_collector_*), the alert router (gpufleet_notify_*) and gpufleet serve (feed and view).

The panels are data here (title, kind, query); a test runs every ClickHouse panel's query against a store filled
by a replayed fleet, and checks every Prometheus query against the metrics the processes register.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CH = {"type": "grafana-clickhouse-datasource", "uid": "${datasource}"}
PROM = {"type": "prometheus", "uid": "${datasource}"}
DB = "${database}"
POOLS = "pool IN (${pool:singlequote})"
TIME_SERIES, TABLE = 0, 1        # the plugin's query formats

# -- the fleet page's panels (ClickHouse) -----------------------------------------------
FIRING = f"""status = 'firing' AND detected_at <= $__toTime AND detected_at >= $__fromTime - INTERVAL 7 DAY
  AND id NOT IN (SELECT id FROM {DB}.alerts WHERE status = 'resolved' AND resolved_at <= $__toTime
                 AND detected_at >= $__fromTime - INTERVAL 7 DAY)"""

IDLE_RUNS = f"""SELECT w.tenant AS tenant, w.pool AS pool, toUnixTimestamp64Milli(w.started_at) / 1000 AS s,
         toUnixTimestamp64Milli(w.ended_at) / 1000 AS e, toFloat64OrZero(a.price) AS price
  FROM (SELECT gpu_uuid, started_at, ended_at, tenant, pool FROM {DB}.idle_windows FINAL
        WHERE ended_at > $__fromTime AND started_at < $__toTime AND {POOLS}) AS w
  LEFT JOIN (SELECT gpu_uuid, started_at, any(JSONExtractString(evidence, 'price_per_gpu_hour')) AS price
             FROM {DB}.alerts WHERE kind = 'idle' AND status = 'firing' AND detected_at < $__toTime
             GROUP BY gpu_uuid, started_at) AS a ON a.gpu_uuid = w.gpu_uuid AND a.started_at = w.started_at
  UNION ALL
  SELECT tenant, pool, toUnixTimestamp64Milli(started_at) / 1000, toUnixTimestamp($__toTime),
         toFloat64OrZero(JSONExtractString(evidence, 'price_per_gpu_hour'))
  FROM {DB}.alerts WHERE kind = 'idle' AND {POOLS} AND {FIRING}
    AND (gpu_uuid, started_at) NOT IN (SELECT gpu_uuid, started_at FROM {DB}.idle_windows FINAL
                                       WHERE ended_at > $__fromTime)"""


def idle_cost_by(column: str) -> str:
    return f"""SELECT {column}, round(sum(greatest(0, least(e, toUnixTimestamp($__toTime))
                       - greatest(s, toUnixTimestamp($__fromTime))) / 3600 * price), 2) AS idle_cost
FROM (
  {IDLE_RUNS}
)
GROUP BY {column} ORDER BY idle_cost DESC"""


FLEET_PANELS = [
    ("row", "Waste: idle and underused GPUs"),
    {"title": "Waste billed in the month of the range's end, by tenant", "type": "bargauge", "format": TABLE,
     "w": 16, "h": 8, "unit": "currencyUSD",
     "description": "What each tenant paid for idle time and for the unused share of underused time (busy below "
                    "billing.underuse_pct), and the provider's unsold capacity where the tenant pays by use: the "
                    "billing_waste view (docs/finance.md).",
     "sql": f"""SELECT tenant, sum(idle_amount) AS idle, sum(unused_amount) AS unused, sum(unsold_amount) AS unsold
FROM {DB}.billing_waste
WHERE month = toStartOfMonth($__toTime) AND {POOLS}
GROUP BY tenant
ORDER BY idle + unused + unsold DESC"""},
    {"title": "Idle and underused GPU-hours this month", "type": "stat", "format": TABLE, "w": 8, "h": 8,
     "unit": "short",
     "sql": f"""SELECT sum(idle_hours) AS idle_gpu_hours, sum(underused_hours) AS underused_gpu_hours,
       sum(rented_hours) AS rented_gpu_hours
FROM {DB}.billing_waste
WHERE month = toStartOfMonth($__toTime) AND {POOLS}"""},
    {"title": "Waste by day and pool", "type": "timeseries", "format": TIME_SERIES, "w": 24, "h": 8,
     "unit": "currencyUSD",
     "sql": f"""SELECT toDateTime(day) AS time, pool, sum(tenant_waste_amount) AS paid_by_tenants,
       sum(unsold_amount) AS unsold
FROM {DB}.billing_waste
WHERE day >= toDate($__fromTime) AND day <= toDate($__toTime) AND {POOLS}
GROUP BY time, pool
ORDER BY time"""},
    ("row", "Utilization by node and GPU"),
    {"title": "Utilization by node and GPU", "type": "status-history", "format": TIME_SERIES, "w": 24, "h": 12,
     "unit": "percent", "description": "Mean utilization per GPU and interval (the fleet page's heat map).",
     "sql": f"""SELECT $__timeInterval(minute) AS time, concat(node, ' GPU ', toString(gpu_index)) AS gpu,
       avg(util_pct_mean) AS util
FROM {DB}.gpu_rollup_1m
WHERE $__timeFilter(minute) AND {POOLS}
GROUP BY time, gpu
ORDER BY time, gpu"""},
    {"title": "Idle now, and what each has cost so far", "type": "table", "format": TABLE, "w": 24, "h": 7,
     "description": "Rented GPUs in an idle window that has not ended (their idle alert is firing), with the price "
                    "the alert priced them at (billing.prices).",
     "sql": f"""SELECT node, gpu_uuid, tenant, job, started_at AS idle_since,
       round((toUnixTimestamp($__toTime) - toUnixTimestamp64Milli(started_at) / 1000) / 60) AS idle_min,
       toFloat64OrZero(JSONExtractString(evidence, 'price_per_gpu_hour')) AS price_per_gpu_hour,
       round(price_per_gpu_hour * (toUnixTimestamp($__toTime) - toUnixTimestamp64Milli(started_at) / 1000) / 3600, 2)
         AS cost_so_far
FROM {DB}.alerts
WHERE kind = 'idle' AND {POOLS} AND {FIRING}
ORDER BY cost_so_far DESC
LIMIT 200"""},
    ("row", "Alerts"),
    {"title": "Alerts firing", "type": "table", "format": TABLE, "w": 24, "h": 8,
     "description": "Incidents whose firing event has no resolve by the end of the time range, with their evidence.",
     "sql": f"""SELECT kind, severity, started_at, node, gpu_uuid, job, tenant, pool, summary, evidence, id
FROM {DB}.alerts
WHERE {FIRING}
ORDER BY detected_at DESC
LIMIT 1 BY id
LIMIT 200"""},
    {"title": "Incidents started, by kind", "type": "timeseries", "format": TIME_SERIES, "w": 24, "h": 7,
     "unit": "short", "bars": True,
     "sql": f"""SELECT $__timeInterval(started_at) AS time, kind, uniqExact(id) AS incidents
FROM {DB}.alerts
WHERE $__timeFilter(started_at) AND status = 'firing'
GROUP BY time, kind
ORDER BY time"""},
    ("row", "Utilization and idle cost by pool and tenant"),
    {"title": "Utilization by pool", "type": "timeseries", "format": TIME_SERIES, "w": 12, "h": 8,
     "unit": "percent",
     "sql": f"""SELECT $__timeInterval(minute) AS time, pool, avg(util) AS util_pct
FROM {DB}.usage_gpu_1m FINAL
WHERE $__timeFilter(minute) AND {POOLS}
GROUP BY time, pool
ORDER BY time"""},
    {"title": "Utilization by tenant", "type": "bargauge", "format": TABLE, "w": 12, "h": 8, "unit": "percent",
     "sql": f"""SELECT tenant, round(avg(util), 1) AS util_pct
FROM {DB}.usage_gpu_1m FINAL
WHERE $__timeFilter(minute) AND tenant != '' AND {POOLS}
GROUP BY tenant
ORDER BY util_pct"""},
    {"title": "Idle cost by pool", "type": "bargauge", "format": TABLE, "w": 12, "h": 8, "unit": "currencyUSD",
     "description": "Idle windows' time within the range at the price their idle alert priced it at.",
     "sql": idle_cost_by("pool")},
    {"title": "Idle cost by tenant", "type": "bargauge", "format": TABLE, "w": 12, "h": 8, "unit": "currencyUSD",
     "description": "Idle windows' time within the range at the price their idle alert priced it at.",
     "sql": idle_cost_by("tenant")},
    ("row", "Demand, forecast and scale decisions"),
    {"title": "Demand by pool (rented, busy, total GPUs)", "type": "timeseries", "format": TIME_SERIES, "w": 12,
     "h": 9, "unit": "short",
     "sql": f"""SELECT bucket AS time, pool, rented_gpus AS rented, busy_gpus AS busy, total_gpus AS total
FROM {DB}.pool_demand_5m
WHERE $__timeFilter(bucket) AND {POOLS}
ORDER BY time"""},
    {"title": "Latest forecast with its p10-p90 band", "type": "timeseries", "format": TIME_SERIES, "w": 12, "h": 9,
     "unit": "short", "description": "The latest forecast made by the end of the range; set the range past now "
                                     "(e.g. now-2d to now+1d) to see it ahead.",
     "sql": f"""SELECT ts AS time, pool, p10, demand_gpus AS forecast, p90
FROM {DB}.forecasts FINAL
WHERE (pool, made_at) IN (SELECT pool, max(made_at) FROM {DB}.forecasts WHERE made_at <= $__toTime GROUP BY pool)
  AND $__timeFilter(ts) AND {POOLS}
ORDER BY time"""},
    {"title": "Scale decisions", "type": "table", "format": TABLE, "w": 24, "h": 7,
     "sql": f"""SELECT at, pool, action, current_gpus, target_gpus, rented_gpus, capacity_gpus, request_gpus, dry_run,
       reason
FROM {DB}.scale_events FINAL
WHERE $__timeFilter(at) AND {POOLS}
ORDER BY at DESC
LIMIT 500"""},
    ("row", "Billing"),
    {"title": "Billed in the month of the range's end, by tenant", "type": "bargauge", "format": TABLE, "w": 16,
     "h": 8, "unit": "currencyUSD",
     "sql": f"""SELECT tenant, sum(amount) - sum(idle_amount) AS busy, sum(idle_amount) AS idle
FROM {DB}.billing_ledger FINAL
WHERE period_start >= toStartOfMonth($__toTime) AND period_start < toStartOfMonth($__toTime) + INTERVAL 1 MONTH
GROUP BY tenant
ORDER BY busy + idle DESC"""},
    {"title": "Billed this month", "type": "stat", "format": TABLE, "w": 8, "h": 8, "unit": "currencyUSD",
     "sql": f"""SELECT sum(amount) AS billed, sum(idle_amount) AS for_idle_gpus
FROM {DB}.billing_ledger FINAL
WHERE period_start >= toStartOfMonth($__toTime) AND period_start < toStartOfMonth($__toTime) + INTERVAL 1 MONTH"""},
]

POOL_VARIABLE = f"SELECT DISTINCT pool FROM {DB}.usage_gpu_1m WHERE $__timeFilter(minute) ORDER BY pool"

# -- the processes' metrics (Prometheus) --------------------------------------------------
SERVICE_PANELS = [
    ("row", "Stream workers (gpufleet_worker_*)"),
    {"title": "Messages and GPU samples per second", "unit": "ops",
     "exprs": [('sum by (stage, kind) (rate(gpufleet_worker_events_total{kind=~"messages|gpu_samples"}[5m]))',
                "{{stage}} {{kind}}")]},
    {"title": "Consumer lag by topic", "unit": "short",
     "exprs": [("sum by (topic) (gpufleet_worker_consumer_lag)", "{{topic}}")]},
    {"title": "Dead letters, duplicates and replays per second", "unit": "ops",
     "exprs": [('sum by (kind) (rate(gpufleet_worker_events_total{kind=~"dead_.*|duplicates|replayed|job_late"}[5m]))',
                "{{kind}}")]},
    {"title": "Making a batch durable (p95)", "unit": "s",
     "exprs": [("histogram_quantile(0.95, sum by (le, stage) (rate(gpufleet_worker_durable_batch_seconds_bucket[5m])))",
                "{{stage}}")]},
    {"title": "Store failures and time unavailable", "unit": "short",
     "exprs": [("sum by (instance) (gpufleet_worker_store_failures)", "failures {{instance}}"),
               ("sum by (instance) (gpufleet_worker_store_unavailable_seconds)", "seconds unavailable {{instance}}")]},
    {"title": "Since the last durable batch", "unit": "s",
     "exprs": [("time() - gpufleet_worker_last_batch_timestamp", "{{instance}}")]},
    {"title": "Clock skew (messages ahead of the clock) per second", "unit": "ops",
     "exprs": [("sum by (node) (rate(gpufleet_worker_clock_skew_total[5m]))", "{{node}}")]},
    ("row", "Node collectors (gpufleet_collector_*)"),
    {"title": "Samples per second", "unit": "ops",
     "exprs": [("sum by (instance) (rate(gpufleet_collector_ticks_total[5m]))", "{{instance}}")]},
    {"title": "Tick duration (p99)", "unit": "s",
     "exprs": [("histogram_quantile(0.99, sum by (le, instance) (rate(gpufleet_collector_tick_seconds_bucket[5m])))",
                "{{instance}}")]},
    {"title": "Spool: messages waiting for Kafka, and its size", "unit": "short",
     "exprs": [("gpufleet_collector_spool_pending", "pending {{instance}}"),
               ("gpufleet_collector_spool_bytes", "bytes {{instance}}")]},
    {"title": "Delivered, failed and dropped", "unit": "short",
     "exprs": [("sum(deriv(gpufleet_collector_delivered[5m]))", "delivered per second"),
               ("sum by (instance) (gpufleet_collector_delivery_failures)", "failures {{instance}}"),
               ("sum by (instance) (gpufleet_collector_dropped)", "dropped {{instance}}")]},
    {"title": "GPUs sampled, lost, NVML read errors", "unit": "short",
     "exprs": [("sum(gpufleet_collector_gpus)", "GPUs"), ("sum by (instance) (gpufleet_collector_gpus_lost)",
                                                           "lost {{instance}}"),
               ("sum by (instance) (gpufleet_collector_nvml_errors)", "NVML errors {{instance}}")]},
    ("row", "Alert router (gpufleet_notify_*)"),
    {"title": "Delivered per second, by receiver", "unit": "ops",
     "exprs": [("sum by (receiver, status) (rate(gpufleet_notify_sent_total[5m]))", "{{receiver}} {{status}}")]},
    {"title": "Dead-lettered, retried, rate-limited", "unit": "short",
     "exprs": [("sum by (receiver, reason) (increase(gpufleet_notify_failed_total[1h]))", "dead {{receiver}} "
                                                                                          "{{reason}}"),
               ("sum by (receiver) (rate(gpufleet_notify_retried_total[5m]))", "retried/s {{receiver}}"),
               ("sum by (receiver) (rate(gpufleet_notify_rate_limited_total[5m]))", "429/s {{receiver}}")]},
    {"title": "Owed deliveries and the oldest one's age", "unit": "short",
     "exprs": [("sum by (receiver) (gpufleet_notify_queue_depth)", "owed {{receiver}}"),
               ("max by (receiver) (gpufleet_notify_queue_age_seconds)", "oldest (s) {{receiver}}")]},
    {"title": "Arrival to delivery (p95)", "unit": "s",
     "exprs": [("histogram_quantile(0.95, sum by (le, receiver) (rate(gpufleet_notify_delivery_seconds_bucket[5m])))",
                "{{receiver}}")]},
    {"title": "Muted, reminders, bad messages, delivery log failures", "unit": "short",
     "exprs": [("sum by (state) (increase(gpufleet_notify_muted_total[1h]))", "muted {{state}}"),
               ("sum by (state) (increase(gpufleet_notify_reminders_total[1h]))", "reminders {{state}}"),
               ("sum(increase(gpufleet_notify_invalid_messages_total[1h]))", "invalid messages"),
               ("sum(increase(gpufleet_notify_ledger_failures_total[1h]))", "delivery log failures"),
               ("sum by (receiver) (increase(gpufleet_notify_throttled_seconds_total[1h]))",
                "throttled (s) {{receiver}}")]},
    ("row", "The fleet (gpufleet serve's gauges)"),
    {"title": "GPUs by state", "unit": "short",
     "exprs": [("sum by (state) (gpufleet_gpus)", "{{state}}")]},
    {"title": "Waste per hour now, by pool", "unit": "short",
     "exprs": [("sum by (pool, currency) (gpufleet_waste_per_hour)", "{{pool}} ({{currency}}/h)")]},
    {"title": "Alerts firing, by kind and severity", "unit": "short",
     "exprs": [("sum by (kind, severity) (gpufleet_alerts_firing)", "{{kind}} {{severity}}")]},
    {"title": "Age of the newest telemetry", "unit": "s",
     "exprs": [("gpufleet_telemetry_age_seconds", "age")]},
    ("row", "gpufleet serve (feed and fleet view)"),
    {"title": "Scale target, GPUs present and rented", "unit": "short",
     "exprs": [("gpufleet_scale_target_gpus", "target {{pool}}"), ("gpufleet_scale_current_gpus", "present {{pool}}"),
               ("gpufleet_scale_rented_gpus", "rented {{pool}}")]},
    {"title": "Forecast in 6 hours (p10, demand, p90)", "unit": "short",
     "exprs": [('gpufleet_forecast_demand_gpus{horizon="6h"}', "{{pool}} {{band}}")]},
    {"title": "Fleet view requests and their time (p95)", "unit": "short",
     "exprs": [("sum by (path, code) (rate(gpufleet_view_requests_total[5m]))", "{{path}} {{code}}/s"),
               ("histogram_quantile(0.95, sum by (le, path) (rate(gpufleet_view_seconds_bucket[5m])))",
                "p95 (s) {{path}}"),
               ("sum by (path, code) (rate(gpufleet_feed_requests_total[5m]))", "feed {{path}} {{code}}/s")]},
]


# -- rendering -----------------------------------------------------------------------------
def _layout(specs, panel) -> list[dict]:
    panels, x, y, row_h, pid = [], 0, 0, 0, 1
    for spec in specs:
        if isinstance(spec, tuple):
            y += row_h
            x, row_h = 0, 0
            panels.append({"id": pid, "type": "row", "title": spec[1], "collapsed": False, "panels": [],
                           "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
            y += 1
        else:
            w, h = spec.get("w", 12), spec.get("h", 8)
            if x + w > 24:
                y += row_h
                x, row_h = 0, 0
            p = panel(spec)
            p.update({"id": pid, "gridPos": {"h": h, "w": w, "x": x, "y": y}})
            panels.append(p)
            x += w
            row_h = max(row_h, h)
        pid += 1
    return panels


def _clickhouse_panel(spec: dict) -> dict:
    custom: dict = {}
    if spec.get("bars"):
        custom = {"drawStyle": "bars", "fillOpacity": 80, "stacking": {"mode": "normal", "group": "A"}}
    options: dict = {}
    if spec["type"] == "status-history":
        options = {"showValue": "never", "rowHeight": 0.9, "colWidth": 0.95, "legend": {"showLegend": True}}
    elif spec["type"] == "bargauge":
        options = {"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True,
                   "reduceOptions": {"values": True, "calcs": [], "fields": ""}}
    elif spec["type"] == "stat":
        options = {"reduceOptions": {"values": False, "calcs": ["lastNotNull"], "fields": ""}, "colorMode": "none"}
    color = {"mode": "continuous-viridis"} if spec["type"] == "status-history" else {"mode": "palette-classic"}
    return {
        "type": spec["type"], "title": spec["title"], "description": spec.get("description", ""), "datasource": CH,
        "fieldConfig": {"defaults": {"unit": spec.get("unit", "none"), "color": color, "custom": custom,
                                     **({"min": 0, "max": 100} if spec.get("unit") == "percent" else {})},
                        "overrides": []},
        "options": options,
        "targets": [{"refId": "A", "datasource": CH, "editorType": "sql", "format": spec["format"],
                     "queryType": "timeSeries" if spec["format"] == TIME_SERIES else "table",
                     "rawSql": spec["sql"], "meta": {}}]}


def _prometheus_panel(spec: dict) -> dict:
    return {"type": "timeseries", "title": spec["title"], "datasource": PROM,
            "fieldConfig": {"defaults": {"unit": spec.get("unit", "short"), "custom": {"fillOpacity": 5}},
                            "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "targets": [{"refId": chr(65 + i), "datasource": PROM, "expr": expr, "legendFormat": legend,
                         "range": True} for i, (expr, legend) in enumerate(spec["exprs"])]}


def _dashboard(uid: str, title: str, description: str, panels: list[dict], templating: list[dict], time_from: str,
               time_to: str, requires: list[dict]) -> dict:
    return {"__inputs": [], "__requires": requires, "annotations": {"list": []}, "description": description,
            "editable": True, "graphTooltip": 1, "links": [], "panels": panels, "refresh": "1m",
            "schemaVersion": 39, "tags": ["gpufleet"], "templating": {"list": templating},
            "time": {"from": time_from, "to": time_to}, "timepicker": {}, "timezone": "utc", "title": title,
            "uid": uid, "version": 1}


def fleet() -> dict:
    templating = [
        {"name": "datasource", "label": "ClickHouse", "type": "datasource", "query": "grafana-clickhouse-datasource",
         "current": {}, "hide": 0, "refresh": 1, "options": []},
        {"name": "database", "label": "database", "type": "textbox", "query": "gpufleet",
         "current": {"text": "gpufleet", "value": "gpufleet"}, "hide": 0, "options": []},
        {"name": "pool", "label": "pool", "type": "query", "datasource": CH, "definition": POOL_VARIABLE,
         "query": {"refId": "pool", "editorType": "sql", "format": TABLE, "queryType": "table",
                   "rawSql": POOL_VARIABLE},
         "includeAll": True, "multi": True, "refresh": 2, "sort": 1,
         "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "hide": 0, "options": []}]
    requires = [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
                {"type": "datasource", "id": "grafana-clickhouse-datasource", "name": "ClickHouse",
                 "version": "4.0.0"}]
    return _dashboard("gpufleet-fleet", "gpufleet · fleet", "The fleet page of gpufleet serve, over the store "
                      "(ClickHouse)", _layout(FLEET_PANELS, _clickhouse_panel), templating, "now-6h", "now", requires)


def services() -> dict:
    templating = [{"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
                   "current": {}, "hide": 0, "refresh": 1, "options": []}]
    requires = [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
                {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"}]
    return _dashboard("gpufleet-services", "gpufleet · services", "gpufleet's workers, collectors, alert router and "
                      "serve, from their Prometheus metrics", _layout(SERVICE_PANELS, _prometheus_panel), templating,
                      "now-3h", "now", requires)


def rendered() -> dict[str, str]:
    return {name: json.dumps(board, indent=2, ensure_ascii=False) + "\n"
            for name, board in (("gpufleet-fleet.json", fleet()), ("gpufleet-services.json", services()))}


def main() -> int:
    parser = argparse.ArgumentParser(description="Render gpufleet's Grafana dashboards.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed files are not current")
    args = parser.parse_args()
    stale = []
    for name, text in rendered().items():
        path = HERE / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"not current: {', '.join(stale)}: run python deploy/grafana/render.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
