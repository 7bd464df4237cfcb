-- The table every cluster migration records itself in (on every node).

CREATE TABLE IF NOT EXISTS schema_migrations ON CLUSTER '{cluster}'
(
    version     UInt32,
    name        String,
    checksum    String,
    applied_at  DateTime('UTC') DEFAULT now()
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all/{database}/schema_migrations', '{replica}')
ORDER BY version;
