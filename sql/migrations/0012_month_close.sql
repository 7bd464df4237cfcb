-- Month close, adjustments and the finance views of issue 51 (docs/finance.md).
--
-- billing_months: one row per closed month (`gpufleet bill close`): its ledger rows are frozen from then on.
CREATE TABLE IF NOT EXISTS billing_months
(
    month               Date,
    closed_at           DateTime64(3, 'UTC'),
    reason              String
)
ENGINE = ReplacingMergeTree
ORDER BY month;

-- billing_adjustments: what changed a closed month after it was closed, invoiced in the first open month after
-- it (invoice_month). kind 'late usage': a record that arrived after the close (adjustment_id 'late'; the row as
-- metered, amount_change its whole amount); kind 'rerate': a row of a closed month priced again (adjustment_id the
-- re-rating's id; the row at its new prices, amount_change the difference from what was in force before). The
-- row in force for a key is the latest adjustment, else the ledger's.
CREATE TABLE IF NOT EXISTS billing_adjustments
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
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(invoice_month)
ORDER BY (gpu_uuid, tenant, job, period_start, adjustment_id);

-- billing_commitment_ledger: each commitment's month as the close recorded it (billing.commitments): the fee
-- billed whether used or not, the amortized cost of the committed GPU-hours used, the unused commitment, and the
-- usage it covered, at the prices of the tenant's other mode.
CREATE TABLE IF NOT EXISTS billing_commitment_ledger
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
ENGINE = ReplacingMergeTree
ORDER BY (month, commitment);

-- Revenue per day, tenant and pool: the ledger's amounts by day of use, and the adjustments to them (late usage
-- and re-ratings of closed months) beside them; amount is their sum. Commitment fees are monthly: they are on the
-- invoice (`gpufleet bill`) and in billing_commitment_ledger, not here.
CREATE VIEW IF NOT EXISTS billing_revenue_daily AS
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

-- The provider's capacity per pool and hour, from the telemetry: installed GPU-hours (GPU-minutes with a sample),
-- rented (the rented time of those minutes, gpu_rollup_1m.rented_ms) and unsold (installed less rented);
-- `gpufleet bill capacity` prices the unsold hours at list (the on-demand price of the pool then).
CREATE VIEW IF NOT EXISTS billing_capacity_hourly AS
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
