-- 0003_job_rollups for a ClickHouse cluster, rendered from sql/migrations/0003_job_rollups.sql by deploy/clickhouse-cluster/render.py:
-- do not edit; apply in order (README.md here).

CREATE TABLE IF NOT EXISTS job_rollup_1m ON CLUSTER '{cluster}'
(
    minute                DateTime('UTC')   CODEC(DoubleDelta, ZSTD(1)),
    job                   String,
    tenant                LowCardinality(String),
    pool                  LowCardinality(String),
    nodes                 UInt16,
    gpus                  UInt16,
    samples               UInt32,
    util_pct_mean         Nullable(Float32),
    util_pct_min_gpu      Nullable(Float32),
    util_pct_max_gpu      Nullable(Float32),
    sm_clock_mhz_mean     Nullable(Float32),
    sm_clock_mhz_min_gpu  Nullable(Float32),
    power_w_mean          Nullable(Float32),
    slowest_gpu           String,
    slowest_node          LowCardinality(String)
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/job_rollup_1m', '{replica}')
PARTITION BY toYYYYMM(minute)
ORDER BY (job, minute);

CREATE TABLE IF NOT EXISTS job_rollup_1m_all ON CLUSTER '{cluster}' AS job_rollup_1m
ENGINE = Distributed('{cluster}', currentDatabase(), job_rollup_1m, cityHash64(job));

INSERT INTO schema_migrations (version, name, checksum) VALUES (3, '0003_job_rollups', 'ab9464eb307260dd');
