-- Waste, one definition (gpufleet/contracts/waste.py): every billing record carries the busy time of an
-- underused period (busy time whose mean utilization ran below billing.underuse_pct, 60 % by default), what the
-- tenant paid for the unused share of it, and what the provider lost where the tenant pays by use. Rows written
-- before this migration have 0 there.
ALTER TABLE billing_ledger ADD COLUMN IF NOT EXISTS underused_s Decimal(18, 3) DEFAULT 0;
ALTER TABLE billing_ledger ADD COLUMN IF NOT EXISTS unused_amount Decimal(18, 6) DEFAULT 0;
ALTER TABLE billing_ledger ADD COLUMN IF NOT EXISTS unsold_amount Decimal(18, 6) DEFAULT 0;

-- Waste by day, tenant and pool: idle and underused GPU-hours, what the tenant paid for them (idle_amount +
-- unused_amount) and what the provider lost (unsold_amount), beside the rented hours and the amount billed.
CREATE VIEW IF NOT EXISTS billing_waste AS
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

-- The rentals (a GPU, tenant and job in a month) with underused time, by the same definition (this view held an
-- older rule before: an hour or more of busy time below 60 % in a month).
DROP VIEW IF EXISTS billing_low_utilization;
CREATE VIEW IF NOT EXISTS billing_low_utilization AS
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
