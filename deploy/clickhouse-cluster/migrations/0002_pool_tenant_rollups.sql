-- 0002_pool_tenant_rollups for a ClickHouse cluster, rendered from sql/migrations/0002_pool_tenant_rollups.sql by deploy/clickhouse-cluster/render.py:
-- do not edit; apply in order (README.md here).

CREATE TABLE IF NOT EXISTS pool_rollup_1m ON CLUSTER '{cluster}'
(
    minute              DateTime('UTC'),
    pool                LowCardinality(String),
    gpu_minutes         SimpleAggregateFunction(sum, UInt64),
    rented_gpu_minutes  SimpleAggregateFunction(sum, UInt64),
    util_sum            SimpleAggregateFunction(sum, Float64),
    util_n              SimpleAggregateFunction(sum, UInt64),
    rented_util_sum     SimpleAggregateFunction(sum, Float64),
    rented_util_n       SimpleAggregateFunction(sum, UInt64),
    util_max            SimpleAggregateFunction(max, Float32),
    power_w_sum         SimpleAggregateFunction(sum, Float64),
    mem_used_bytes_sum  SimpleAggregateFunction(sum, Float64)
)
ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/{database}/pool_rollup_1m', '{replica}')
PARTITION BY toYYYYMM(minute)
ORDER BY (pool, minute);

CREATE TABLE IF NOT EXISTS pool_rollup_1m_all ON CLUSTER '{cluster}' AS pool_rollup_1m
ENGINE = Distributed('{cluster}', currentDatabase(), pool_rollup_1m, cityHash64(pool));

CREATE MATERIALIZED VIEW IF NOT EXISTS pool_rollup_1m_mv ON CLUSTER '{cluster}' TO pool_rollup_1m AS
SELECT
    minute,
    pool,
    count()                                        AS gpu_minutes,
    countIf(tenant != '')                          AS rented_gpu_minutes,
    sum(ifNull(util_pct_mean, 0))                  AS util_sum,
    count(util_pct_mean)                           AS util_n,
    sumIf(ifNull(util_pct_mean, 0), tenant != '')  AS rented_util_sum,
    countIf(util_pct_mean IS NOT NULL AND tenant != '') AS rented_util_n,
    max(ifNull(util_pct_max, 0))                   AS util_max,
    sum(ifNull(power_w_mean, 0))                   AS power_w_sum,
    sum(ifNull(mem_used_bytes_mean, 0))            AS mem_used_bytes_sum
FROM gpu_rollup_1m
GROUP BY minute, pool;

CREATE TABLE IF NOT EXISTS tenant_rollup_1m ON CLUSTER '{cluster}'
(
    minute              DateTime('UTC'),
    tenant              LowCardinality(String),
    pool                LowCardinality(String),
    gpu_minutes         SimpleAggregateFunction(sum, UInt64),
    util_sum            SimpleAggregateFunction(sum, Float64),
    util_n              SimpleAggregateFunction(sum, UInt64),
    util_max            SimpleAggregateFunction(max, Float32),
    power_w_sum         SimpleAggregateFunction(sum, Float64),
    mem_used_bytes_sum  SimpleAggregateFunction(sum, Float64)
)
ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/{database}/tenant_rollup_1m', '{replica}')
PARTITION BY toYYYYMM(minute)
ORDER BY (tenant, pool, minute);

CREATE TABLE IF NOT EXISTS tenant_rollup_1m_all ON CLUSTER '{cluster}' AS tenant_rollup_1m
ENGINE = Distributed('{cluster}', currentDatabase(), tenant_rollup_1m, cityHash64(tenant));

CREATE MATERIALIZED VIEW IF NOT EXISTS tenant_rollup_1m_mv ON CLUSTER '{cluster}' TO tenant_rollup_1m AS
SELECT
    minute,
    tenant,
    pool,
    count()                               AS gpu_minutes,
    sum(ifNull(util_pct_mean, 0))         AS util_sum,
    count(util_pct_mean)                  AS util_n,
    max(ifNull(util_pct_max, 0))          AS util_max,
    sum(ifNull(power_w_mean, 0))          AS power_w_sum,
    sum(ifNull(mem_used_bytes_mean, 0))   AS mem_used_bytes_sum
FROM gpu_rollup_1m
WHERE tenant != ''
GROUP BY minute, tenant, pool;

CREATE VIEW IF NOT EXISTS pool_usage_1m ON CLUSTER '{cluster}' AS
SELECT
    minute,
    pool,
    sum(gpu_minutes)                                  AS gpus,
    sum(rented_gpu_minutes)                           AS rented_gpus,
    sum(util_sum) / nullIf(sum(util_n), 0)            AS util_pct,
    sum(rented_util_sum) / nullIf(sum(rented_util_n), 0) AS rented_util_pct,
    max(util_max)                                     AS util_max_pct,
    sum(power_w_sum)                                  AS power_w,
    sum(mem_used_bytes_sum)                           AS mem_used_bytes
FROM pool_rollup_1m
GROUP BY minute, pool;

CREATE VIEW IF NOT EXISTS tenant_usage_1m ON CLUSTER '{cluster}' AS
SELECT
    minute,
    tenant,
    pool,
    sum(gpu_minutes)                        AS gpus,
    sum(util_sum) / nullIf(sum(util_n), 0)  AS util_pct,
    max(util_max)                           AS util_max_pct,
    sum(power_w_sum)                        AS power_w,
    sum(mem_used_bytes_sum)                 AS mem_used_bytes
FROM tenant_rollup_1m
GROUP BY minute, tenant, pool;

INSERT INTO schema_migrations (version, name, checksum) VALUES (2, '0002_pool_tenant_rollups', '402bbbcd8352601f');
