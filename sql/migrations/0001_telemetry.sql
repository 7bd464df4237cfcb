-- Raw GPU samples, the per-GPU and per-node one-minute rollups, idle windows,
-- alerts and dead letters. Per-pool and per-tenant rollups are materialized
-- views over the per-GPU rows (0002).
--
-- Conventions: times are UTC; '' stands for "none" in pool, tenant and job.
-- Tables the stream writes are ReplacingMergeTree on their natural key, and the
-- sink drops rows whose key is already stored before it inserts (tables that
-- feed materialized views), so a batch written twice is stored once.

CREATE TABLE IF NOT EXISTS gpu_samples
(
    ts                   DateTime64(3, 'UTC')        CODEC(DoubleDelta, ZSTD(1)),
    node                 LowCardinality(String),
    pool                 LowCardinality(String),
    gpu_uuid             LowCardinality(String),
    gpu_index            UInt16                      CODEC(T64, ZSTD(1)),
    tenant               LowCardinality(String),
    job                  String                      CODEC(ZSTD(1)),
    util_pct             Nullable(Float32)           CODEC(Gorilla, ZSTD(1)),
    mem_util_pct         Nullable(Float32)           CODEC(Gorilla, ZSTD(1)),
    mem_used_bytes       Nullable(UInt64)            CODEC(T64, ZSTD(1)),
    mem_total_bytes      Nullable(UInt64)            CODEC(T64, ZSTD(1)),
    power_w              Nullable(Float32)           CODEC(Gorilla, ZSTD(1)),
    temp_c               Nullable(Float32)           CODEC(Gorilla, ZSTD(1)),
    sm_clock_mhz         Nullable(Float32)           CODEC(Gorilla, ZSTD(1)),
    pcie_rx_bytes_per_s  Nullable(Float64)           CODEC(Gorilla, ZSTD(1)),
    pcie_tx_bytes_per_s  Nullable(Float64)           CODEC(Gorilla, ZSTD(1)),
    throttle_reasons     Nullable(UInt64)            CODEC(T64, ZSTD(1)),
    xid_events           Array(UInt32)               CODEC(ZSTD(1)),
    process_pids         Array(UInt32)               CODEC(ZSTD(1)),
    process_mem_bytes    Array(UInt64)               CODEC(ZSTD(1))
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (node, gpu_uuid, ts)
TTL toDateTime(ts) + INTERVAL 14 DAY
SETTINGS ttl_only_drop_parts = 1;

CREATE TABLE IF NOT EXISTS gpu_rollup_1m
(
    minute                        DateTime('UTC')         CODEC(DoubleDelta, ZSTD(1)),
    node                          LowCardinality(String),
    pool                          LowCardinality(String),
    gpu_uuid                      LowCardinality(String),
    gpu_index                     UInt16,
    model                         LowCardinality(String),
    tenant                        LowCardinality(String),
    job                           String,
    samples                       UInt16,
    util_pct_mean                 Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    util_pct_min                  Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    util_pct_max                  Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    mem_util_pct_mean             Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    mem_util_pct_min              Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    mem_util_pct_max              Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    mem_used_bytes_mean           Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    mem_used_bytes_min            Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    mem_used_bytes_max            Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    power_w_mean                  Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    power_w_min                   Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    power_w_max                   Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    temp_c_mean                   Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    temp_c_min                    Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    temp_c_max                    Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    sm_clock_mhz_mean             Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    sm_clock_mhz_min              Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    sm_clock_mhz_max              Nullable(Float32) CODEC(Gorilla, ZSTD(1)),
    pcie_rx_bytes_per_s_mean      Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    pcie_rx_bytes_per_s_min       Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    pcie_rx_bytes_per_s_max       Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    pcie_tx_bytes_per_s_mean      Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    pcie_tx_bytes_per_s_min       Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    pcie_tx_bytes_per_s_max       Nullable(Float64) CODEC(Gorilla, ZSTD(1)),
    throttled_samples             UInt16,
    xid_events                    UInt16
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (gpu_uuid, minute);

CREATE TABLE IF NOT EXISTS node_rollup_1m
(
    minute                              DateTime('UTC')   CODEC(DoubleDelta, ZSTD(1)),
    node                                LowCardinality(String),
    pool                                LowCardinality(String),
    samples                             UInt16,
    gpus                                UInt16,
    host_cpu_util_pct_mean              Nullable(Float32),
    host_cpu_util_pct_min               Nullable(Float32),
    host_cpu_util_pct_max               Nullable(Float32),
    host_iowait_pct_mean                Nullable(Float32),
    host_iowait_pct_min                 Nullable(Float32),
    host_iowait_pct_max                 Nullable(Float32),
    host_disk_read_bytes_per_s_mean     Nullable(Float64),
    host_disk_read_bytes_per_s_min      Nullable(Float64),
    host_disk_read_bytes_per_s_max      Nullable(Float64),
    host_net_rx_bytes_per_s_mean        Nullable(Float64),
    host_net_rx_bytes_per_s_min         Nullable(Float64),
    host_net_rx_bytes_per_s_max         Nullable(Float64),
    host_mem_used_bytes_mean            Nullable(Float64),
    host_mem_used_bytes_min             Nullable(Float64),
    host_mem_used_bytes_max             Nullable(Float64),
    gpu_util_pct_mean                   Nullable(Float32),
    gpu_util_pct_min                    Nullable(Float32),
    gpu_util_pct_max                    Nullable(Float32),
    gpu_mem_used_bytes_mean             Nullable(Float64),
    gpu_mem_used_bytes_min              Nullable(Float64),
    gpu_mem_used_bytes_max              Nullable(Float64),
    gpu_power_w_mean                    Nullable(Float32),
    gpu_power_w_min                     Nullable(Float32),
    gpu_power_w_max                     Nullable(Float32),
    gpu_sm_clock_mhz_mean               Nullable(Float32),
    gpu_sm_clock_mhz_min                Nullable(Float32),
    gpu_sm_clock_mhz_max                Nullable(Float32),
    gpu_pcie_rx_bytes_per_s_mean        Nullable(Float64),
    gpu_pcie_rx_bytes_per_s_min         Nullable(Float64),
    gpu_pcie_rx_bytes_per_s_max         Nullable(Float64),
    gpu_pcie_tx_bytes_per_s_mean        Nullable(Float64),
    gpu_pcie_tx_bytes_per_s_min         Nullable(Float64),
    gpu_pcie_tx_bytes_per_s_max         Nullable(Float64)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (node, minute);

CREATE TABLE IF NOT EXISTS idle_windows
(
    gpu_uuid      LowCardinality(String),
    started_at    DateTime64(3, 'UTC'),
    ended_at      DateTime64(3, 'UTC'),
    node          LowCardinality(String),
    pool          LowCardinality(String),
    gpu_index     UInt16,
    tenant        LowCardinality(String),
    job           String,
    duration_s    Float64,
    samples       UInt32,
    max_util_pct  Float32,
    end_reason    LowCardinality(String),
    open          UInt8
)
ENGINE = ReplacingMergeTree(ended_at)
PARTITION BY toYYYYMM(started_at)
ORDER BY (gpu_uuid, started_at);

CREATE TABLE IF NOT EXISTS alerts
(
    id            String,
    status        LowCardinality(String),
    dedup_key     String,
    kind          LowCardinality(String),
    severity      LowCardinality(String),
    node          LowCardinality(String),
    gpu_uuid      String,
    job           String,
    tenant        LowCardinality(String),
    pool          LowCardinality(String),
    started_at    DateTime64(3, 'UTC'),
    detected_at   DateTime64(3, 'UTC'),
    resolved_at   Nullable(DateTime64(3, 'UTC')),
    score         Float64,
    summary       String,
    evidence      String
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(detected_at)
ORDER BY (id, status);

CREATE TABLE IF NOT EXISTS dead_letters
(
    received_at   DateTime64(3, 'UTC'),
    reason_code   LowCardinality(String),
    reason        String,
    source        String,
    payload       String CODEC(ZSTD(3))
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(received_at)
ORDER BY (reason_code, received_at)
TTL toDateTime(received_at) + INTERVAL 30 DAY;
