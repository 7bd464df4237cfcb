-- 0010_scale_capacity for a ClickHouse cluster, rendered from sql/migrations/0010_scale_capacity.sql by deploy/clickhouse-cluster/render.py:
-- do not edit; apply in order (README.md here).

ALTER TABLE scale_events ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS capacity_gpus UInt32 DEFAULT 0;

ALTER TABLE scale_events_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS capacity_gpus UInt32 DEFAULT 0;

ALTER TABLE scale_events ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS request_gpus UInt32 DEFAULT 0;

ALTER TABLE scale_events_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS request_gpus UInt32 DEFAULT 0;

ALTER TABLE scale_events ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS request_from DateTime('UTC') DEFAULT toDateTime(0, 'UTC');

ALTER TABLE scale_events_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS request_from DateTime('UTC') DEFAULT toDateTime(0, 'UTC');

ALTER TABLE scale_events ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS request_until DateTime('UTC') DEFAULT toDateTime(0, 'UTC');

ALTER TABLE scale_events_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS request_until DateTime('UTC') DEFAULT toDateTime(0, 'UTC');

ALTER TABLE scale_events ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS request_p90 Float64 DEFAULT 0;

ALTER TABLE scale_events_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS request_p90 Float64 DEFAULT 0;

ALTER TABLE scale_events ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS changed UInt8 DEFAULT action != 'hold';

ALTER TABLE scale_events_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS changed UInt8 DEFAULT action != 'hold';

INSERT INTO schema_migrations (version, name, checksum) VALUES (10, '0010_scale_capacity', 'af3e9f5420c471ef');
