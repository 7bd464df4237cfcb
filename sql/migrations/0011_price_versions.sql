-- Re-rating with an audit trail (issue 51, docs/billing.md "Re-rating"). Every ledger row names the version of
-- the price book that priced it (price_version: a digest of the tenant's mode and of every mode's entry in
-- effect for that GPU then) and keeps what pricing it again needs besides its seconds: the utilization-weighted
-- busy and idle seconds usage billing prices (exact, 8 decimals) and the time billed across gaps between idle
-- samples (estimated_idle_s, idle for pricing). rerated_at is when `gpufleet bill rerate` last priced the row
-- again (0: as metered). Rows written before this migration have '' and 0 there; re-rating prices them from
-- their mean utilizations instead.
ALTER TABLE billing_ledger ADD COLUMN IF NOT EXISTS price_version LowCardinality(String) DEFAULT '';
ALTER TABLE billing_ledger ADD COLUMN IF NOT EXISTS busy_weighted_s Decimal(20, 8) DEFAULT 0;
ALTER TABLE billing_ledger ADD COLUMN IF NOT EXISTS idle_weighted_s Decimal(20, 8) DEFAULT 0;
ALTER TABLE billing_ledger ADD COLUMN IF NOT EXISTS estimated_idle_s Decimal(18, 3) DEFAULT 0;
ALTER TABLE billing_ledger ADD COLUMN IF NOT EXISTS rerated_at DateTime64(3, 'UTC') DEFAULT 0;

-- One row per ledger row a re-rating changed: the amounts and versions before and after, when, why (the
-- --reason given), and where the change went: the ledger, or the adjustments of a closed month.
CREATE TABLE IF NOT EXISTS billing_rerate_audit
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
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(period_start)
ORDER BY (rerate_id, gpu_uuid, tenant, job, period_start);
