-- 0007_demand_forecasts for a ClickHouse cluster, rendered from sql/migrations/0007_demand_forecasts.sql by deploy/clickhouse-cluster/render.py:
-- do not edit; apply in order (README.md here).

CREATE VIEW IF NOT EXISTS pool_demand_5m ON CLUSTER '{cluster}' AS
WITH
    per_minute AS (
        SELECT pool, minute, count() AS gpus, countIf(tenant != '') AS rented
        FROM usage_gpu_1m FINAL
        GROUP BY pool, minute
    ),
    per_bucket AS (
        SELECT pool, toStartOfFiveMinutes(minute) AS bucket, count() AS minutes,
               avg(gpus) AS total_gpus, max(gpus) AS total_gpus_max,
               avg(rented) AS rented_gpus, max(rented) AS rented_gpus_max
        FROM per_minute
        GROUP BY pool, bucket
    ),
    idle AS (
        SELECT pool, toDateTime(b, 'UTC') AS bucket, sum(least(e, toFloat64(b) + 300) - greatest(s, toFloat64(b))) AS idle_s
        FROM (
            SELECT pool,
                   toUnixTimestamp64Milli(started_at) / 1000 AS s,
                   toUnixTimestamp64Milli(ended_at) / 1000 AS e,
                   arrayJoin(range(toUInt32(intDiv(toUInt64(floor(s)), 300) * 300), toUInt32(ceil(e)), 300)) AS b
            FROM idle_windows FINAL
            WHERE ended_at > started_at
        )
        GROUP BY pool, bucket
    )
SELECT
    d.pool                                                                   AS pool,
    d.bucket                                                                 AS bucket,
    d.minutes                                                                AS minutes,
    d.total_gpus                                                             AS total_gpus,
    d.total_gpus_max                                                         AS total_gpus_max,
    d.rented_gpus                                                            AS rented_gpus,
    d.rented_gpus_max                                                        AS rented_gpus_max,
    greatest(d.rented_gpus - ifNull(i.idle_s, 0) / (d.minutes * 60), 0)      AS busy_gpus
FROM per_bucket AS d
LEFT JOIN idle AS i ON i.pool = d.pool AND i.bucket = d.bucket;

CREATE VIEW IF NOT EXISTS pool_tidal_profile ON CLUSTER '{cluster}' AS
SELECT
    pool,
    (toDayOfWeek(bucket) - 1) * 24 + toHour(bucket)   AS hour_of_week,
    toDayOfWeek(bucket)                               AS day_of_week,
    toHour(bucket)                                    AS hour,
    count()                                           AS buckets,
    avg(rented_gpus)                                  AS rented_mean,
    quantileExact(0.1)(rented_gpus)                   AS rented_p10,
    quantileExact(0.9)(rented_gpus)                   AS rented_p90,
    avg(busy_gpus)                                    AS busy_mean,
    avg(total_gpus)                                   AS total_mean
FROM pool_demand_5m
GROUP BY pool, hour_of_week, day_of_week, hour;

CREATE TABLE IF NOT EXISTS forecasts ON CLUSTER '{cluster}'
(
    pool          LowCardinality(String),
    made_at       DateTime('UTC'),
    ts            DateTime('UTC')   CODEC(DoubleDelta, ZSTD(1)),
    step_s        UInt32,
    demand_gpus   Float64           CODEC(Gorilla, ZSTD(1)),
    p10           Float64           CODEC(Gorilla, ZSTD(1)),
    p90           Float64           CODEC(Gorilla, ZSTD(1)),
    method        LowCardinality(String)
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/forecasts', '{replica}')
PARTITION BY toYYYYMM(made_at)
ORDER BY (pool, made_at, ts)
SETTINGS replicated_deduplication_window = 10000;

CREATE TABLE IF NOT EXISTS forecasts_all ON CLUSTER '{cluster}' AS forecasts
ENGINE = Distributed('{cluster}', currentDatabase(), forecasts, cityHash64(pool));

CREATE TABLE IF NOT EXISTS scale_events ON CLUSTER '{cluster}'
(
    pool          LowCardinality(String),
    at            DateTime('UTC'),
    action        LowCardinality(String),
    current_gpus  UInt32,
    target_gpus   UInt32,
    rented_gpus   UInt32,
    reason        String,
    dry_run       UInt8,
    lead_time_s   UInt32
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/scale_events', '{replica}')
PARTITION BY toYYYYMM(at)
ORDER BY (pool, at)
SETTINGS replicated_deduplication_window = 10000;

CREATE TABLE IF NOT EXISTS scale_events_all ON CLUSTER '{cluster}' AS scale_events
ENGINE = Distributed('{cluster}', currentDatabase(), scale_events, cityHash64(pool));

INSERT INTO schema_migrations (version, name, checksum) VALUES (7, '0007_demand_forecasts', '932bc96d310953e1');
