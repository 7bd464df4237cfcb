-- 0008_billing_ledger for a ClickHouse cluster, rendered from sql/migrations/0008_billing_ledger.sql by deploy/clickhouse-cluster/render.py:
-- do not edit; apply in order (README.md here).

CREATE TABLE IF NOT EXISTS billing_ledger ON CLUSTER '{cluster}'
(
    gpu_uuid            LowCardinality(String),
    tenant              LowCardinality(String),
    job                 String,
    period_start        DateTime('UTC'),
    period_end          DateTime('UTC'),
    node                LowCardinality(String),
    pool                LowCardinality(String),
    gpu_index           UInt16,
    gpu_model           LowCardinality(String),
    mig_profile         LowCardinality(String),
    gpu_share           Decimal(9, 6),
    team                LowCardinality(String),
    billing_mode        LowCardinality(String),
    currency            LowCardinality(String),
    samples             UInt32,
    interval_s          Float32,
    rented_s            Decimal(18, 3),
    busy_s              Decimal(18, 3),
    idle_s              Decimal(18, 3),
    estimated_s         Decimal(18, 3),
    unbilled_s          Decimal(18, 3),
    minimum_topup_s     Decimal(18, 3),
    util_pct            Nullable(Float32),
    busy_util_pct       Nullable(Float32),
    price_per_gpu_hour  Decimal(18, 6),
    amount              Decimal(18, 6),
    idle_amount         Decimal(18, 6),
    mode_amounts        Map(LowCardinality(String), Decimal(18, 6)),
    data_quality        LowCardinality(String)
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/billing_ledger', '{replica}')
PARTITION BY toYYYYMM(period_start)
ORDER BY (gpu_uuid, tenant, job, period_start)
SETTINGS replicated_deduplication_window = 10000;

CREATE TABLE IF NOT EXISTS billing_ledger_all ON CLUSTER '{cluster}' AS billing_ledger
ENGINE = Distributed('{cluster}', currentDatabase(), billing_ledger, cityHash64(gpu_uuid));

ALTER TABLE gpu_rollup_1m ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS rented_ms UInt32 DEFAULT 0;

ALTER TABLE gpu_rollup_1m_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS rented_ms UInt32 DEFAULT 0;

CREATE VIEW IF NOT EXISTS billing_cost_monthly ON CLUSTER '{cluster}' AS
SELECT
    month, tenant, pool, currency, gpus, rented_s, busy_s, idle_s, estimated_s,
    toDecimal64(round(toDecimal128(rented_s, 9) / 3600, 6), 6)          AS rented_hours,
    toDecimal64(round(toDecimal128(busy_s, 9) / 3600, 6), 6)            AS busy_hours,
    toDecimal64(round(toDecimal128(idle_s, 9) / 3600, 6), 6)            AS idle_hours,
    amount,
    idle_amount
FROM
(
    SELECT toStartOfMonth(period_start) AS month, tenant, pool, currency, uniqExact(gpu_uuid) AS gpus,
           sum(rented_s) AS rented_s, sum(busy_s) AS busy_s, sum(idle_s) AS idle_s, sum(estimated_s) AS estimated_s,
           sum(amount) AS amount, sum(idle_amount) AS idle_amount
    FROM billing_ledger FINAL
    GROUP BY month, tenant, pool, currency
);

CREATE VIEW IF NOT EXISTS billing_idle_cost ON CLUSTER '{cluster}' AS
SELECT
    month, tenant, team, currency, rented_s, idle_s,
    toDecimal64(round(toDecimal128(idle_s, 9) / 3600, 6), 6)                              AS idle_hours,
    amount,
    idle_amount,
    toDecimal64(round(toDecimal128(idle_amount, 9) * 100 / nullIf(amount, 0), 2), 2)      AS idle_share_pct
FROM
(
    SELECT toStartOfMonth(period_start) AS month, tenant, team, currency, sum(rented_s) AS rented_s,
           sum(idle_s) AS idle_s, sum(amount) AS amount, sum(idle_amount) AS idle_amount
    FROM billing_ledger FINAL
    GROUP BY month, tenant, team, currency
);

CREATE VIEW IF NOT EXISTS billing_utilization ON CLUSTER '{cluster}' AS
SELECT
    toStartOfMonth(period_start)                                                  AS month,
    tenant,
    toDecimal64(round(toDecimal128(sum(rented_s), 9) / 3600, 6), 6)                               AS rented_hours,
    sum(util_pct * toFloat64(rented_s)) / sum(toFloat64(rented_s))                AS mean_util_pct,
    quantilesExactWeighted(0.1, 0.5, 0.9)(util_pct, toUInt64(rented_s * 1000))    AS util_p10_p50_p90,
    toDecimal64(round(toDecimal128(sumIf(rented_s, util_pct < 5), 9) / 3600, 6), 6)               AS hours_below_5,
    toDecimal64(round(toDecimal128(sumIf(rented_s, util_pct >= 5 AND util_pct < 30), 9) / 3600, 6), 6)   AS hours_5_30,
    toDecimal64(round(toDecimal128(sumIf(rented_s, util_pct >= 30 AND util_pct < 60), 9) / 3600, 6), 6)  AS hours_30_60,
    toDecimal64(round(toDecimal128(sumIf(rented_s, util_pct >= 60 AND util_pct < 90), 9) / 3600, 6), 6)  AS hours_60_90,
    toDecimal64(round(toDecimal128(sumIf(rented_s, util_pct >= 90), 9) / 3600, 6), 6)             AS hours_90_100
FROM billing_ledger FINAL
WHERE util_pct IS NOT NULL
GROUP BY month, tenant;

CREATE VIEW IF NOT EXISTS billing_idle_window_cost ON CLUSTER '{cluster}' AS
SELECT
    w.gpu_uuid                                          AS gpu_uuid,
    w.node                                              AS node,
    w.pool                                              AS pool,
    w.tenant                                            AS tenant,
    w.job                                               AS job,
    w.started_at                                        AS started_at,
    w.ended_at                                          AS ended_at,
    w.duration_s                                        AS duration_s,
    w.end_reason                                        AS end_reason,
    w.open                                              AS open,
    any(l.currency)                                     AS currency,
    toDecimal64(round(sum(toDecimal128(least(w.e, l.pe) - greatest(w.s, l.ps), 3) / 1000 * l.idle_amount / l.idle_s), 6), 6)
                                                        AS cost
FROM
(
    SELECT *, toUnixTimestamp64Milli(started_at) AS s, toUnixTimestamp64Milli(ended_at) AS e
    FROM idle_windows FINAL
) AS w
INNER JOIN
(
    SELECT gpu_uuid, tenant, currency, idle_s, idle_amount,
           toInt64(toUnixTimestamp(period_start)) * 1000 AS ps, toInt64(toUnixTimestamp(period_end)) * 1000 AS pe
    FROM billing_ledger FINAL
    WHERE idle_s > 0
) AS l ON w.gpu_uuid = l.gpu_uuid AND w.tenant = l.tenant
WHERE l.ps < w.e AND l.pe > w.s
GROUP BY gpu_uuid, node, pool, tenant, job, started_at, ended_at, duration_s, end_reason, open
ORDER BY cost DESC, gpu_uuid, started_at;

CREATE VIEW IF NOT EXISTS billing_reconciliation ON CLUSTER '{cluster}' AS
SELECT
    gpu_uuid,
    hour,
    ledger_rented_s,
    ledger_estimated_s,
    telemetry_rented_s,
    ledger_rented_s - ledger_estimated_s - telemetry_rented_s   AS rented_diff_s,
    ledger_busy_s,
    telemetry_rented_s - window_idle_s                          AS telemetry_busy_s,
    ledger_idle_s,
    window_idle_s,
    interval_s
FROM
(
    SELECT gpu_uuid, toStartOfHour(period_start) AS hour, sum(rented_s) AS ledger_rented_s,
           sum(estimated_s) AS ledger_estimated_s, sum(busy_s) AS ledger_busy_s, sum(idle_s) AS ledger_idle_s,
           max(interval_s) AS interval_s
    FROM billing_ledger FINAL
    GROUP BY gpu_uuid, hour
) AS ledger
FULL OUTER JOIN
(
    SELECT gpu_uuid, toStartOfHour(minute) AS hour, toDecimal128(sum(rented_ms), 3) / 1000 AS telemetry_rented_s
    FROM gpu_rollup_1m FINAL
    WHERE rented_ms > 0
    GROUP BY gpu_uuid, hour
) AS telemetry USING (gpu_uuid, hour)
LEFT JOIN
(
    SELECT gpu_uuid, toDateTime(h, 'UTC') AS hour,
           toDecimal128(sum(least(e, h * 1000 + 3600000) - greatest(s, h * 1000)), 3) / 1000 AS window_idle_s
    FROM
    (
        SELECT gpu_uuid, toInt64(toUnixTimestamp64Milli(started_at)) AS s, toInt64(toUnixTimestamp64Milli(ended_at)) AS e,
               arrayJoin(range(intDiv(s, 3600000) * 3600, intDiv(e - 1, 3600000) * 3600 + 1, 3600)) AS h
        FROM idle_windows FINAL
        WHERE e > s
    )
    GROUP BY gpu_uuid, hour
) AS windows USING (gpu_uuid, hour)
WHERE abs(ledger_rented_s - ledger_estimated_s - telemetry_rented_s) > toDecimal128(interval_s, 3) + 1
   OR ledger_idle_s != window_idle_s
   OR ledger_busy_s + ledger_idle_s != ledger_rented_s;

CREATE VIEW IF NOT EXISTS billing_month_over_month ON CLUSTER '{cluster}' AS
SELECT
    month,
    tenant,
    currency,
    amount,
    previous_amount,
    amount - previous_amount                                                         AS change,
    toDecimal64(round(toDecimal128(amount - previous_amount, 9) * 100 / nullIf(previous_amount, 0), 2), 2) AS change_pct
FROM
(
    SELECT toStartOfMonth(period_start) AS month, tenant, currency, sum(amount) AS amount
    FROM billing_ledger FINAL
    GROUP BY month, tenant, currency
) AS cur
FULL OUTER JOIN
(
    SELECT addMonths(toStartOfMonth(period_start), 1) AS month, tenant, currency, sum(amount) AS previous_amount
    FROM billing_ledger FINAL
    GROUP BY month, tenant, currency
) AS prev USING (month, tenant, currency)
WHERE month <= (SELECT max(toStartOfMonth(period_start)) FROM billing_ledger);

CREATE VIEW IF NOT EXISTS billing_low_utilization ON CLUSTER '{cluster}' AS
SELECT
    month, tenant, job, gpu_uuid, pool, currency, low_busy_s,
    toDecimal64(round(toDecimal128(low_busy_s, 9) / 3600, 6), 6)        AS low_busy_hours,
    mean_busy_util_pct                                  AS busy_util_pct,
    busy_amount,
    unused_amount
FROM
(
    SELECT toStartOfMonth(period_start) AS month, tenant, job, gpu_uuid, any(pool) AS pool, currency,
           sum(busy_s) AS low_busy_s,
           sum(toFloat64(busy_s) * busy_util_pct) / sum(toFloat64(busy_s)) AS mean_busy_util_pct,
           sum(amount - idle_amount) AS busy_amount,
           toDecimal64(round(sum(toDecimal128(amount - idle_amount, 6) * (100 - toDecimal64(busy_util_pct, 3)) / 100),
                             6), 6) AS unused_amount
    FROM billing_ledger FINAL
    WHERE busy_util_pct < 60 AND busy_s > 0
    GROUP BY month, tenant, job, gpu_uuid, currency
)
WHERE low_busy_s >= 3600;

CREATE VIEW IF NOT EXISTS billing_overprovisioned ON CLUSTER '{cluster}' AS
SELECT
    month,
    tenant,
    job,
    currency,
    count()                                                         AS gpus,
    countIf(idle_s * 2 >= rented_s)                                 AS idle_gpus,
    toDecimal64(round(toDecimal128(sumIf(rented_s, idle_s * 2 >= rented_s), 9) / 3600, 6), 6) AS idle_gpu_hours,
    sumIf(amount, idle_s * 2 >= rented_s)                           AS idle_gpu_amount,
    sum(amount)                                                     AS job_amount
FROM
(
    SELECT toStartOfMonth(period_start) AS month, tenant, job, gpu_uuid, currency,
           sum(rented_s) AS rented_s, sum(idle_s) AS idle_s, sum(amount) AS amount
    FROM billing_ledger FINAL
    WHERE job != ''
    GROUP BY month, tenant, job, gpu_uuid, currency
)
GROUP BY month, tenant, job, currency
HAVING gpus >= 2 AND idle_gpus >= 1 AND idle_gpus < gpus;

CREATE VIEW IF NOT EXISTS billing_mode_comparison ON CLUSTER '{cluster}' AS
SELECT
    month,
    tenant,
    currency,
    mode,
    mode_amount                                         AS amount,
    billed_amount,
    mode_amount - billed_amount                         AS difference,
    toDecimal64(round(toDecimal128(priced[mode], 9) / 3600, 6), 6)      AS priced_hours,
    toDecimal64(round(toDecimal128(rented_total, 9) / 3600, 6), 6)      AS rented_hours
FROM
(
    SELECT toStartOfMonth(period_start) AS month, tenant, currency, sum(amount) AS billed_amount,
           sum(rented_s) AS rented_total, sumMap(mode_amounts) AS amounts,
           sumMap(mapApply((k, v) -> (k, rented_s), mode_amounts)) AS priced
    FROM billing_ledger FINAL
    GROUP BY month, tenant, currency
)
ARRAY JOIN mapKeys(amounts) AS mode, mapValues(amounts) AS mode_amount;

INSERT INTO schema_migrations (version, name, checksum) VALUES (8, '0008_billing_ledger', '14570018f964c45f');
