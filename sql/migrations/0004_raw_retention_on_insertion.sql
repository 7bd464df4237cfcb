-- Raw samples are kept for a retention counted from when they were stored, not from their
-- event time: a replay of an older recording keeps its raw samples like any other data.
-- The retention itself is a setting (store.raw_retention_days, 14 by default); `gpufleet
-- db migrate` (and every command that writes) sets this TTL to it.

ALTER TABLE gpu_samples ADD COLUMN IF NOT EXISTS inserted_at DateTime('UTC') DEFAULT now() CODEC(DoubleDelta, ZSTD(1));

ALTER TABLE gpu_samples MODIFY TTL inserted_at + INTERVAL 14 DAY SETTINGS materialize_ttl_after_modify = 0;
