-- One-minute job rollups from the job stage: every GPU of a (multi-node) job
-- together. Per-GPU means over the minute, then their spread across the job:
-- the slowest GPU by SM clock is named, for stragglers.

CREATE TABLE IF NOT EXISTS job_rollup_1m
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
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (job, minute);
