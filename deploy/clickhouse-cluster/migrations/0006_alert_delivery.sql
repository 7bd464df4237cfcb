-- 0006_alert_delivery for a ClickHouse cluster, rendered from sql/migrations/0006_alert_delivery.sql by deploy/clickhouse-cluster/render.py:
-- do not edit; apply in order (README.md here).

CREATE TABLE IF NOT EXISTS alert_deliveries ON CLUSTER '{cluster}'
(
    id            String,
    alert_status  LowCardinality(String),
    receiver      LowCardinality(String),
    status        LowCardinality(String),
    dedup_key     String,
    kind          LowCardinality(String),
    severity      LowCardinality(String),
    node          LowCardinality(String),
    gpu_uuid      String,
    job           String,
    tenant        LowCardinality(String),
    pool          LowCardinality(String),
    group_key     String,
    attempts      UInt32,
    reason        String,
    last_error    String,
    sent_at       Nullable(DateTime64(3, 'UTC')),
    updated_at    DateTime64(3, 'UTC')
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/alert_deliveries', '{replica}', updated_at)
ORDER BY (id, alert_status, receiver);

CREATE TABLE IF NOT EXISTS alert_deliveries_all ON CLUSTER '{cluster}' AS alert_deliveries
ENGINE = Distributed('{cluster}', currentDatabase(), alert_deliveries, cityHash64(id));

CREATE TABLE IF NOT EXISTS silences ON CLUSTER '{cluster}'
(
    id            String,
    matchers      Array(String),
    starts_at     DateTime64(3, 'UTC'),
    ends_at       DateTime64(3, 'UTC'),
    created_by    String,
    comment       String,
    updated_at    DateTime64(3, 'UTC')
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/silences', '{replica}', updated_at)
ORDER BY id;

CREATE TABLE IF NOT EXISTS silences_all ON CLUSTER '{cluster}' AS silences
ENGINE = Distributed('{cluster}', currentDatabase(), silences, cityHash64(id));

INSERT INTO schema_migrations (version, name, checksum) VALUES (6, '0006_alert_delivery', '0352bff26ec03c62');
