-- The billing ledger.
--
-- billing_ledger: one row per GPU, tenant, job and billing period, from the gpufleet.billing.v1 records that
-- metering emits (streams/metering.py). Seconds and money are Decimal, never floats: busy_s + idle_s =
-- rented_s exactly, and sums are exact. It is a ReplacingMergeTree on its natural key and the writers drop
-- rows already stored, so replays and restarted workers change no total; read it with FINAL for exact sums at any
-- moment.
--
-- gpu_rollup_1m gains rented_ms: the telemetry's rented time in each GPU-minute (the interval of each sample
-- with a tenant), to hold the ledger against. Rows written before this migration have 0 there (and no ledger
-- rows either).

CREATE TABLE IF NOT EXISTS billing_ledger
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
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(period_start)
ORDER BY (gpu_uuid, tenant, job, period_start)
SETTINGS non_replicated_deduplication_window = 10000;

ALTER TABLE gpu_rollup_1m ADD COLUMN IF NOT EXISTS rented_ms UInt32 DEFAULT 0;
