"""One typed configuration for every job, command and DAG, in groups: ``kafka`` (how to reach
it, its topics' shape), ``streaming`` (what a job reads and computes by: all a job is given),
``spark`` (where the JVMs run), ``operations`` (leases, approvals, quality, maintenance,
metrics) and ``local`` (the one-machine stand-ins), beside where things live.

Precedence, lowest first: the defaults below (they work on a laptop), a YAML file
(``--config`` or ``SIGFLOW_CONFIG``), ``SIGFLOW_<NAME>`` environment variables, then explicit
overrides from the command line. ``KAFKA_BOOTSTRAP_SERVERS`` is honoured as the conventional
name for ``kafka_bootstrap_servers``. Paths and URIs are built here and nowhere else.

The model is a pydantic-settings ``BaseSettings``: pydantic types and checks every value once,
when the settings load, and ``settings_customise_sources`` states the precedence. Any mistake
becomes one ``ConfigError`` naming the setting, its environment variable and the allowed form.
"""

from __future__ import annotations

import os
import re
import sys
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from spark_jobs.errors import ConfigError

ENV_PREFIX = "SIGFLOW_"
# Process-level variables that are not settings: the config file and fault-test crash points.
RESERVED_ENV = {"SIGFLOW_CONFIG", "SIGFLOW_FAILPOINTS"}
# Never echoed back, not even in an error about their own value.
SECRET_SETTINGS = {"kafka_password"}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?)\s*$")
_DURATION_FORM = "write it like '10 minutes', '30 seconds' or '5m'"
_JVM_MEMORY = re.compile(r"^\d+[kmgt]$", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str, name: str = "duration") -> float:
    """'10 minutes', '10m', '30s' -> seconds. Raises ConfigError naming the setting."""
    match = _DURATION.match(str(text))
    if not match:
        raise ConfigError(
            f"setting {name}={text!r} is not a duration",
            f"{_DURATION_FORM} (env {ENV_PREFIX}{name.upper()})",
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


# ---- setting types: each check states the allowed form, and the loader names the setting --
def _as_duration(value: Any) -> Duration:
    if isinstance(value, Duration):
        return value
    if not _DURATION.match(str(value)):
        raise ValueError(f"not a duration; {_DURATION_FORM}")
    return Duration(str(value))


def _jvm_memory(value: str) -> str:
    if not _JVM_MEMORY.match(value):
        raise ValueError("not a JVM memory size; write it as Java does: 2g, 512m")
    return value


def _java_options(value: str) -> str:
    # Spark's own rules, as it applies them to the whole option string (SparkConf.validateSettings,
    # the launcher's SparkSubmitCommandBuilder): anything containing -Dspark or Xmx is refused
    # only at the session's start, with a Java and a Python traceback
    options = value.split()
    if spark_properties := [option for option in options if "-Dspark" in option]:
        raise ValueError(f"{spark_properties[0]} holds -Dspark, which Spark refuses among a JVM's options; set Spark "
                         "properties in spark-defaults.conf (in SPARK_CONF_DIR) or with spark-submit --conf")
    if heap := [option for option in options if "Xmx" in option]:
        raise ValueError(f"{heap[0]} sets the heap, which Spark refuses among a JVM's options; set "
                         "spark_driver_memory, spark_executor_memory or cluster_worker_memory instead")
    if not_options := [option for option in options if not option.startswith("-")]:
        raise ValueError(f"not JVM options: {', '.join(map(repr, not_options))}; write them as java takes them, "
                         "separated by spaces: -Xss4m -XX:+UseSerialGC")
    return " ".join(options)


def _starting_offsets(value: str) -> str:
    if value not in ("earliest", "latest") and not value.lstrip().startswith("{"):
        raise ValueError(
            "not earliest, latest or a JSON object; per-partition form: "
            '{"device-events": {"0": 42, "1": -2}} (-2 earliest, -1 latest)'
        )
    return value


def _http_url(value: str) -> str:
    if value and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
        raise ValueError("not an http(s) URL of an OpenLineage API, such as http://marquez:5000")
    return value.rstrip("/")


def _comma_list(pattern: str, what: str, example: str) -> Callable[[str], str]:
    """A validator of a comma-separated list whose items each match ``pattern``."""
    item = re.compile(pattern)

    def check(value: str) -> str:
        items = [part.strip() for part in value.split(",") if part.strip()]
        bad = [one for one in items if not item.fullmatch(one)]
        if bad:
            raise ValueError(f"not {what}: {', '.join(map(repr, bad))}; write them separated by commas: {example}")
        return ",".join(items)

    return check


DurationSetting = Annotated[Duration, PlainValidator(_as_duration)]
RestartApprovers = Annotated[str, AfterValidator(_comma_list(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}", "Airflow user ids",
                                                                  "alice,bob"))]
LineageUrl = Annotated[str, AfterValidator(_http_url)]
Words = Annotated[str, AfterValidator(_comma_list(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", "plain words", "critical,warning"))]
JvmMemory = Annotated[str, AfterValidator(_jvm_memory)]
JavaOptions = Annotated[str, AfterValidator(_java_options)]
StartingOffsets = Annotated[str, AfterValidator(_starting_offsets)]
AtLeastOne = Annotated[int, Field(ge=1)]


# C1 alone fills the 48 MB code cache the JVM reserves for it within a minute of Spark's
# work; the JVM then stops compiling, and a method handle that needs the cache fails the
# task that asked for it (measured: "Out of space in CodeCache", docs/streaming-facts.md).
# 240 MB is what the tiered JIT reserves.
QUICK_JIT_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


class _Group(BaseModel):
    """A group of settings. Each field also answers to its flat name (``validation_alias``):
    the ``SIGFLOW_<NAME>`` variable and YAML key users set, e.g. ``kafka_username`` for
    ``kafka.username``."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, validate_default=True)


def _flat(default: Any, name: str) -> Any:
    return Field(default, validation_alias=name)


class KafkaSettings(_Group):
    """How to reach Kafka and what its topics are like: a production cluster differs here."""

    # Empty: the embedded broker recorded under data_dir.
    bootstrap_servers: str = _flat("", "kafka_bootstrap_servers")
    topic_partitions: AtLeastOne = 3
    topic_retention_ms: int = 7 * 24 * 3600 * 1000
    # Copies of each partition, and how many must hold a record before a producer's acks=all
    # is answered: 1/1 for the one embedded broker, 3/2 on a production cluster.
    topic_replication_factor: AtLeastOne = 1
    topic_min_insync_replicas: AtLeastOne = 1
    starting_offsets: StartingOffsets = "earliest"
    # Records per micro-batch (0: no limit). Bounded by default: a batch's size sets its
    # memory and time, and a batch that failed keeps the offsets it was planned with, so
    # lowering the limit afterwards does not split it (docs/streaming-facts.md). 250,000
    # leaves headroom over a 100,000-event backlog and its alerts, which 100,000 cut into a
    # big batch and a tiny one of fixed cost.
    max_offsets_per_trigger: Annotated[int, Field(ge=0)] = 250_000
    fail_on_data_loss: bool = True
    # A job refuses a source topic stamped with the producer's clock (CreateTime): a producer
    # clock ahead would carry event time past max_clock_ahead and move every watermark.
    # True runs on such a topic anyway, saying so at the start of each run.
    accept_producer_time: bool = _flat(False, "kafka_accept_producer_time")
    read_timeout_s: float = _flat(30.0, "kafka_read_timeout_s")
    # How long a running job waits for an unreachable Kafka to return (retrying with
    # backoff) before it stops; 0 stops at the first failure.
    outage_budget: DurationSetting = _flat("5 minutes", "broker_outage_budget")
    # Security (docs/security.md). SASL_* needs a username and a password from
    # SIGFLOW_KAFKA_PASSWORD or kafka_password_file, never from a config file. ca_file: the
    # PEM CA of the brokers' certificates (default: the system's; the embedded broker's own
    # CA when it serves). The embedded broker listens with this protocol too.
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = _flat(
        "PLAINTEXT", "kafka_security_protocol")
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = _flat("SCRAM-SHA-512", "kafka_sasl_mechanism")
    username: str = _flat("", "kafka_username")
    password: SecretStr = _flat(SecretStr(""), "kafka_password")
    password_file: str = _flat("", "kafka_password_file")
    ca_file: str = _flat("", "kafka_ca_file")

    @model_validator(mode="after")
    def _credentials(self) -> "KafkaSettings":
        if not self.security_protocol.startswith("SASL_"):
            return self
        if not self.username:
            raise ValueError(f"kafka_security_protocol={self.security_protocol} needs kafka_username "
                             f"(env {ENV_PREFIX}KAFKA_USERNAME)")
        if bool(self.password.get_secret_value()) == bool(self.password_file):
            raise ValueError(f"kafka_security_protocol={self.security_protocol} needs exactly one of "
                             f"{ENV_PREFIX}KAFKA_PASSWORD or kafka_password_file (a file holding the password)")
        if self.password_file and not os.access(self.password_file, os.R_OK):
            raise ValueError(f"kafka_password_file {self.password_file} is not a readable file")
        return self

    @property
    def secret(self) -> SecretStr:
        """The password, from the environment or read from password_file."""
        if self.password_file:
            return SecretStr(Path(self.password_file).read_text().strip("\r\n"))
        return self.password


class StreamingSettings(_Group):
    """What a job reads and the rules it computes by (docs/semantics.md, docs/jobs/*.md):
    all a job is given."""

    events_topic: str = "device-events"
    alerts_topic: str = "device-alerts"
    trigger_interval: DurationSetting = "10 seconds"
    watermark_delay: DurationSetting = "10 minutes"
    # An event or alert time more than this after its Kafka timestamp is quarantined: one
    # device clock ahead would otherwise move the watermark of every job (docs/semantics.md).
    max_clock_ahead: DurationSetting = "1 minute"
    multiple_watermark_policy: Literal["min", "max"] = "min"
    tumbling_window: DurationSetting = "5 minutes"
    sliding_window: DurationSetting = "10 minutes"
    sliding_step: DurationSetting = "5 minutes"
    fleet_window: DurationSetting = "15 minutes"
    session_gap: DurationSetting = "30 minutes"
    alert_watermark_delay: DurationSetting = "10 minutes"
    # sigflow reconcile counts a late event in the results it belongs to when it
    # arrived (the watermark that dropped it) no more than this after the end of its tumbling
    # window; later ones are recorded as beyond the horizon, not counted (docs/semantics.md)
    late_horizon: DurationSetting = "7 days"
    alert_context: DurationSetting = "5 minutes"  # alert-join: events this long before an alert
    # alert-fastpath: where critical alerts go, what makes one critical (a severity listed,
    # or a kind listed whatever its severity), and how often its real-time query commits
    # its offsets when it runs continuously. Not a latency (records flow as they arrive),
    # but each commit holds forwarding up for up to a second here (docs/jobs/alert-fastpath.md)
    critical_alerts_topic: str = "device-alerts-critical"
    critical_severities: Words = "critical"
    critical_kinds: Words = ""
    real_time_checkpoint_interval: DurationSetting = "1 minute"


class SparkSettings(_Group):
    """Where and how the jobs' JVMs run."""

    # local[N] in this process's JVM, or a cluster's master URL (spark://..., e.g. the one
    # `sigflow cluster start` runs). Executors then read Kafka and write Delta, so the data
    # and checkpoint roots must be paths every worker reaches.
    master: str = _flat("local[2]", "spark_master")
    # The file holding a standalone cluster's shared secret (spark.authenticate): a driver
    # without it cannot register. Empty: the loopback cluster's own under data_dir when
    # master is on 127.0.0.1, else none (a cluster's spark-defaults.conf may hold it).
    auth_secret_file: str = _flat("", "spark_auth_secret_file")
    executor_memory: JvmMemory = _flat("1g", "spark_executor_memory")  # per executor, on a cluster
    # JVM heap of the driver Spark starts for a sigflow command (under spark-submit its
    # --driver-memory wins); in local mode the executors' tasks run in it too.
    driver_memory: JvmMemory = _flat("2g", "spark_driver_memory")
    # Extra options for every JVM sigflow starts on this machine: Spark's driver and
    # executors, the embedded broker, the local cluster's daemons.
    jvm_options: JavaOptions = ""
    # Which compilers those JVMs use: "tiered" (the JVM's default: C1, then C2 for hot code)
    # for drivers that run for hours; "quick" (C1 only, QUICK_JIT_OPTIONS) for runs of
    # minutes, such as make run's pipeline, whose JVM spent a third of its CPU in C2.
    jit: Literal["tiered", "quick"] = "tiered"
    # A driver this machine starts maps the class archive `sigflow jars archive` wrote for
    # its Java and pyspark (make install), when there is one: a third less CPU per driver
    # (runtime/class_archive.py). Off: every driver loads its classes from the JARs.
    class_data_sharing: bool = True
    # The state of every stateful operator is split into this many partitions, each loaded and
    # committed every batch: the embedded default's 2 cores (make run's jobs took 105 s at 2
    # against 120 to 128 s at 4, docs/streaming-facts.md). A cluster sets its cores' count.
    shuffle_partitions: AtLeastOne = 2
    # A batch's table writes run one task per this many of its Kafka records: a small batch
    # writes each table in one task and one file (each extra task of a small write cost about
    # 30 ms of deserialising alone, measured), a large one still spreads over the executors.
    records_per_write_task: AtLeastOne = 25_000
    # The driver's web UI, which also serves Spark's metrics in Prometheus's format
    # (/metrics/prometheus/: each query's rates, latency and watermark; docs/observability.md).
    ui: bool = _flat(False, "spark_ui")
    ui_port: int = _flat(4040, "spark_ui_port")  # Spark takes the next one up when it is in use
    log_level: str = _flat("ERROR", "spark_log_level")

    @property
    def java_options(self) -> str:
        """The options every JVM sigflow starts gets: the JIT's, then ``jvm_options``."""
        return " ".join(filter(None, (QUICK_JIT_OPTIONS if self.jit == "quick" else "", self.jvm_options)))

    @property
    def on_this_machine(self) -> bool:
        """Whether the driver's executors all run here (embedded, or a loopback cluster), so
        it and its UI can bind to loopback (SPARK_LOCAL_IP, read as the driver's JVM starts)."""
        return self.master.startswith("local") or "//127.0.0.1:" in self.master

    def master_with_slots(self, slots: int) -> str:
        """The master, a ``local[N]`` one given at least ``slots`` threads (a real-time query
        holds a task slot per Kafka partition for as long as it runs)."""
        threads = re.fullmatch(r"local\[(\d+)\]", self.master)
        return f"local[{slots}]" if threads and int(threads.group(1)) < slots else self.master


LEASE_TTL_FLOOR_S = 5.0


class OperationsSettings(_Group):
    """What the on-call commands and the scheduled DAGs do: leases, approvals, quality,
    maintenance, the metrics exporter."""

    # A run holds its checkpoint's lease while it runs and renews it every quarter of this;
    # a holder that stops renewing loses it after this long (one on another host 10 s later:
    # the clocks of two hosts may differ). At least LEASE_TTL_FLOOR: shorter, the heartbeat
    # spins and a garbage-collection pause loses a healthy run its lease.
    lease_ttl: DurationSetting = "2 minutes"
    # Who may approve a sigflow_restart plan: Airflow user ids, comma-separated. Set, only
    # they may answer; unset, any user Airflow lets answer (edit permission on the DAG).
    restart_approvers: RestartApprovers = ""
    # Whether the user who triggered a restart may approve it too. Off (four eyes), the
    # answer must come from another user, and a run whose requester is unknown is refused.
    restart_self_approval: bool = False
    # Data quality (sigflow quality): the device signal range, and how old the newest row of
    # a table may be before its freshness check warns.
    signal_min: float = -1000.0
    signal_max: float = 1000.0
    quality_freshness: DurationSetting = "2 hours"
    # How many rows a quality run holds at once: its memory follows this, not the tables.
    quality_chunk_rows: AtLeastOne = 200_000
    # Maintenance (sigflow maintenance, daily DAG). Rewinds can reach back only as far as
    # vacuum_retention: older table versions lose their files. Maintenance refuses a
    # retention under vacuum_retention_floor: a batch or a reader in flight still reads
    # the versions of the last minutes, and a rewind the ones before that.
    vacuum_retention: DurationSetting = "7 days"
    vacuum_retention_floor: DurationSetting = "1 hour"
    quarantine_retention: DurationSetting = "30 days"
    # table_status gets a row per table per batch; maintenance deletes those older than this,
    # each table's newest kept
    table_status_retention: DurationSetting = "30 days"
    checkpoint_batches_retained: AtLeastOne = 100
    # `sigflow metrics serve`: the Prometheus exporter of what Spark does not know (verdicts,
    # records behind in Kafka, late and quarantined counts); loopback unless set otherwise.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9466
    # OpenLineage: run events go to files under lineage_dir, and to this HTTP endpoint too
    # when set (a Marquez or any OpenLineage API: http(s)://host:port).
    lineage_url: LineageUrl = ""
    # OpenLineage's own Spark listener in every job's session too: the engine's view of each
    # query (needs `sigflow jars fetch openlineage`; docs/lineage.md).
    lineage_spark_listener: bool = False

    @property
    def approvers(self) -> list[str]:
        return self.restart_approvers.split(",") if self.restart_approvers else []

    @model_validator(mode="after")
    def _lease_ttl_floor(self) -> "OperationsSettings":
        if self.lease_ttl.seconds < LEASE_TTL_FLOOR_S:
            raise ValueError(f"lease_ttl ({self.lease_ttl}) must be at least {LEASE_TTL_FLOOR_S:g} seconds: "
                             "the lease is renewed every quarter of it")
        return self

    @model_validator(mode="after")
    def _signal_range(self) -> "OperationsSettings":
        if self.signal_min >= self.signal_max:
            raise ValueError(f"signal_min ({self.signal_min}) must be below signal_max ({self.signal_max})")
        return self


class LocalSettings(_Group):
    """The one-machine stand-ins (spark_jobs/local/), all on 127.0.0.1; production sets none."""

    # Embedded Apache Kafka: its client port (0 picks a free one, kept across restarts),
    # its JVM heap and log level (the log is <data_dir>/broker/kafka.log).
    broker_port: int = 19092
    broker_heap: JvmMemory = "512m"
    broker_log_level: str = "INFO"
    # The Spark standalone cluster of `sigflow cluster start`: the master's port and web UI
    # port (0 picks free ones), and its workers, each with one core and this memory.
    cluster_port: int = 7077
    cluster_ui_port: int = 8090
    cluster_workers: AtLeastOne = 2
    cluster_worker_memory: JvmMemory = "1g"
    # PostgreSQL for Airflow's metadata, as in production (spark_jobs/local/postgres.py): its
    # port, 0 picks a free one (kept with its data under <data_dir>/postgres).
    postgres_port: int = 0
    # Airflow of the embedded mode (`make airflow`).
    airflow_port: int = 8080


GROUPS: dict[str, type[_Group]] = {
    "kafka": KafkaSettings, "streaming": StreamingSettings, "spark": SparkSettings,
    "operations": OperationsSettings, "local": LocalSettings,
}
# Every grouped setting's flat name (its SIGFLOW_<NAME> and YAML key) -> (group, field).
GROUPED: dict[str, tuple[str, str]] = {
    (info.validation_alias if isinstance(info.validation_alias, str) else field): (group, field)
    for group, model in GROUPS.items() for field, info in model.model_fields.items()
}


class Settings(BaseSettings):
    """Where things live, then the groups. Each setting keeps one flat name for users
    (``SIGFLOW_KAFKA_USERNAME``, YAML ``kafka_username``); code reads it by group
    (``settings.kafka.username``), and a job is given only ``settings.streaming``."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", validate_default=True)

    # Where everything local lives; object-store URIs are accepted for the two roots.
    data_dir: str = "./data"
    delta_root: str = ""  # default: <data_dir>/delta
    checkpoint_root: str = ""  # default: <data_dir>/checkpoints
    # Where `sigflow jars fetch` put the pinned JARs (Spark's Kafka source, delta-spark, the
    # Kafka broker; see infra/jars/).
    jars_dir: str = ""  # default: <python environment>/share/sigflow/jars
    quality_dir: str = ""  # default: <data_dir>/quality (GX project and Data Docs HTML)
    airflow_dir: str = ""  # default: <data_dir>/airflow (AIRFLOW_HOME: logs, password)
    lineage_dir: str = ""  # default: <data_dir>/lineage (OpenLineage events, a file per job and Airflow's)

    kafka: KafkaSettings = KafkaSettings()
    streaming: StreamingSettings = StreamingSettings()
    spark: SparkSettings = SparkSettings()
    operations: OperationsSettings = OperationsSettings()
    local: LocalSettings = LocalSettings()

    source_file: str = ""  # which YAML file was read, if any (set by load_settings)

    @model_validator(mode="before")
    @classmethod
    def _grouped(cls, data: Any) -> Any:
        """Flat names into their groups; a group given whole (YAML ``kafka: {...}``) is
        kept, and a flat name beside it wins for its field."""
        if not isinstance(data, dict):
            return data
        out = {key: value for key, value in data.items() if key not in GROUPED}
        for key, value in data.items():
            if key in GROUPED:
                group, field = GROUPED[key]
                section = out.get(group) or {}
                if isinstance(section, BaseModel):
                    section = section.model_dump()
                if not isinstance(section, dict):
                    raise ValueError(f"{group} is a group of settings: set its fields by their own names, "
                                     f"such as {key}")
                section = dict(section)
                section[field] = value
                out[group] = section
        return out

    def flat(self) -> dict[str, Any]:
        """Every setting under its flat name (what a config file or the environment sets)."""
        values = {name: getattr(self, name) for name in type(self).model_fields if name not in GROUPS}
        for name, (group, field) in GROUPED.items():
            values[name] = getattr(getattr(self, group), field)
        return values

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
    def lineage_path(self) -> Path:
        return Path(self.lineage_dir or Path(self.data_dir) / "lineage")

    @property
    def airflow_home(self) -> Path:
        return Path(self.airflow_dir or Path(self.data_dir) / "airflow")

    @property
    def jars_path(self) -> Path:
        return Path(self.jars_dir) if self.jars_dir else default_jars_dir()

    def progress_file(self, job: str) -> Path:
        """The job's per-batch JSON progress lines (docs/observability.md)."""
        return Path(self.data_dir) / "progress" / f"{job}.jsonl"

    @property
    def broker_dir(self) -> Path:
        return Path(self.data_dir) / "broker"

    def replace(self, **changes: Any) -> "Settings":
        """A copy with some settings changed (flat names), validated as loading validates."""
        return load_settings(env={}, overrides={**self.flat(), **changes})

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Highest first: command-line overrides, SIGFLOW_* variables, the YAML file.
        return init_settings, _EnvironmentSource(settings_cls), _YamlFileSource(settings_cls)


# Every setting's flat name, as users write it.
FLAT_NAMES: tuple[str, ...] = tuple(
    [name for name in Settings.model_fields if name not in GROUPS and name != "source_file"] + list(GROUPED))


def _join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


@dataclass(frozen=True)
class ObjectStore:
    """Where S3 is, from the AWS SDKs' own variables (AWS_ENDPOINT_URL, AWS_REGION or
    AWS_DEFAULT_REGION): the ones delta-rs, pyarrow and boto3 read themselves, so Spark's S3A
    and sigflow's own S3 calls are pointed by the same ones. Empty: AWS's own S3."""

    endpoint_url: str = ""
    region: str = ""


def object_store(environ: Mapping[str, str] | None = None) -> ObjectStore:
    env = os.environ if environ is None else environ
    return ObjectStore(env.get("AWS_ENDPOINT_URL", ""), env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION", ""))


def armed_failpoints() -> str:
    """SIGFLOW_FAILPOINTS: the crash points fault tests arm in a job they start (runtime/failpoints.py)."""
    return os.environ.get("SIGFLOW_FAILPOINTS", "")


def default_jars_dir() -> Path:
    """Beside the Python environment that holds pyspark: the JARs belong to that install."""
    return Path(sys.prefix) / "share" / "sigflow" / "jars"


def on_local_disk(uri: str) -> bool:
    """Whether a table or checkpoint URI names this machine's file system (no scheme, or file:)."""
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", uri)
    return scheme is None or scheme.group(1).lower() == "file"


# The environment the sources read: os.environ, or the mapping load_settings(env=...) was
# given (tests and `replace` read none). A context variable, since pydantic-settings builds
# its sources in a classmethod that sees no per-call state.
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("sigflow_environ", default=None)


class _Source(PydanticBaseSettingsSource):
    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self().get(field_name), field_name, False

    @staticmethod
    def environ() -> Mapping[str, str]:
        environ = _ENVIRON.get()
        return os.environ if environ is None else environ


class _EnvironmentSource(_Source):
    """Every SIGFLOW_<NAME> variable, known or not: an unknown one is a mistake to report,
    not to ignore (pydantic-settings' own env source reads only the known names)."""

    def __call__(self) -> dict[str, Any]:
        environ = self.environ()
        values = {}
        if environ.get("KAFKA_BOOTSTRAP_SERVERS"):
            values["kafka_bootstrap_servers"] = environ["KAFKA_BOOTSTRAP_SERVERS"]
        for key, raw in environ.items():
            if key.startswith(ENV_PREFIX) and key not in RESERVED_ENV:
                values[key[len(ENV_PREFIX):].lower()] = raw
        return values


class _YamlFileSource(_Source):
    def __call__(self) -> dict[str, Any]:
        config_file = self.environ().get(f"{ENV_PREFIX}CONFIG")
        if not config_file:
            return {}
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist", "check --config / SIGFLOW_CONFIG")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of setting: value")
        grouped = loaded.get("kafka") if isinstance(loaded.get("kafka"), dict) else {}
        if "kafka_password" in loaded or {"password", "kafka_password"} & set(grouped):
            raise ConfigError(f"config file {path} sets kafka_password: a password does not belong in a file "
                              "that gets committed",
                              f"remove it; set {ENV_PREFIX}KAFKA_PASSWORD or kafka_password_file instead")
        return {**loaded, "source_file": str(path)}


def load_settings(
    config_file: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build the settings once; raise ConfigError with the offending name on any mistake."""
    environ = dict(os.environ if env is None else env)
    if config_file:
        environ[f"{ENV_PREFIX}CONFIG"] = str(config_file)
    token = _ENVIRON.set(environ)
    try:
        return Settings(**(overrides or {}))
    except ValidationError as exc:
        raise _config_error(exc) from None
    finally:
        _ENVIRON.reset(token)


def _flat_name(loc: tuple) -> str | None:
    """The setting an error is about, by the name users write; None for a check of a whole
    group (several of its settings together)."""
    if len(loc) >= 2 and loc[0] in GROUPS:
        model = GROUPS[loc[0]]
        info = model.model_fields.get(str(loc[1]))
        if info is not None:
            return info.validation_alias if isinstance(info.validation_alias, str) else str(loc[1])
        return str(loc[1])
    if len(loc) == 1 and loc[0] not in GROUPS:
        return str(loc[0])
    return None


def _config_error(exc: ValidationError) -> ConfigError:
    """pydantic's errors, in the project's words: the setting, its value, the allowed form."""
    unknown = sorted(".".join(map(str, e["loc"])) for e in exc.errors() if e["type"] == "extra_forbidden")
    if unknown:
        return ConfigError(
            f"unknown setting(s): {', '.join(unknown)}",
            f"valid settings: {', '.join(FLAT_NAMES)}",
        )
    problems = []  # (what is wrong, where to fix it)
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")
        message = message[0].lower() + message[1:]
        name = _flat_name(tuple(error["loc"]))
        if name:
            shown = "'**********'" if name in SECRET_SETTINGS else repr(error["input"])
            problems.append((f"setting {name}={shown}: {message}",
                             f"set it in the config file or env {ENV_PREFIX}{name.upper()}"))
        else:
            problems.append((f"settings: {message}", "fix them in the config file or the environment"))
    if len(problems) == 1:
        return ConfigError(*problems[0])
    return ConfigError(f"{len(problems)} settings are invalid",
                       "fix them in the config file or the environment variables named above",
                       details=[f"{what} ({where})" for what, where in problems])
