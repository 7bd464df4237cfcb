-- 0011_price_versions for a ClickHouse cluster, rendered from sql/migrations/0011_price_versions.sql by deploy/clickhouse-cluster/render.py:
-- do not edit; apply in order (README.md here).

ALTER TABLE billing_ledger ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS price_version LowCardinality(String) DEFAULT '';

ALTER TABLE billing_ledger_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS price_version LowCardinality(String) DEFAULT '';

ALTER TABLE billing_ledger ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS busy_weighted_s Decimal(20, 8) DEFAULT 0;

ALTER TABLE billing_ledger_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS busy_weighted_s Decimal(20, 8) DEFAULT 0;

ALTER TABLE billing_ledger ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS idle_weighted_s Decimal(20, 8) DEFAULT 0;

ALTER TABLE billing_ledger_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS idle_weighted_s Decimal(20, 8) DEFAULT 0;

ALTER TABLE billing_ledger ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS estimated_idle_s Decimal(18, 3) DEFAULT 0;

ALTER TABLE billing_ledger_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS estimated_idle_s Decimal(18, 3) DEFAULT 0;

ALTER TABLE billing_ledger ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS rerated_at DateTime64(3, 'UTC') DEFAULT 0;

ALTER TABLE billing_ledger_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS rerated_at DateTime64(3, 'UTC') DEFAULT 0;

CREATE TABLE IF NOT EXISTS billing_rerate_audit ON CLUSTER '{cluster}'
(
    rerate_id           String,
    at                  DateTime64(3, 'UTC'),
    reason              String,
    gpu_uuid            LowCardinality(String),
    tenant              LowCardinality(String),
    job                 String,
    period_start        DateTime('UTC'),
    pool                LowCardinality(String),
    currency            LowCardinality(String),
    old_version         LowCardinality(String),
    new_version         LowCardinality(String),
    old_mode            LowCardinality(String),
    new_mode            LowCardinality(String),
    old_amount          Decimal(18, 6),
    new_amount          Decimal(18, 6),
    old_idle_amount     Decimal(18, 6),
    new_idle_amount     Decimal(18, 6),
    applied_to          LowCardinality(String)
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/billing_rerate_audit', '{replica}')
PARTITION BY toYYYYMM(period_start)
ORDER BY (rerate_id, gpu_uuid, tenant, job, period_start);

CREATE TABLE IF NOT EXISTS billing_rerate_audit_all ON CLUSTER '{cluster}' AS billing_rerate_audit
ENGINE = Distributed('{cluster}', currentDatabase(), billing_rerate_audit, cityHash64(gpu_uuid));

INSERT INTO schema_migrations (version, name, checksum) VALUES (11, '0011_price_versions', '9c921fd764f4723c');
