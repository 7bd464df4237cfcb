-- Alert delivery (gpufleet notify): the delivery ledger and the silences.
--
-- alert_deliveries: one row per alert id, alert status (firing / resolved) and receiver, copied from
-- each router's delivery log. status is what became of it: sent (the receiver answered 2xx, at
-- sent_at), dead (given up: reason rejected or retry_limit, last_error says why), silenced or
-- inhibited (not told; reason names the silence or the incident), superseded (a firing that came
-- after its own resolve). A muted firing told later, once its silence ended, is written again with
-- a later updated_at: the table keeps the latest version of each key (read it with FINAL).
--
-- silences: the latest version (updated_at) of each silence id holds; expiring one writes a version
-- that ends then.

CREATE TABLE IF NOT EXISTS alert_deliveries
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
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY (id, alert_status, receiver);

CREATE TABLE IF NOT EXISTS silences
(
    id            String,
    matchers      Array(String),
    starts_at     DateTime64(3, 'UTC'),
    ends_at       DateTime64(3, 'UTC'),
    created_by    String,
    comment       String,
    updated_at    DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY id;
