"""One typed configuration for every job, command and DAG.

Precedence, lowest first: the defaults below (they work on a laptop), a YAML file
(``--config`` or ``SIGFLOW_CONFIG``), ``SIGFLOW_<NAME>`` environment variables, then explicit
overrides from the command line. ``KAFKA_BOOTSTRAP_SERVERS`` is honoured as the conventional
name for ``kafka_bootstrap_servers``. Paths and URIs are built here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from spark_jobs.errors import ConfigError

ENV_PREFIX = "SIGFLOW_"
# Process-level variables that are not settings: the config file and fault-test crash points.
RESERVED_ENV = {"SIGFLOW_CONFIG", "SIGFLOW_FAILPOINTS"}
CHOICES = {
    "engine": ("auto", "jvm", "python"),
    "multiple_watermark_policy": ("min", "max"),
}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?)\s*$")
_JVM_MEMORY = re.compile(r"^\d+[kmgt]$", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str, name: str = "duration") -> float:
    """'10 minutes', '10m', '30s' -> seconds. Raises ConfigError naming the setting."""
    match = _DURATION.match(str(text))
    if not match:
        raise ConfigError(
            f"setting {name}={text!r} is not a duration",
            f"write it like '10 minutes', '30 seconds' or '5m' (env {ENV_PREFIX}{name.upper()})",
        )
    unit = match.group(2)
    key = "ms" if unit.startswith("mil") or unit == "ms" else unit[0]
    return int(match.group(1)) * _UNIT_SECONDS[key]


def spark_interval(text: str, name: str = "duration") -> str:
    """A duration in the form Spark's withWatermark/window/trigger accept."""
    return Duration(text, name).spark


class Duration(str):
    """A duration setting as written ('10 minutes', '30s'), parsed once when the settings
    load: ``.seconds`` and ``.spark`` (the form Spark's watermarks, windows and triggers
    take). Still the text it was written as, for the checkpoint record and the docs."""

    seconds: float

    def __new__(cls, text: str, name: str = "duration") -> "Duration":
        seconds = duration_seconds(text, name)  # raises ConfigError naming the setting
        value = super().__new__(cls, str(text))
        value.seconds = seconds
        return value

    @property
    def spark(self) -> str:
        if self.seconds < 1:
            return f"{self.ms} milliseconds"
        return f"{int(self.seconds)} seconds"

    @property
    def ms(self) -> int:
        return int(self.seconds * 1000)


@dataclass(frozen=True)
class Settings:
    # Where everything local lives; object-store URIs are accepted for the two roots.
    data_dir: str = "./data"
    delta_root: str = ""  # default: <data_dir>/delta
    checkpoint_root: str = ""  # default: <data_dir>/checkpoints

    # Kafka. Empty bootstrap servers means: the embedded broker recorded under data_dir.
    kafka_bootstrap_servers: str = ""
    events_topic: str = "device-events"
    alerts_topic: str = "device-alerts"
    topic_partitions: int = 3
    topic_retention_ms: int = 7 * 24 * 3600 * 1000
    starting_offsets: str = "earliest"
    # Records per micro-batch (0: no limit). Bounded by default: the embedded path collects
    # each batch to the driver for delta-rs, and a 1,000,000-record backlog read as one
    # batch ran a 1 GiB driver out of memory (measured, docs/streaming-facts.md).
    max_offsets_per_trigger: int = 100_000
    fail_on_data_loss: bool = True
    kafka_read_timeout_s: float = 30.0
    # Embedded Apache Kafka: its client port (0 picks a free one, kept across restarts),
    # its JVM heap and log level (the log is <data_dir>/broker/kafka.log).
    broker_port: int = 19092
    broker_heap: str = "512m"
    broker_log_level: str = "INFO"
    # How long a running job waits for an unreachable Kafka to return (retrying with
    # backoff) before it stops; 0 stops at the first failure.
    broker_outage_budget: Duration = Duration("5 minutes")

    # Engine: jvm = Spark's Kafka source and delta-spark (the pinned JARs, see
    # infra/jars/); python = the Python Kafka source and delta-rs (a fallback); auto = jvm
    # when its classes load. jars_dir: where `sigflow jars fetch` put them.
    engine: str = "auto"
    jars_dir: str = ""  # default: <python environment>/share/sigflow/jars
    spark_master: str = "local[2]"
    # JVM heap of the driver Spark starts for a sigflow command (under spark-submit its
    # --driver-memory wins); the embedded path's batches pass through it on their way to delta-rs.
    spark_driver_memory: str = "2g"
    shuffle_partitions: int = 4
    spark_ui: bool = False
    spark_log_level: str = "ERROR"

    # Streaming semantics (docs/semantics.md, docs/jobs/*.md).
    trigger_interval: Duration = Duration("10 seconds")
    watermark_delay: Duration = Duration("10 minutes")
    # An event or alert time more than this after its Kafka timestamp is quarantined: one
    # device clock ahead would otherwise move the watermark of every job (docs/semantics.md).
    max_clock_ahead: Duration = Duration("1 minute")
    multiple_watermark_policy: str = "min"
    tumbling_window: Duration = Duration("5 minutes")
    sliding_window: Duration = Duration("10 minutes")
    sliding_step: Duration = Duration("5 minutes")
    fleet_window: Duration = Duration("15 minutes")
    session_gap: Duration = Duration("30 minutes")
    alert_watermark_delay: Duration = Duration("10 minutes")
    alert_context: Duration = Duration("5 minutes")  # alert-join: events this long before an alert

    # Data quality (sigflow quality): the device signal range, and how old the newest row of
    # a table may be before its freshness check warns.
    signal_min: float = -1000.0
    signal_max: float = 1000.0
    quality_freshness: Duration = Duration("2 hours")
    quality_dir: str = ""  # default: <data_dir>/quality (GX project and Data Docs HTML)

    # Maintenance (sigflow maintenance, daily DAG). Rewinds can reach back only as far as
    # vacuum_retention: older table versions lose their files.
    vacuum_retention: Duration = Duration("7 days")
    quarantine_retention: Duration = Duration("30 days")
    checkpoint_batches_retained: int = 100

    # Airflow standalone of the embedded mode (`make airflow`), on 127.0.0.1 only.
    airflow_port: int = 8080
    airflow_dir: str = ""  # default: <data_dir>/airflow (AIRFLOW_HOME: SQLite, logs, password)

    source_file: str = field(default="", compare=False)  # which YAML file was read, if any

    # ---- derived locations -------------------------------------------------------------
    @property
    def delta_root_uri(self) -> str:
        return self.delta_root or str(Path(self.data_dir) / "delta")

    @property
    def checkpoint_root_uri(self) -> str:
        return self.checkpoint_root or str(Path(self.data_dir) / "checkpoints")

    def table_uri(self, table: str) -> str:
        return _join(self.delta_root_uri, table)

    def checkpoint_uri(self, job: str) -> str:
        return _join(self.checkpoint_root_uri, job)

    @property
    def quality_path(self) -> Path:
        return Path(self.quality_dir or Path(self.data_dir) / "quality")

    @property
    def airflow_home(self) -> Path:
        return Path(self.airflow_dir or Path(self.data_dir) / "airflow")

    @property
    def jars_path(self) -> Path:
        from spark_jobs.runtime.jars import default_dir

        return Path(self.jars_dir) if self.jars_dir else default_dir()

    def progress_file(self, job: str) -> Path:
        """The job's per-batch JSON progress lines (docs/observability.md)."""
        return Path(self.data_dir) / "progress" / f"{job}.jsonl"

    @property
    def broker_dir(self) -> Path:
        return Path(self.data_dir) / "broker"

    def replace(self, **changes: Any) -> "Settings":
        return load_settings(env={}, overrides={**_as_dict(self), **changes})


def _join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


def _as_dict(settings: Settings) -> dict[str, Any]:
    return {f.name: getattr(settings, f.name) for f in fields(settings)}


def _coerce(name: str, kind: Any, raw: Any) -> Any:
    kind = {"int": int, "float": float, "bool": bool, "str": str, "Duration": Duration}.get(kind, kind)
    if kind is Duration:
        return Duration(raw, name)
    try:
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        return kind(raw)
    except (TypeError, ValueError):
        raise ConfigError(
            f"setting {name}={raw!r} is not a valid {kind.__name__}",
            f"fix it in the config file or env {ENV_PREFIX}{name.upper()}",
        ) from None


def _validate(s: Settings) -> None:
    for name, allowed in CHOICES.items():
        if getattr(s, name) not in allowed:
            raise ConfigError(
                f"setting {name}={getattr(s, name)!r} is not one of {', '.join(allowed)}",
                f"env {ENV_PREFIX}{name.upper()}",
            )
    for name in ("topic_partitions", "shuffle_partitions", "checkpoint_batches_retained"):
        if getattr(s, name) < 1:
            raise ConfigError(f"setting {name} must be at least 1, got {getattr(s, name)}")
    for name in ("spark_driver_memory", "broker_heap"):
        if not _JVM_MEMORY.match(getattr(s, name)):
            raise ConfigError(
                f"setting {name}={getattr(s, name)!r} is not a JVM memory size",
                f"write it as Java does: 2g, 512m (env {ENV_PREFIX}{name.upper()})",
            )
    if s.max_offsets_per_trigger < 0:
        raise ConfigError("setting max_offsets_per_trigger must be 0 (no limit) or positive")
    if s.starting_offsets not in ("earliest", "latest") and not s.starting_offsets.lstrip().startswith("{"):
        raise ConfigError(
            f"setting starting_offsets={s.starting_offsets!r} is not earliest, latest or a JSON object",
            'per-partition form: {"device-events": {"0": 42, "1": -2}} (-2 earliest, -1 latest)',
        )
    if s.signal_min >= s.signal_max:
        raise ConfigError("setting signal_min must be below signal_max")


def load_settings(
    config_file: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build the settings once; raise ConfigError with the offending name on any mistake."""
    env = os.environ if env is None else env
    kinds = {f.name: f.type for f in fields(Settings)}
    values: dict[str, Any] = {}

    config_file = config_file or env.get(f"{ENV_PREFIX}CONFIG")
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist", "check --config / SIGFLOW_CONFIG")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of setting: value")
        values.update(loaded)
        values["source_file"] = str(path)

    if env.get("KAFKA_BOOTSTRAP_SERVERS"):
        values["kafka_bootstrap_servers"] = env["KAFKA_BOOTSTRAP_SERVERS"]
    for key, raw in env.items():
        if key.startswith(ENV_PREFIX) and key not in RESERVED_ENV:
            values[key[len(ENV_PREFIX):].lower()] = raw
    values.update(overrides or {})

    unknown = sorted(set(values) - set(kinds))
    if unknown:
        raise ConfigError(
            f"unknown setting(s): {', '.join(unknown)}",
            f"valid settings: {', '.join(k for k in kinds if k != 'source_file')}",
        )
    typed = {name: _coerce(name, kinds[name], raw) for name, raw in values.items()}
    settings = dataclasses.replace(Settings(), **typed)
    _validate(settings)
    return settings
