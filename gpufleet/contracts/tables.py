"""Every table gpufleet stores, described once: its columns with their ClickHouse types, engine, sorting key,
partition, TTL and settings (the registry).

The migrations (``sql/migrations``) make the tables; a test migrates a fresh database and requires every table
there to be exactly as described here, column for column (tests/integration/test_tables.py). The stream's writers
take their column tuples and row builders from here (``Table.columns``, ``Table.row``), and readers get records by
name (``Table.record``), so a column added in one place that does not reach the others fails the build.

A column with a ``default`` that the writers leave out (``written=False``: when a row was stored, when it was
rated again) is described but not in ``Table.columns``.
"""
from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any


@dataclass(frozen=True)
class Column:
    name: str
    type: str                       # as ClickHouse reports it (system.columns)
    default: str | None = None      # its DEFAULT expression, if it has one
    written: bool = True            # the writers send it (a defaulted column may be left to its default)


@dataclass(frozen=True, eq=False)
class Table:
    """A stored table. Compared and hashed by identity: each is one object of the registry (a key of the rows a
    stage produces)."""

    name: str
    engine: str                     # e.g. ReplacingMergeTree, ReplacingMergeTree(updated_at)
    order_by: tuple[str, ...]
    schema: tuple[Column, ...]
    partition_by: str = ""
    ttl: str = ""
    settings: tuple[str, ...] = ()
    dedup: bool = True              # the writers drop rows whose key is stored already (tables that feed views)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @cached_property
    def columns(self) -> tuple[str, ...]:
        """The columns the writers send, in table order: the order of every row tuple."""
        return tuple(c.name for c in self.schema if c.written)

    @cached_property
    def record(self) -> type:
        """A named tuple of the written columns: a row read or built by name (``row.period_start``)."""
        return namedtuple(f"{self.name}_row", self.columns)

    def row(self, **values) -> tuple:
        """A row from its values by name; a column missing or unknown is a programmer's error (ValueError)."""
        try:
            return tuple(self.record(**values))
        except TypeError as err:
            raise ValueError(f"{self.name}: {err}") from None

    def column(self, name: str) -> Column:
        for c in self.schema:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no column {name}")


def col(name: str, type_: str, default: str | None = None, written: bool = True) -> Column:
    return Column(name, type_, default, written)


ALERT_DELIVERIES = Table("alert_deliveries", "ReplacingMergeTree(updated_at)", dedup=False,
    order_by=('id', 'alert_status', 'receiver'),
    schema=(
        col('id', 'String'),
        col('alert_status', 'LowCardinality(String)'),
        col('receiver', 'LowCardinality(String)'),
        col('status', 'LowCardinality(String)'),
        col('dedup_key', 'String'),
        col('kind', 'LowCardinality(String)'),
        col('severity', 'LowCardinality(String)'),
        col('node', 'LowCardinality(String)'),
        col('gpu_uuid', 'String'),
        col('job', 'String'),
        col('tenant', 'LowCardinality(String)'),
        col('pool', 'LowCardinality(String)'),
        col('group_key', 'String'),
        col('attempts', 'UInt32'),
        col('reason', 'String'),
        col('last_error', 'String'),
        col('sent_at', "Nullable(DateTime64(3, 'UTC'))"),
        col('updated_at', "DateTime64(3, 'UTC')"),
))

ALERTS = Table("alerts", "ReplacingMergeTree",
    order_by=('id', 'status'),
    partition_by='toYYYYMM(detected_at)',
    settings=('non_replicated_deduplication_window = 10000',),
    schema=(
        col('id', 'String'),
        col('status', 'LowCardinality(String)'),
        col('dedup_key', 'String'),
        col('kind', 'LowCardinality(String)'),
        col('severity', 'LowCardinality(String)'),
        col('node', 'LowCardinality(String)'),
        col('gpu_uuid', 'String'),
        col('job', 'String'),
        col('tenant', 'LowCardinality(String)'),
        col('pool', 'LowCardinality(String)'),
        col('started_at', "DateTime64(3, 'UTC')"),
        col('detected_at', "DateTime64(3, 'UTC')"),
        col('resolved_at', "Nullable(DateTime64(3, 'UTC'))"),
        col('score', 'Float64'),
        col('summary', 'String'),
        col('evidence', 'String'),
))

# A billing line, as the ledger and its adjustments both hold it: its key, then what it priced. The ledger gained
# the last seven columns after it was first made (their defaults fill the rows written before); the adjustments
# table was made with them.
LINE_KEY = (
    col('gpu_uuid', 'LowCardinality(String)'),
    col('tenant', 'LowCardinality(String)'),
    col('job', 'String'),
    col('period_start', "DateTime('UTC')"),
)


def line_columns(added_later: bool) -> tuple[Column, ...]:
    """A billing line's columns after its key; ``added_later``: with the defaults of the columns the ledger gained
    after it was first made."""
    first = (
        col('period_end', "DateTime('UTC')"),
        col('node', 'LowCardinality(String)'),
        col('pool', 'LowCardinality(String)'),
        col('gpu_index', 'UInt16'),
        col('gpu_model', 'LowCardinality(String)'),
        col('mig_profile', 'LowCardinality(String)'),
        col('gpu_share', 'Decimal(9, 6)'),
        col('team', 'LowCardinality(String)'),
        col('billing_mode', 'LowCardinality(String)'),
        col('currency', 'LowCardinality(String)'),
        col('samples', 'UInt32'),
        col('interval_s', 'Float32'),
        col('rented_s', 'Decimal(18, 3)'),
        col('busy_s', 'Decimal(18, 3)'),
        col('idle_s', 'Decimal(18, 3)'),
        col('estimated_s', 'Decimal(18, 3)'),
        col('unbilled_s', 'Decimal(18, 3)'),
        col('minimum_topup_s', 'Decimal(18, 3)'),
        col('util_pct', 'Nullable(Float32)'),
        col('busy_util_pct', 'Nullable(Float32)'),
        col('price_per_gpu_hour', 'Decimal(18, 6)'),
        col('amount', 'Decimal(18, 6)'),
        col('idle_amount', 'Decimal(18, 6)'),
        col('mode_amounts', 'Map(LowCardinality(String), Decimal(18, 6))'),
        col('data_quality', 'LowCardinality(String)'),
    )
    later = (('underused_s', 'Decimal(18, 3)', '0'), ('unused_amount', 'Decimal(18, 6)', '0'),
             ('unsold_amount', 'Decimal(18, 6)', '0'), ('price_version', 'LowCardinality(String)', "''"),
             ('busy_weighted_s', 'Decimal(20, 8)', '0'), ('idle_weighted_s', 'Decimal(20, 8)', '0'),
             ('estimated_idle_s', 'Decimal(18, 3)', '0'))
    return first + tuple(col(name, type_, default if added_later else None) for name, type_, default in later)


BILLING_ADJUSTMENTS = Table("billing_adjustments", "ReplacingMergeTree",
    order_by=('gpu_uuid', 'tenant', 'job', 'period_start', 'adjustment_id'),
    partition_by='toYYYYMM(invoice_month)',
    schema=(
        *LINE_KEY,
        col('adjustment_id', 'String'),
        col('kind', 'LowCardinality(String)'),
        col('invoice_month', 'Date'),
        col('at', "DateTime64(3, 'UTC')"),
        col('reason', 'String'),
        col('amount_change', 'Decimal(18, 6)'),
        col('idle_amount_change', 'Decimal(18, 6)'),
        *line_columns(added_later=False),
))

BILLING_COMMITMENT_LEDGER = Table("billing_commitment_ledger", "ReplacingMergeTree",
    order_by=('month', 'commitment'),
    schema=(
        col('month', 'Date'),
        col('commitment', 'String'),
        col('tenant', 'LowCardinality(String)'),
        col('pool', 'LowCardinality(String)'),
        col('currency', 'LowCardinality(String)'),
        col('gpus', 'UInt32'),
        col('committed_hours', 'Decimal(18, 6)'),
        col('used_hours', 'Decimal(18, 6)'),
        col('billed_amount', 'Decimal(18, 6)'),
        col('amortized_amount', 'Decimal(18, 6)'),
        col('unused_amount', 'Decimal(18, 6)'),
        col('covered_amount', 'Decimal(18, 6)'),
        col('closed_at', "DateTime64(3, 'UTC')"),
))

BILLING_LEDGER = Table("billing_ledger", "ReplacingMergeTree",
    order_by=('gpu_uuid', 'tenant', 'job', 'period_start'),
    partition_by='toYYYYMM(period_start)',
    settings=('non_replicated_deduplication_window = 10000',),
    schema=(
        *LINE_KEY,
        *line_columns(added_later=True),
        col('rerated_at', "DateTime64(3, 'UTC')", default='0', written=False),
))

BILLING_MONTHS = Table("billing_months", "ReplacingMergeTree",
    order_by=('month',),
    schema=(
        col('month', 'Date'),
        col('closed_at', "DateTime64(3, 'UTC')"),
        col('reason', 'String'),
))

BILLING_RERATE_AUDIT = Table("billing_rerate_audit", "ReplacingMergeTree",
    order_by=('rerate_id', 'gpu_uuid', 'tenant', 'job', 'period_start'),
    partition_by='toYYYYMM(period_start)',
    schema=(
        col('rerate_id', 'String'),
        col('at', "DateTime64(3, 'UTC')"),
        col('reason', 'String'),
        col('gpu_uuid', 'LowCardinality(String)'),
        col('tenant', 'LowCardinality(String)'),
        col('job', 'String'),
        col('period_start', "DateTime('UTC')"),
        col('pool', 'LowCardinality(String)'),
        col('currency', 'LowCardinality(String)'),
        col('old_version', 'LowCardinality(String)'),
        col('new_version', 'LowCardinality(String)'),
        col('old_mode', 'LowCardinality(String)'),
        col('new_mode', 'LowCardinality(String)'),
        col('old_amount', 'Decimal(18, 6)'),
        col('new_amount', 'Decimal(18, 6)'),
        col('old_idle_amount', 'Decimal(18, 6)'),
        col('new_idle_amount', 'Decimal(18, 6)'),
        col('applied_to', 'LowCardinality(String)'),
))

DEAD_LETTERS = Table("dead_letters", "MergeTree", dedup=False,
    order_by=('reason_code', 'received_at'),
    partition_by='toYYYYMM(received_at)',
    ttl='toDateTime(received_at) + toIntervalDay(30)',
    settings=('non_replicated_deduplication_window = 10000',),
    schema=(
        col('received_at', "DateTime64(3, 'UTC')"),
        col('reason_code', 'LowCardinality(String)'),
        col('reason', 'String'),
        col('source', 'String'),
        col('payload', 'String'),
))

FORECASTS = Table("forecasts", "ReplacingMergeTree",
    order_by=('pool', 'made_at', 'ts'),
    partition_by='toYYYYMM(made_at)',
    settings=('non_replicated_deduplication_window = 10000',),
    schema=(
        col('pool', 'LowCardinality(String)'),
        col('made_at', "DateTime('UTC')"),
        col('ts', "DateTime('UTC')"),
        col('step_s', 'UInt32'),
        col('demand_gpus', 'Float64'),
        col('p10', 'Float64'),
        col('p90', 'Float64'),
        col('method', 'LowCardinality(String)'),
))

GPU_ROLLUP_1M = Table("gpu_rollup_1m", "ReplacingMergeTree",
    order_by=('gpu_uuid', 'minute'),
    partition_by='toYYYYMM(minute)',
    settings=('non_replicated_deduplication_window = 10000',),
    schema=(
        col('minute', "DateTime('UTC')"),
        col('node', 'LowCardinality(String)'),
        col('pool', 'LowCardinality(String)'),
        col('gpu_uuid', 'LowCardinality(String)'),
        col('gpu_index', 'UInt16'),
        col('model', 'LowCardinality(String)'),
        col('tenant', 'LowCardinality(String)'),
        col('job', 'String'),
        col('samples', 'UInt16'),
        col('util_pct_mean', 'Nullable(Float32)'),
        col('util_pct_min', 'Nullable(Float32)'),
        col('util_pct_max', 'Nullable(Float32)'),
        col('mem_util_pct_mean', 'Nullable(Float32)'),
        col('mem_util_pct_min', 'Nullable(Float32)'),
        col('mem_util_pct_max', 'Nullable(Float32)'),
        col('mem_used_bytes_mean', 'Nullable(Float64)'),
        col('mem_used_bytes_min', 'Nullable(Float64)'),
        col('mem_used_bytes_max', 'Nullable(Float64)'),
        col('power_w_mean', 'Nullable(Float32)'),
        col('power_w_min', 'Nullable(Float32)'),
        col('power_w_max', 'Nullable(Float32)'),
        col('temp_c_mean', 'Nullable(Float32)'),
        col('temp_c_min', 'Nullable(Float32)'),
        col('temp_c_max', 'Nullable(Float32)'),
        col('sm_clock_mhz_mean', 'Nullable(Float32)'),
        col('sm_clock_mhz_min', 'Nullable(Float32)'),
        col('sm_clock_mhz_max', 'Nullable(Float32)'),
        col('pcie_rx_bytes_per_s_mean', 'Nullable(Float64)'),
        col('pcie_rx_bytes_per_s_min', 'Nullable(Float64)'),
        col('pcie_rx_bytes_per_s_max', 'Nullable(Float64)'),
        col('pcie_tx_bytes_per_s_mean', 'Nullable(Float64)'),
        col('pcie_tx_bytes_per_s_min', 'Nullable(Float64)'),
        col('pcie_tx_bytes_per_s_max', 'Nullable(Float64)'),
        col('throttled_samples', 'UInt16'),
        col('xid_events', 'UInt16'),
        col('rented_ms', 'UInt32', default='0'),
))

GPU_SAMPLES = Table("gpu_samples", "ReplacingMergeTree",
    order_by=('node', 'gpu_uuid', 'ts'),
    partition_by='toDate(ts)',
    ttl='inserted_at + toIntervalDay(14)',
    settings=('ttl_only_drop_parts = 1', 'non_replicated_deduplication_window = 10000',),
    schema=(
        col('ts', "DateTime64(3, 'UTC')"),
        col('node', 'LowCardinality(String)'),
        col('pool', 'LowCardinality(String)'),
        col('gpu_uuid', 'LowCardinality(String)'),
        col('gpu_index', 'UInt16'),
        col('tenant', 'LowCardinality(String)'),
        col('job', 'String'),
        col('util_pct', 'Nullable(Float32)'),
        col('mem_util_pct', 'Nullable(Float32)'),
        col('mem_used_bytes', 'Nullable(UInt64)'),
        col('mem_total_bytes', 'Nullable(UInt64)'),
        col('power_w', 'Nullable(Float32)'),
        col('temp_c', 'Nullable(Float32)'),
        col('sm_clock_mhz', 'Nullable(Float32)'),
        col('pcie_rx_bytes_per_s', 'Nullable(Float64)'),
        col('pcie_tx_bytes_per_s', 'Nullable(Float64)'),
        col('throttle_reasons', 'Nullable(UInt64)'),
        col('xid_events', 'Array(UInt32)'),
        col('process_pids', 'Array(UInt32)'),
        col('process_mem_bytes', 'Array(UInt64)'),
        col('inserted_at', "DateTime('UTC')", default='now()', written=False),
))

IDLE_WINDOWS = Table("idle_windows", "ReplacingMergeTree(ended_at)",
    order_by=('gpu_uuid', 'started_at'),
    partition_by='toYYYYMM(started_at)',
    settings=('non_replicated_deduplication_window = 10000',),
    schema=(
        col('gpu_uuid', 'LowCardinality(String)'),
        col('started_at', "DateTime64(3, 'UTC')"),
        col('ended_at', "DateTime64(3, 'UTC')"),
        col('node', 'LowCardinality(String)'),
        col('pool', 'LowCardinality(String)'),
        col('gpu_index', 'UInt16'),
        col('tenant', 'LowCardinality(String)'),
        col('job', 'String'),
        col('duration_s', 'Float64'),
        col('samples', 'UInt32'),
        col('max_util_pct', 'Float32'),
        col('end_reason', 'LowCardinality(String)'),
        col('open', 'UInt8'),
))

JOB_ROLLUP_1M = Table("job_rollup_1m", "ReplacingMergeTree",
    order_by=('job', 'minute'),
    partition_by='toYYYYMM(minute)',
    settings=('non_replicated_deduplication_window = 10000',),
    schema=(
        col('minute', "DateTime('UTC')"),
        col('job', 'String'),
        col('tenant', 'LowCardinality(String)'),
        col('pool', 'LowCardinality(String)'),
        col('nodes', 'UInt16'),
        col('gpus', 'UInt16'),
        col('samples', 'UInt32'),
        col('util_pct_mean', 'Nullable(Float32)'),
        col('util_pct_min_gpu', 'Nullable(Float32)'),
        col('util_pct_max_gpu', 'Nullable(Float32)'),
        col('sm_clock_mhz_mean', 'Nullable(Float32)'),
        col('sm_clock_mhz_min_gpu', 'Nullable(Float32)'),
        col('power_w_mean', 'Nullable(Float32)'),
        col('slowest_gpu', 'String'),
        col('slowest_node', 'LowCardinality(String)'),
))

NODE_ROLLUP_1M = Table("node_rollup_1m", "ReplacingMergeTree",
    order_by=('node', 'minute'),
    partition_by='toYYYYMM(minute)',
    settings=('non_replicated_deduplication_window = 10000',),
    schema=(
        col('minute', "DateTime('UTC')"),
        col('node', 'LowCardinality(String)'),
        col('pool', 'LowCardinality(String)'),
        col('samples', 'UInt16'),
        col('gpus', 'UInt16'),
        col('host_cpu_util_pct_mean', 'Nullable(Float32)'),
        col('host_cpu_util_pct_min', 'Nullable(Float32)'),
        col('host_cpu_util_pct_max', 'Nullable(Float32)'),
        col('host_iowait_pct_mean', 'Nullable(Float32)'),
        col('host_iowait_pct_min', 'Nullable(Float32)'),
        col('host_iowait_pct_max', 'Nullable(Float32)'),
        col('host_disk_read_bytes_per_s_mean', 'Nullable(Float64)'),
        col('host_disk_read_bytes_per_s_min', 'Nullable(Float64)'),
        col('host_disk_read_bytes_per_s_max', 'Nullable(Float64)'),
        col('host_net_rx_bytes_per_s_mean', 'Nullable(Float64)'),
        col('host_net_rx_bytes_per_s_min', 'Nullable(Float64)'),
        col('host_net_rx_bytes_per_s_max', 'Nullable(Float64)'),
        col('host_mem_used_bytes_mean', 'Nullable(Float64)'),
        col('host_mem_used_bytes_min', 'Nullable(Float64)'),
        col('host_mem_used_bytes_max', 'Nullable(Float64)'),
        col('gpu_util_pct_mean', 'Nullable(Float32)'),
        col('gpu_util_pct_min', 'Nullable(Float32)'),
        col('gpu_util_pct_max', 'Nullable(Float32)'),
        col('gpu_mem_used_bytes_mean', 'Nullable(Float64)'),
        col('gpu_mem_used_bytes_min', 'Nullable(Float64)'),
        col('gpu_mem_used_bytes_max', 'Nullable(Float64)'),
        col('gpu_power_w_mean', 'Nullable(Float32)'),
        col('gpu_power_w_min', 'Nullable(Float32)'),
        col('gpu_power_w_max', 'Nullable(Float32)'),
        col('gpu_sm_clock_mhz_mean', 'Nullable(Float32)'),
        col('gpu_sm_clock_mhz_min', 'Nullable(Float32)'),
        col('gpu_sm_clock_mhz_max', 'Nullable(Float32)'),
        col('gpu_pcie_rx_bytes_per_s_mean', 'Nullable(Float64)'),
        col('gpu_pcie_rx_bytes_per_s_min', 'Nullable(Float64)'),
        col('gpu_pcie_rx_bytes_per_s_max', 'Nullable(Float64)'),
        col('gpu_pcie_tx_bytes_per_s_mean', 'Nullable(Float64)'),
        col('gpu_pcie_tx_bytes_per_s_min', 'Nullable(Float64)'),
        col('gpu_pcie_tx_bytes_per_s_max', 'Nullable(Float64)'),
))

SCALE_EVENTS = Table("scale_events", "ReplacingMergeTree",
    order_by=('pool', 'at'),
    partition_by='toYYYYMM(at)',
    settings=('non_replicated_deduplication_window = 10000',),
    schema=(
        col('pool', 'LowCardinality(String)'),
        col('at', "DateTime('UTC')"),
        col('action', 'LowCardinality(String)'),
        col('current_gpus', 'UInt32'),
        col('target_gpus', 'UInt32'),
        col('rented_gpus', 'UInt32'),
        col('reason', 'String'),
        col('dry_run', 'UInt8'),
        col('lead_time_s', 'UInt32'),
        col('capacity_gpus', 'UInt32', default='0'),
        col('request_gpus', 'UInt32', default='0'),
        col('request_from', "DateTime('UTC')", default="toDateTime(0, 'UTC')"),
        col('request_until', "DateTime('UTC')", default="toDateTime(0, 'UTC')"),
        col('request_p90', 'Float64', default='0'),
        col('changed', 'UInt8', default="action != 'hold'"),
))

SCHEMA_MIGRATIONS = Table("schema_migrations", "ReplacingMergeTree",
    order_by=('version',),
    schema=(
        col('version', 'UInt32'),
        col('name', 'String'),
        col('checksum', 'String'),
        col('applied_at', "DateTime('UTC')", default='now()', written=False),
))

SILENCES = Table("silences", "ReplacingMergeTree(updated_at)",
    order_by=('id',),
    schema=(
        col('id', 'String'),
        col('matchers', 'Array(String)'),
        col('starts_at', "DateTime64(3, 'UTC')"),
        col('ends_at', "DateTime64(3, 'UTC')"),
        col('created_by', 'String'),
        col('comment', 'String'),
        col('updated_at', "DateTime64(3, 'UTC')"),
))

USAGE_GPU_1M = Table("usage_gpu_1m", "ReplacingMergeTree",
    order_by=('pool', 'minute', 'gpu_uuid'),
    partition_by='toYYYYMM(minute)',
    settings=('non_replicated_deduplication_window = 10000',),
    schema=(
        col('minute', "DateTime('UTC')"),
        col('pool', 'LowCardinality(String)'),
        col('tenant', 'LowCardinality(String)'),
        col('gpu_uuid', 'LowCardinality(String)'),
        col('util', 'Nullable(Float32)'),
        col('util_max', 'Float32'),
        col('power', 'Nullable(Float32)'),
        col('mem_used', 'Nullable(Float64)'),
))


TABLES: dict[str, Table] = {t.name: t for t in (
    ALERT_DELIVERIES, ALERTS, BILLING_ADJUSTMENTS, BILLING_COMMITMENT_LEDGER, BILLING_LEDGER, BILLING_MONTHS,
    BILLING_RERATE_AUDIT, DEAD_LETTERS, FORECASTS, GPU_ROLLUP_1M, GPU_SAMPLES, IDLE_WINDOWS, JOB_ROLLUP_1M,
    NODE_ROLLUP_1M, SCALE_EVENTS, SCHEMA_MIGRATIONS, SILENCES, USAGE_GPU_1M)}
