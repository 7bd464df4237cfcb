-- 0012_month_close for a ClickHouse cluster, rendered from sql/migrations/0012_month_close.sql by deploy/clickhouse-cluster/render.py:
-- do not edit; apply in order (README.md here).

CREATE TABLE IF NOT EXISTS billing_months ON CLUSTER '{cluster}'
(
    month               Date,
    closed_at           DateTime64(3, 'UTC'),
    reason              String
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/billing_months', '{replica}')
ORDER BY month;

CREATE TABLE IF NOT EXISTS billing_months_all ON CLUSTER '{cluster}' AS billing_months
ENGINE = Distributed('{cluster}', currentDatabase(), billing_months, cityHash64(month));

CREATE TABLE IF NOT EXISTS billing_adjustments ON CLUSTER '{cluster}'
(
    gpu_uuid            LowCardinality(String),
    tenant              LowCardinality(String),
    job                 String,
    period_start        DateTime('UTC'),
    adjustment_id       String,
    kind                LowCardinality(String),
    invoice_month       Date,
    at                  DateTime64(3, 'UTC'),
    reason              String,
    amount_change       Decimal(18, 6),
    idle_amount_change  Decimal(18, 6),
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
    data_quality        LowCardinality(String),
    underused_s         Decimal(18, 3),
    unused_amount       Decimal(18, 6),
    unsold_amount       Decimal(18, 6),
    price_version       LowCardinality(String),
    busy_weighted_s     Decimal(20, 8),
    idle_weighted_s     Decimal(20, 8),
    estimated_idle_s    Decimal(18, 3)
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/billing_adjustments', '{replica}')
PARTITION BY toYYYYMM(invoice_month)
ORDER BY (gpu_uuid, tenant, job, period_start, adjustment_id);

CREATE TABLE IF NOT EXISTS billing_adjustments_all ON CLUSTER '{cluster}' AS billing_adjustments
ENGINE = Distributed('{cluster}', currentDatabase(), billing_adjustments, cityHash64(gpu_uuid));

CREATE TABLE IF NOT EXISTS billing_commitment_ledger ON CLUSTER '{cluster}'
(
    month               Date,
    commitment          String,
    tenant              LowCardinality(String),
    pool                LowCardinality(String),
    currency            LowCardinality(String),
    gpus                UInt32,
    committed_hours     Decimal(18, 6),
    used_hours          Decimal(18, 6),
    billed_amount       Decimal(18, 6),
    amortized_amount    Decimal(18, 6),
    unused_amount       Decimal(18, 6),
    covered_amount      Decimal(18, 6),
    closed_at           DateTime64(3, 'UTC')
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/billing_commitment_ledger', '{replica}')
ORDER BY (month, commitment);

CREATE TABLE IF NOT EXISTS billing_commitment_ledger_all ON CLUSTER '{cluster}' AS billing_commitment_ledger
ENGINE = Distributed('{cluster}', currentDatabase(), billing_commitment_ledger, cityHash64(month));

CREATE VIEW IF NOT EXISTS billing_revenue_daily ON CLUSTER '{cluster}' AS
SELECT day, toStartOfMonth(day) AS month, tenant, pool, currency,
       toDecimal64(round(toDecimal128(sum(used_s), 9) / 3600, 6), 6)     AS rented_hours,
       sum(from_ledger)                                                  AS ledger_amount,
       sum(from_adjustments)                                             AS adjustment_amount,
       sum(from_ledger) + sum(from_adjustments)                          AS amount,
       sum(idle_part)                                                    AS idle_amount
FROM
(
    SELECT toDate(period_start) AS day, tenant, pool, currency, rented_s AS used_s, amount AS from_ledger,
           toDecimal64(0, 6) AS from_adjustments, idle_amount AS idle_part
    FROM billing_ledger FINAL
    UNION ALL
    SELECT toDate(period_start) AS day, tenant, pool, currency,
           if(kind = 'late usage', rented_s, toDecimal64(0, 3)) AS used_s, toDecimal64(0, 6) AS from_ledger,
           amount_change AS from_adjustments, idle_amount_change AS idle_part
    FROM billing_adjustments FINAL
)
GROUP BY day, tenant, pool, currency;

CREATE VIEW IF NOT EXISTS billing_capacity_hourly ON CLUSTER '{cluster}' AS
SELECT hour, pool, gpus,
       toDecimal64(round(toDecimal128(installed_ms, 3) / 3600000, 6), 6)                          AS installed_gpu_hours,
       toDecimal64(round(toDecimal128(rented_ms, 3) / 3600000, 6), 6)                             AS rented_gpu_hours,
       toDecimal64(round(toDecimal128(installed_ms - rented_ms, 3) / 3600000, 6), 6)              AS unsold_gpu_hours
FROM
(
    SELECT toStartOfHour(minute) AS hour, pool, uniqExact(gpu_uuid) AS gpus, toInt64(count()) * 60000 AS installed_ms,
           toInt64(sum(least(rented_ms, 60000))) AS rented_ms
    FROM gpu_rollup_1m FINAL
    WHERE samples > 0
    GROUP BY hour, pool
);

INSERT INTO schema_migrations (version, name, checksum) VALUES (12, '0012_month_close', '44805f677af418ab');
