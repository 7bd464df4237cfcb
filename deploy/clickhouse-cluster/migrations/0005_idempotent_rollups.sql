-- 0005_idempotent_rollups for a ClickHouse cluster, rendered from sql/migrations/0005_idempotent_rollups.sql by deploy/clickhouse-cluster/render.py:
-- do not edit; apply in order (README.md here).

ALTER TABLE gpu_samples ON CLUSTER '{cluster}' MODIFY SETTING replicated_deduplication_window = 10000;

ALTER TABLE gpu_rollup_1m ON CLUSTER '{cluster}' MODIFY SETTING replicated_deduplication_window = 10000;

ALTER TABLE node_rollup_1m ON CLUSTER '{cluster}' MODIFY SETTING replicated_deduplication_window = 10000;

ALTER TABLE idle_windows ON CLUSTER '{cluster}' MODIFY SETTING replicated_deduplication_window = 10000;

ALTER TABLE alerts ON CLUSTER '{cluster}' MODIFY SETTING replicated_deduplication_window = 10000;

ALTER TABLE dead_letters ON CLUSTER '{cluster}' MODIFY SETTING replicated_deduplication_window = 10000;

ALTER TABLE job_rollup_1m ON CLUSTER '{cluster}' MODIFY SETTING replicated_deduplication_window = 10000;

DROP VIEW IF EXISTS pool_usage_1m ON CLUSTER '{cluster}';

DROP VIEW IF EXISTS tenant_usage_1m ON CLUSTER '{cluster}';

DROP VIEW IF EXISTS pool_rollup_1m_mv ON CLUSTER '{cluster}';

DROP VIEW IF EXISTS tenant_rollup_1m_mv ON CLUSTER '{cluster}';

DROP TABLE IF EXISTS pool_rollup_1m_all ON CLUSTER '{cluster}';

DROP TABLE IF EXISTS pool_rollup_1m ON CLUSTER '{cluster}';

DROP TABLE IF EXISTS tenant_rollup_1m_all ON CLUSTER '{cluster}';

DROP TABLE IF EXISTS tenant_rollup_1m ON CLUSTER '{cluster}';

CREATE TABLE IF NOT EXISTS usage_gpu_1m ON CLUSTER '{cluster}'
(
    minute      DateTime('UTC')         CODEC(DoubleDelta, ZSTD(1)),
    pool        LowCardinality(String),
    tenant      LowCardinality(String),
    gpu_uuid    LowCardinality(String),
    util        Nullable(Float32)       CODEC(Gorilla, ZSTD(1)),
    util_max    Float32                 CODEC(Gorilla, ZSTD(1)),
    power       Nullable(Float32)       CODEC(Gorilla, ZSTD(1)),
    mem_used    Nullable(Float64)       CODEC(Gorilla, ZSTD(1))
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/usage_gpu_1m', '{replica}')
PARTITION BY toYYYYMM(minute)
ORDER BY (pool, minute, gpu_uuid)
SETTINGS replicated_deduplication_window = 10000;

CREATE TABLE IF NOT EXISTS usage_gpu_1m_all ON CLUSTER '{cluster}' AS usage_gpu_1m
ENGINE = Distributed('{cluster}', currentDatabase(), usage_gpu_1m, cityHash64(gpu_uuid));

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_gpu_1m_mv ON CLUSTER '{cluster}' TO usage_gpu_1m AS
SELECT minute, pool, tenant, gpu_uuid, util_pct_mean AS util, ifNull(util_pct_max, 0) AS util_max,
       power_w_mean AS power, mem_used_bytes_mean AS mem_used
FROM gpu_rollup_1m;

INSERT INTO usage_gpu_1m
SELECT minute, pool, tenant, gpu_uuid, util_pct_mean, ifNull(util_pct_max, 0), power_w_mean, mem_used_bytes_mean
FROM gpu_rollup_1m FINAL;

CREATE VIEW IF NOT EXISTS pool_usage_1m ON CLUSTER '{cluster}' AS
SELECT
    minute,
    pool,
    count()                         AS gpus,
    countIf(tenant != '')           AS rented_gpus,
    avg(util)                       AS util_pct,
    avgIf(util, tenant != '')       AS rented_util_pct,
    max(util_max)                   AS util_max_pct,
    sum(ifNull(power, 0))           AS power_w,
    sum(ifNull(mem_used, 0))        AS mem_used_bytes
FROM usage_gpu_1m FINAL
GROUP BY minute, pool;

CREATE VIEW IF NOT EXISTS tenant_usage_1m ON CLUSTER '{cluster}' AS
SELECT
    minute,
    tenant,
    pool,
    count()                         AS gpus,
    avg(util)                       AS util_pct,
    max(util_max)                   AS util_max_pct,
    sum(ifNull(power, 0))           AS power_w,
    sum(ifNull(mem_used, 0))        AS mem_used_bytes
FROM usage_gpu_1m FINAL
WHERE tenant != ''
GROUP BY minute, tenant, pool;

INSERT INTO schema_migrations (version, name, checksum) VALUES (5, '0005_idempotent_rollups', '6ce0af004e8ce8bd');
