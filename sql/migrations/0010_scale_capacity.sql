-- Scale decisions bounded by what a pool has: each decision records the pool's capacity (scale.capacity_gpus, else
-- the most GPUs the pool has shown in telemetry), which no target exceeds, and the demand beyond it as a capacity
-- request (request_gpus more GPUs from request_from until request_until, with request_p90 the forecast's highest
-- p90 in that time; request_gpus 0: none). Rows written before this migration have 0 there. changed: the
-- target differs from the one in force before (the cooldown runs from the last change); the action now compares
-- the target with the GPUs present, so it no longer tells; rows written before read it from their action.
ALTER TABLE scale_events ADD COLUMN IF NOT EXISTS capacity_gpus UInt32 DEFAULT 0;
ALTER TABLE scale_events ADD COLUMN IF NOT EXISTS request_gpus UInt32 DEFAULT 0;
ALTER TABLE scale_events ADD COLUMN IF NOT EXISTS request_from DateTime('UTC') DEFAULT toDateTime(0, 'UTC');
ALTER TABLE scale_events ADD COLUMN IF NOT EXISTS request_until DateTime('UTC') DEFAULT toDateTime(0, 'UTC');
ALTER TABLE scale_events ADD COLUMN IF NOT EXISTS request_p90 Float64 DEFAULT 0;
ALTER TABLE scale_events ADD COLUMN IF NOT EXISTS changed UInt8 DEFAULT action != 'hold'
