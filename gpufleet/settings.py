"""gpufleet's settings: one frozen object per process, validated at start.

Sources, strongest first: command-line flags, environment variables
(``GPUFLEET_<SECTION>__<NAME>``, e.g. ``GPUFLEET_STORE__DSN``), a TOML file
(``--config`` or ``GPUFLEET_CONFIG``), then the defaults below. A bad value
raises :class:`SettingsError` with one line naming the setting.
"""
from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, TomlConfigSettingsSource

from gpufleet.sql import parse_dsn
from gpufleet.streams.billing.prices import BillingConfig
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
                              description="prefix of the other topics: <prefix>.telemetry.dlq, <prefix>.alerts, ...")
    partitions: int = Field(4, ge=1, le=10_000, description="partitions of the topics gpufleet creates")

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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", frozen=True,
                                      extra="forbid")

    store: StoreSettings = StoreSettings()
    stream: StreamConfig = StreamConfig()
    kafka: KafkaSettings = KafkaSettings()
    collect: CollectSettings = CollectSettings()
    worker: WorkerSettings = WorkerSettings()
    billing: BillingConfig = BillingConfig()


class SettingsError(ValueError):
    """One line naming the bad setting and what is wrong with it."""


def _describe(err: ValidationError, config_file: str | None) -> str:
    e = err.errors(include_url=False)[0]
    path = ".".join(str(p) for p in e["loc"] if p != "__root__")
    env = ENV_PREFIX + "__".join(str(p) for p in e["loc"]).upper()
    where = f" (flag, {env}" + (f" or {config_file})" if config_file else ")")
    msg = e["msg"].removeprefix("Value error, ")
    return f"setting {path}{where}: {msg}"


def load_settings(config_file: str | None = None, **overrides) -> Settings:
    """Build the settings; ``overrides`` are nested dicts from command-line flags."""
    config_file = config_file or os.environ.get(ENV_PREFIX + "CONFIG") or None
    if config_file and not os.path.isfile(config_file):
        raise SettingsError(f"setting --config: no such file {config_file!r}")

    class Configured(Settings):
        @classmethod
        def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                       file_secret_settings):
            sources = [init_settings, env_settings]
            if config_file:
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=config_file))
            return tuple(sources)

    try:
        return Configured(**overrides)
    except ValidationError as err:
        raise SettingsError(_describe(err, config_file)) from None
    except ValueError as err:   # e.g. a TOML syntax error
        raise SettingsError(f"setting --config {config_file}: {err}") from None
