-- 0001_telemetry for a ClickHouse cluster, rendered from sql/migrations/0001_telemetry.sql by deploy/clickhouse-cluster/render.py:
-- do not edit; apply in order (README.md here).

CREATE TABLE IF NOT EXISTS gpu_samples ON CLUSTER '{cluster}'
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
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/gpu_samples', '{replica}')
PARTITION BY toDate(ts)
ORDER BY (node, gpu_uuid, ts)
TTL toDateTime(ts) + INTERVAL 14 DAY
SETTINGS ttl_only_drop_parts = 1;

CREATE TABLE IF NOT EXISTS gpu_samples_all ON CLUSTER '{cluster}' AS gpu_samples
ENGINE = Distributed('{cluster}', currentDatabase(), gpu_samples, cityHash64(gpu_uuid));

CREATE TABLE IF NOT EXISTS gpu_rollup_1m ON CLUSTER '{cluster}'
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
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/gpu_rollup_1m', '{replica}')
PARTITION BY toYYYYMM(minute)
ORDER BY (gpu_uuid, minute);

CREATE TABLE IF NOT EXISTS gpu_rollup_1m_all ON CLUSTER '{cluster}' AS gpu_rollup_1m
ENGINE = Distributed('{cluster}', currentDatabase(), gpu_rollup_1m, cityHash64(gpu_uuid));

CREATE TABLE IF NOT EXISTS node_rollup_1m ON CLUSTER '{cluster}'
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
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/node_rollup_1m', '{replica}')
PARTITION BY toYYYYMM(minute)
ORDER BY (node, minute);

CREATE TABLE IF NOT EXISTS node_rollup_1m_all ON CLUSTER '{cluster}' AS node_rollup_1m
ENGINE = Distributed('{cluster}', currentDatabase(), node_rollup_1m, cityHash64(node));

CREATE TABLE IF NOT EXISTS idle_windows ON CLUSTER '{cluster}'
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
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/idle_windows', '{replica}', ended_at)
PARTITION BY toYYYYMM(started_at)
ORDER BY (gpu_uuid, started_at);

CREATE TABLE IF NOT EXISTS idle_windows_all ON CLUSTER '{cluster}' AS idle_windows
ENGINE = Distributed('{cluster}', currentDatabase(), idle_windows, cityHash64(gpu_uuid));

CREATE TABLE IF NOT EXISTS alerts ON CLUSTER '{cluster}'
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
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/alerts', '{replica}')
PARTITION BY toYYYYMM(detected_at)
ORDER BY (id, status);

CREATE TABLE IF NOT EXISTS alerts_all ON CLUSTER '{cluster}' AS alerts
ENGINE = Distributed('{cluster}', currentDatabase(), alerts, cityHash64(id));

CREATE TABLE IF NOT EXISTS dead_letters ON CLUSTER '{cluster}'
(
    received_at   DateTime64(3, 'UTC'),
    reason_code   LowCardinality(String),
    reason        String,
    source        String,
    payload       String CODEC(ZSTD(3))
)
ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/dead_letters', '{replica}')
PARTITION BY toYYYYMM(received_at)
ORDER BY (reason_code, received_at)
TTL toDateTime(received_at) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS dead_letters_all ON CLUSTER '{cluster}' AS dead_letters
ENGINE = Distributed('{cluster}', currentDatabase(), dead_letters, cityHash64(reason_code));

INSERT INTO schema_migrations (version, name, checksum) VALUES (1, '0001_telemetry', '7e0235bead8913c9');
