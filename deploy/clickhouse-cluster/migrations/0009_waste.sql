-- 0009_waste for a ClickHouse cluster, rendered from sql/migrations/0009_waste.sql by deploy/clickhouse-cluster/render.py:
-- do not edit; apply in order (README.md here).

ALTER TABLE billing_ledger ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS underused_s Decimal(18, 3) DEFAULT 0;

ALTER TABLE billing_ledger_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS underused_s Decimal(18, 3) DEFAULT 0;

ALTER TABLE billing_ledger ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS unused_amount Decimal(18, 6) DEFAULT 0;

ALTER TABLE billing_ledger_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS unused_amount Decimal(18, 6) DEFAULT 0;

ALTER TABLE billing_ledger ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS unsold_amount Decimal(18, 6) DEFAULT 0;

ALTER TABLE billing_ledger_all ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS unsold_amount Decimal(18, 6) DEFAULT 0;

CREATE VIEW IF NOT EXISTS billing_waste ON CLUSTER '{cluster}' AS
SELECT day, month, tenant, pool, currency, rented_hours, idle_hours, underused_hours,
       idle_sum AS idle_amount, unused_sum AS unused_amount, idle_sum + unused_sum AS tenant_waste_amount,
       unsold_sum AS unsold_amount, amount_sum AS amount
FROM
(
    SELECT
        toDate(period_start)                                                 AS day,
        toStartOfMonth(period_start)                                         AS month,
        tenant, pool, currency,
        toDecimal64(round(toDecimal128(sum(rented_s), 9) / 3600, 6), 6)      AS rented_hours,
        toDecimal64(round(toDecimal128(sum(idle_s), 9) / 3600, 6), 6)        AS idle_hours,
        toDecimal64(round(toDecimal128(sum(underused_s), 9) / 3600, 6), 6)   AS underused_hours,
        sum(idle_amount)                                                     AS idle_sum,
        sum(unused_amount)                                                   AS unused_sum,
        sum(unsold_amount)                                                   AS unsold_sum,
        sum(amount)                                                          AS amount_sum
    FROM billing_ledger FINAL
    GROUP BY day, month, tenant, pool, currency
);

DROP VIEW IF EXISTS billing_low_utilization ON CLUSTER '{cluster}';

CREATE VIEW IF NOT EXISTS billing_low_utilization ON CLUSTER '{cluster}' AS
SELECT toStartOfMonth(period_start) AS month, tenant, job, gpu_uuid, any(pool) AS pool, currency,
       sum(underused_s)                                                      AS low_busy_s,
       toDecimal64(round(toDecimal128(sum(underused_s), 9) / 3600, 6), 6)    AS low_busy_hours,
       sumIf(toFloat64(busy_s) * busy_util_pct, underused_s > 0) / sumIf(toFloat64(busy_s), underused_s > 0)
                                                                             AS busy_util_pct,
       sumIf(amount - idle_amount, underused_s > 0)                          AS busy_amount,
       sum(unused_amount)                                                    AS unused_amount,
       sum(unsold_amount)                                                    AS unsold_amount
FROM billing_ledger FINAL
WHERE underused_s > 0
GROUP BY month, tenant, job, gpu_uuid, currency;

INSERT INTO schema_migrations (version, name, checksum) VALUES (9, '0009_waste', 'd2ee2b7caa74a5b5');
