"""gpufleet's settings: one frozen object per process, validated at start.

Sources, strongest first: command-line flags, environment variables
(``GPUFLEET_<SECTION>__<NAME>``, e.g. ``GPUFLEET_STORE__DSN``), a TOML file
(``--config`` or ``GPUFLEET_CONFIG``), then the defaults below. A bad value
raises :class:`SettingsError` with one line naming the setting.
"""
from __future__ import annotations

import datetime as dt
import os
import re
import socket
import types
import typing
from decimal import Decimal
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, InitSettingsSource, SettingsConfigDict

from gpufleet.contracts.files import FileError, read_toml
from gpufleet.models.scaling import Policy
from gpufleet.sql import parse_dsn
from gpufleet.streams.billing.prices import BillingConfig, written
from gpufleet.streams.config import StreamConfig

ENV_PREFIX = "GPUFLEET_"


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "gpufleet"


class StoreSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    dsn: str = Field(default_factory=lambda: f"chdb://{default_data_dir() / 'chdb'}",
                     description="chdb:///<dir> (embedded engine) or http(s)://host:port (ClickHouse server)")
    database: str = Field("gpufleet", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    password: SecretStr | None = Field(None, description="ClickHouse password (a server DSN may carry one too)")
    batch_rows: int = Field(50_000, ge=1, le=10_000_000, description="rows buffered before a write")
    batch_seconds: float = Field(2.0, ge=0, le=3600, description="longest a row waits before a write")
    raw_retention_days: int = Field(14, ge=1, le=3650,
                                    description="days raw samples are kept, counted from when they were stored")
    cluster: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,100}$",
                                description="the sharded ClickHouse cluster the server at store.dsn belongs to (its "
                                            "remote_servers name, with deploy/clickhouse-cluster's schema applied): "
                                            "the writers send rows through each table's Distributed twin, <table>_all "
                                            "(none: a single server, or one shard with replicas)")

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, v: str) -> str:
        parse_dsn(v)
        return v


class KafkaSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers, host:port[,host:port]")
    telemetry_topic: str = Field("gpufleet.telemetry", pattern=r"^[A-Za-z0-9._-]{1,200}$")
    topic_prefix: str = Field("gpufleet", pattern=r"^[A-Za-z0-9._-]{1,100}$",
                              description="prefix of the other topics: <prefix>.alerts, <prefix>.billing, ...")
    partitions: int = Field(4, ge=1, le=10_000, description="partitions of the topics gpufleet creates")
    control_key: SecretStr | None = Field(
        None, description="shared secret that signs the end-of-stream marker (gpufleet publish --end); the workers act "
                          "on a marker signed with their own key only and dead-letter any other (none: they act on "
                          "none)")

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap(cls, v: str) -> str:
        for server in v.split(","):
            if not re.match(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$", server.strip()):
                raise ValueError(f"{server!r} is not host:port")
        return v


class CollectSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str = Field(default_factory=socket.gethostname, min_length=1, max_length=253,
                      description="node name in every message (the Kafka key)")
    pool: str | None = Field(None, max_length=253, description="capacity pool of this node")
    interval_s: float = Field(5.0, ge=0.1, le=3600, description="sampling interval")
    spool_dir: str = Field(default_factory=lambda: str(default_data_dir() / "spool"),
                           description="on-disk spool of messages not yet acknowledged by Kafka")
    spool_max_mb: float = Field(256.0, ge=0.1, le=1_000_000,
                                description="spool bound; beyond it the oldest are dropped")
    spool_fsync: bool = Field(True, description="fsync every message into the spool (SIGKILL-safe)")
    labels_file: str | None = Field(None, description="JSON file mapping GPU UUID to tenant and job")
    job_env_var: str | None = Field("SLURM_JOB_ID", description="environment variable of GPU processes naming the job")
    tenant_env_var: str | None = Field(None, description="environment variable of GPU processes naming the tenant")
    proc_root: str = Field("/proc", description="where /proc is mounted (a host mount in a container)")
    message_timeout_s: float = Field(60.0, ge=1, le=3600, description="librdkafka message.timeout.ms, in seconds")
    max_in_flight: int = Field(1000, ge=1, le=100_000, description="messages handed to librdkafka at once")
    flush_timeout_s: float = Field(10.0, ge=0, le=600, description="on SIGTERM, how long to try to send the spool")
    metrics_port: int = Field(0, ge=0, le=65535, description="Prometheus metrics port (0: off)")
    rediscover_s: float = Field(60.0, ge=1, le=86400,
                                description="enumerate the GPUs and MIG instances again this often (at once when a "
                                            "handle goes stale; while a GPU is lost NVML is reopened this often)")


class WorkerSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    app_id: str = Field("gpufleet", pattern=r"^[A-Za-z0-9._-]{1,100}$",
                        description="Faust app id: the consumer group and the prefix of its internal topics")
    web_port: int = Field(6066, ge=1, le=65535, description="port of /health and /metrics (one per worker on a host)")
    web_host: str = Field("0.0.0.0", description="address the web endpoints bind to")
    data_dir: str = Field(default_factory=lambda: str(default_data_dir() / "worker"),
                          description="Faust's data directory (one per worker on a host)")
    batch_max: int = Field(2000, ge=1, le=100_000, description="messages processed, then made durable, at a time")
    batch_within_s: float = Field(1.0, gt=0, le=60, description="longest a batch waits to fill")
    session_timeout_s: float = Field(10.0, ge=1, le=300,
                                     description="a worker silent this long is presumed dead and its partitions move")
    commit_interval_s: float = Field(1.0, gt=0, le=60, description="how often acknowledged offsets are committed")
    stuck_after_s: float = Field(
        900.0, gt=0, le=86400,
        description="a partition whose committed offset has not moved for this long while records wait past it is "
                    "stuck: /health answers 503 naming it (keep it above stream.silent_after_s: the last messages of "
                    "a node that stopped wait that long for the watermark)")
    max_restarts_per_minute: int = Field(3, ge=0, le=1000,
                                         description="an agent restarted more often than this in a minute makes "
                                                     "/health answer 503 naming it")


class NotifySettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    routes: str | None = Field(None, description="routing file (TOML): receivers, routes, inhibition")
    group_id: str = Field("gpufleet-notify", pattern=r"^[A-Za-z0-9._-]{1,100}$",
                          description="consumer group of the router processes on the alert topic")
    outbox_dir: str = Field(default_factory=lambda: str(default_data_dir() / "notify"),
                            description="the delivery log (SQLite), and the embedded mode's outbox")
    outbox_fsync: bool = Field(True, description="fsync each record of the delivery log (power-cut safe)")
    metrics_port: int = Field(0, ge=0, le=65535, description="Prometheus metrics port (0: off)")
    metrics_host: str = Field("0.0.0.0", description="address the metrics port binds to")
    timeout_s: float = Field(10.0, gt=0, le=300, description="HTTP timeout of one attempt")
    retry_for_s: float = Field(900.0, ge=0, le=7 * 86400,
                               description="how long a delivery is retried (5xx, timeouts, 429) before it is "
                                           "dead-lettered")
    probe_every_s: float = Field(60.0, gt=0, le=3600,
                                 description="while a receiver is down (a delivery retried past retry_for_s), one "
                                             "delivery this often is tried; the others are dead-lettered at once")
    finish_wait_s: float = Field(45.0, ge=0, le=86400,
                                 description="replay and demo --notify wait at most this long for deliveries at the "
                                             "end, then say what is still owed (kept in the outbox) and exit 1")
    backoff_s: float = Field(1.0, gt=0, le=3600, description="first wait before a retry; doubles each time")
    backoff_max_s: float = Field(60.0, gt=0, le=3600, description="longest wait between retries")
    max_owed: int = Field(10_000, ge=1, le=10_000_000,
                          description="deliveries owed at most before the router stops reading alerts")
    silence_refresh_s: float = Field(10.0, ge=0.1, le=3600, description="how often silences are read from the store")
    ledger_interval_s: float = Field(2.0, ge=0.1, le=3600,
                                     description="how often the delivery log is copied to alert_deliveries")
    session_timeout_s: float = Field(10.0, ge=1, le=300,
                                     description="a router silent this long is presumed dead and its partitions move")
    commit_interval_s: float = Field(1.0, gt=0, le=60, description="how often finished offsets are committed")
    retention_days: int = Field(30, ge=1, le=3650,
                                description="days the delivery log keeps incidents resolved and copied to the store")

    @field_validator("backoff_max_s")
    @classmethod
    def _backoff(cls, v: float, info) -> float:
        if v < info.data.get("backoff_s", 0):
            raise ValueError("must be at least notify.backoff_s")
        return v


class ForecastSettings(BaseModel):
    """The forecast process (``gpufleet forecast run``, and replay/demo at the end of their input)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_s: int = Field(600, ge=300, le=86400, description="step of the forecast points (a multiple of 300)")
    horizon_s: int = Field(2 * 86400, ge=300, le=14 * 86400, description="how far ahead each forecast reaches")
    every_s: int = Field(3600, ge=300, le=7 * 86400,
                         description="a forecast is made at every multiple of this, in event time")
    refit_every_s: int = Field(86400, ge=300, le=28 * 86400,
                               description="the model is chosen and fitted again at every multiple of this")
    history_s: int = Field(8 * 7 * 86400, ge=3600, le=366 * 86400, description="demand history a fit reads")
    validation_s: int = Field(28 * 86400, ge=3600, le=90 * 86400,
                              description="the most recent part of the history that chooses the model")
    min_history_s: int = Field(3 * 3600, ge=0, le=28 * 86400,
                               description="no forecast for a pool with less demand history than this")
    settle_s: int = Field(300, ge=0, le=86400,
                          description="a forecast at T waits until the store holds telemetry up to T + this")
    backfill_s: int = Field(86400, ge=0, le=90 * 86400,
                            description="forecasts missing further back than this are not made")
    poll_s: float = Field(60.0, gt=0, le=3600, description="wall-clock seconds between two looks at the store")
    rentals: bool = Field(True, description="the forecaster also weighs the rentals running at each forecast "
                                            "(their ages against each tenant's typical rental length)")

    @model_validator(mode="after")
    def _steps(self):
        if self.step_s % 300 or 86400 % self.step_s:
            raise ValueError(f"step_s {self.step_s} must be a multiple of 300 that divides a day")
        for name in ("every_s", "horizon_s", "refit_every_s"):
            if getattr(self, name) % self.step_s:
                raise ValueError(f"{name} {getattr(self, name)} is not a multiple of step_s {self.step_s}")
        return self


class ScaleSettings(Policy):
    """The scale policy: these fields for every pool, ``pools.<name>`` to change some for one pool."""

    pools: dict[str, dict[str, float | int | bool | None]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _pools(self):
        for name, values in self.pools.items():
            wrong = mistyped(Policy, values, f"pools.{name}")
            if wrong is not None:
                raise ValueError(wrong)
            try:
                self.policy(name)
            except ValidationError as err:
                e = err.errors(include_url=False)[0]
                where = ".".join([f"pools.{name}", *(str(p) for p in e["loc"])])
                raise ValueError(f"{where}: {e['msg'].removeprefix('Value error, ')}") from None
        return self

    def policy(self, pool: str) -> Policy:
        """The policy of ``pool``: the defaults with the pool's own values over them."""
        base = self.model_dump(exclude={"pools"})
        return Policy(**{**base, **self.pools.get(pool, {})})


class ServeSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field("127.0.0.1", description="address gpufleet serve binds to")
    port: int = Field(8080, ge=0, le=65535, description="port of gpufleet serve (0: any free port)")
    view_hours: float = Field(6.0, gt=0, le=24 * 31, description="hours the fleet page shows, up to the latest "
                                                                  "telemetry (heat map, alerts resolved, usage)")
    demand_hours: float = Field(48.0, gt=0, le=24 * 93, description="hours of demand history the fleet page shows")
    forecast_ahead_hours: float = Field(24.0, ge=0, le=24 * 14,
                                        description="hours of the latest forecast shown past the latest telemetry")
    refresh_s: int = Field(60, ge=0, le=86400, description="the fleet page reloads itself this often (0: never)")
    alert_days: float = Field(7.0, gt=0, le=366, description="incidents still firing are looked for this many days "
                                                             "back")
    manual_dir: str = Field("site", description="the built manual (make docs) served at /manual/, where alerts' "
                                                "runbook links point (stream.manual_url)")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", frozen=True,
                                      extra="forbid")

    store: StoreSettings = StoreSettings()
    stream: StreamConfig = StreamConfig()
    kafka: KafkaSettings = KafkaSettings()
    collect: CollectSettings = CollectSettings()
    worker: WorkerSettings = WorkerSettings()
    notify: NotifySettings = NotifySettings()
    forecast: ForecastSettings = ForecastSettings()
    scale: ScaleSettings = ScaleSettings()
    serve: ServeSettings = ServeSettings()
    billing: BillingConfig = BillingConfig()


class SettingsError(ValueError):
    """One line naming the bad setting and what is wrong with it."""


MAX_QUOTED = 200        # characters of a bad value an error quotes


def quoted(value) -> str:
    """A bad value as the user wrote it, cut to :data:`MAX_QUOTED` characters (the rest counted)."""
    text = value if isinstance(value, str) else written(value)
    if len(text) <= MAX_QUOTED:
        return written(value)
    return f"{written(text[:MAX_QUOTED])}... ({len(text) - MAX_QUOTED:,} more characters)"


_NUMBERS = (int, float, Decimal)


def _accepts(annotation, value) -> tuple[bool, typing.Any]:
    """Whether ``value`` has a type ``annotation`` means (lax where pydantic's lax mode is sound: a string may
    still spell a number, a date or a duration), and the annotation to look inside it with (None: nothing to
    look at). A boolean is never a number and only a string is a string."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _accepts(typing.get_args(annotation)[0], value)
    if origin in (typing.Union, types.UnionType):
        for member in typing.get_args(annotation):
            ok, inner = _accepts(member, value)
            if ok:
                return True, inner
        return False, None
    if annotation is type(None):
        return value is None, None
    if annotation is typing.Any or origin is typing.Literal or isinstance(annotation, typing.TypeVar):
        return True, None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return isinstance(value, dict), annotation
    if origin is dict or annotation is dict:
        return isinstance(value, dict), annotation
    if origin is list or annotation is list:
        return isinstance(value, list), annotation
    if annotation is bool:
        return isinstance(value, bool), None
    if annotation in (str, SecretStr, Path):
        return isinstance(value, str | SecretStr | Path), None
    if annotation in _NUMBERS:
        return isinstance(value, str | int | float | Decimal) and not isinstance(value, bool), None
    if annotation in (dt.date, dt.datetime):
        return isinstance(value, str | int | float | dt.date) and not isinstance(value, bool), None
    return True, None


def _kind(annotation) -> str:
    """What a setting takes, in words (for an error)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _kind(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        kinds = [_kind(a) for a in typing.get_args(annotation) if a is not type(None)]
        return " or ".join(dict.fromkeys(kinds))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) or origin is dict or annotation is dict:
        return "a table"
    if origin is list or annotation is list:
        return "a list"
    if annotation is bool:
        return "true or false"
    if annotation in (str, SecretStr, Path):
        return "a string"
    if annotation in _NUMBERS:
        return "a number"
    return "a date" if annotation in (dt.date, dt.datetime) else "a value of another type"


def _what(value) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return quoted(value)


def mistyped(model: type[BaseModel], data, path: str = "") -> str | None:
    """Why ``data`` (a section of settings as a file or flags give it) holds a value of the wrong type for
    ``model``, naming the setting, or None. pydantic's lax mode takes ``true`` for the number 1 and a table
    given where the environment also sets the section is merged away before it is validated: both are
    refused here, before anything is merged."""
    if not isinstance(data, dict):
        return f"{path or 'settings'}: {_what(data)} is not a table"
    converted = _converted(model)
    for name, field in model.model_fields.items():
        key = field.alias if field.alias and field.alias in data else name
        if key not in data or name in converted:
            continue
        where = f"{path}.{key}" if path else key
        wrong = _mistyped_value(field.annotation, data[key], where)
        if wrong is not None:
            return wrong
    return None


def _converted(model: type[BaseModel]) -> set[str]:
    """The fields of ``model`` whose own validator reads the input first (a date or a number as the user wrote it):
    that validator judges their type."""
    names = set()
    for decorator in model.__pydantic_decorators__.field_validators.values():
        if decorator.info.mode in ("before", "plain", "wrap"):
            names |= set(model.model_fields) if "*" in decorator.info.fields else set(decorator.info.fields)
    for name, field in model.model_fields.items():
        if any(type(m).__name__ in ("BeforeValidator", "PlainValidator", "WrapValidator") for m in field.metadata):
            names.add(name)
    return names


def _mistyped_value(annotation, value, where: str) -> str | None:
    ok, inner = _accepts(annotation, value)
    if not ok:
        return f"{where}: {_what(value)} is not {_kind(annotation)}"
    if inner is None:
        return None
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return mistyped(inner, value, where)
    args = typing.get_args(inner)
    if isinstance(value, dict) and len(args) == 2:
        for k, v in value.items():
            wrong = _mistyped_value(args[1], v, f"{where}.{k}")
            if wrong is not None:
                return wrong
    if isinstance(value, list) and len(args) == 1:
        for i, v in enumerate(value):
            wrong = _mistyped_value(args[0], v, f"{where}[{i}]")
            if wrong is not None:
                return wrong
    return None


def _describe(err: ValidationError, config_file: str | None) -> str:
    e = err.errors(include_url=False)[0]
    path = ".".join(str(p) for p in e["loc"] if p != "__root__")
    env = ENV_PREFIX + "__".join(str(p) for p in e["loc"]).upper()
    where = f" (flag, {env}" + (f" or {config_file})" if config_file else ")")
    msg = e["msg"].removeprefix("Value error, ")
    value = e.get("input")
    if isinstance(value, str | int | float | Decimal) and not isinstance(value, bool) and e["type"] != "value_error":
        msg = f"{quoted(value)}: {msg[:1].lower()}{msg[1:]}"     # the value as the user wrote it, then what is wrong
    return f"setting {path}{where}: {_cut(msg)}"


def _cut(msg: str) -> str:
    """A message that quotes a long value (pydantic's own, a parser's) cut to a line a person reads."""
    return msg if len(msg) <= 2 * MAX_QUOTED else f"{msg[:2 * MAX_QUOTED]}... ({len(msg) - 2 * MAX_QUOTED:,} more)"


def load_settings(config_file: str | None = None, **overrides) -> Settings:
    """Build the settings; ``overrides`` are nested dicts from command-line flags."""
    config_file = config_file or os.environ.get(ENV_PREFIX + "CONFIG") or None

    from_file: dict = {}
    if config_file:
        try:
            from_file = read_toml(config_file)
        except FileError as err:
            raise SettingsError(f"setting --config: {err}") from None

    for source, data in (("--config " + str(config_file), from_file), ("flag", overrides)):
        wrong = mistyped(Settings, data)
        if wrong is not None:
            raise SettingsError(f"setting {wrong} ({source})")

    class Configured(Settings):
        @classmethod
        def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                       file_secret_settings):
            sources = [init_settings, env_settings]
            if config_file:
                sources.append(InitSettingsSource(settings_cls, init_kwargs=from_file))
            return tuple(sources)

    try:
        return Configured(**overrides)
    except ValidationError as err:
        raise SettingsError(_describe(err, config_file)) from None
    except ValueError as err:   # a variable that is not the JSON its setting takes (pydantic-settings says which)
        raise SettingsError(_cut(f"setting from the environment ({ENV_PREFIX}*): {err}")) from None
