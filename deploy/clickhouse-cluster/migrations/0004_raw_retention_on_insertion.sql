-- 0004_raw_retention_on_insertion for a ClickHouse cluster, rendered from sql/migrations/0004_raw_retention_on_insertion.sql by deploy/clickhouse-cluster/render.py:
-- do not edit; apply in order (README.md here).

ALTER TABLE gpu_samples ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS inserted_at DateTime('UTC') DEFAULT now() CODEC(DoubleDelta, ZSTD(1));

ALTER TABLE gpu_samples_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS inserted_at DateTime('UTC') DEFAULT now() CODEC(DoubleDelta, ZSTD(1));

ALTER TABLE gpu_samples ON CLUSTER '{cluster}' MODIFY TTL inserted_at + INTERVAL 14 DAY SETTINGS materialize_ttl_after_modify = 0;

INSERT INTO schema_migrations (version, name, checksum) VALUES (4, '0004_raw_retention_on_insertion', 'abf04823cbaec799');
