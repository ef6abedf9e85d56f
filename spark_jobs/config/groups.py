"""The groups of settings: ``kafka`` (how to reach it, its topics' shape), ``streaming`` (what
a job reads and computes by: all a job is given), ``spark`` (where the JVMs run),
``operations`` (leases, approvals, quality, maintenance, metrics) and ``local`` (the
one-machine stand-ins). Each field answers to its flat name too (``SIGFLOW_<NAME>``, YAML)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    model_validator,
)

from spark_jobs.config.values import (
    AtLeastOne,
    DurationSetting,
    JavaOptions,
    JvmMemory,
    LineageUrl,
    PostgresJdbcUrl,
    RestartApprovers,
    RetentionSetting,
    SqlName,
    StartingOffsets,
    ThriftUri,
    Unit,
    Words,
)

# C1 alone fills the 48 MB code cache the JVM reserves for it within a minute of Spark's
# work; the JVM then stops compiling, and a method handle that needs the cache fails the
# task that asked for it (measured: "Out of space in CodeCache", docs/streaming-facts.md).
# 240 MB is what the tiered JIT reserves.
QUICK_JIT_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
# A collector named among jvm_options wins: the JVM refuses to start with two.
GC_OPTIONS = {"parallel": "-XX:+UseParallelGC", "g1": "-XX:+UseG1GC"}
# The driver's heap by default: one job's application, and sigflow pipeline's, which holds
# every job's state in one heap
ONE_JOB_HEAP = "2g"
ONE_APPLICATION_HEAP = "2560m"
_NAMES_A_COLLECTOR = re.compile(r"-XX:\+Use\w+GC\b")

from spark_jobs.config.values import ENV_PREFIX


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
    # --driver-memory wins); in local mode the executors' tasks run in it too. Empty: by the
    # application's shape (driver_heap).
    driver_memory: JvmMemory | Literal[""] = _flat("", "spark_driver_memory")
    # Extra options for every JVM sigflow starts on this machine: Spark's driver and
    # executors, the embedded broker, the local cluster's daemons.
    jvm_options: JavaOptions = ""
    # Which compilers those JVMs use: "tiered" (the JVM's default: C1, then C2 for hot code)
    # for drivers that run for hours; "quick" (C1 only, QUICK_JIT_OPTIONS) for runs of
    # minutes, such as make run's pipeline, whose JVM spent a third of its CPU in C2.
    jit: Literal["tiered", "quick"] = "tiered"
    # Which garbage collector Spark's drivers and executors use: "parallel" (collects only
    # while the application waits) or "g1" (the JVM's default on a server: marks the heap as
    # the application runs, to keep pauses short). With the state, cached batches and Delta
    # snapshots a driver holds, G1's marking took a fifth to a quarter of its CPU; with
    # "parallel" one application carried 5,000 events/s on 2 cores in both runs, with G1 in one
    # of two, for an eighth more CPU (docs/benchmarks.md). Its pauses, about a second at a full
    # collection of a 2 GB heap, fall inside a batch.
    gc: Literal["parallel", "g1"] = "parallel"
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
    def spark_java_options(self) -> str:
        """Spark's drivers' and executors' options: ``java_options`` with the collector ``gc``
        names."""
        return self.java_options_with(GC_OPTIONS[self.gc])

    def java_options_with(self, collector: str) -> str:
        """``java_options`` with ``collector``'s option, unless ``jvm_options`` names one."""
        chosen = "" if _NAMES_A_COLLECTOR.search(self.jvm_options) else collector
        return " ".join(filter(None, (chosen, self.java_options)))

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

    def driver_heap(self, one_application: bool = False) -> str:
        """The driver's heap: ``driver_memory``, or by default ONE_JOB_HEAP for one job's
        application and ONE_APPLICATION_HEAP for ``sigflow pipeline``'s, which holds every
        job's state (a 2 GB heap filled with it at 5,000 events/s: docs/benchmarks.md)."""
        return self.driver_memory or (ONE_APPLICATION_HEAP if one_application else ONE_JOB_HEAP)


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
    # The unit devices send their signal in (UCUM, as "dBm", "Cel", "%"; "1": a plain number):
    # written as a property of every table with a signal (docs/tables.md), never converted.
    signal_unit: Unit = "1"
    quality_freshness: DurationSetting = "2 hours"
    # How many rows a quality run holds at once: its memory follows this, not the tables.
    quality_chunk_rows: AtLeastOne = 200_000
    # Maintenance (sigflow maintenance, daily DAG). Rewinds can reach back only as far as
    # vacuum_retention: older table versions lose their files. Maintenance refuses a
    # retention under vacuum_retention_floor: a batch or a reader in flight still reads
    # the versions of the last minutes, and a rewind the ones before that.
    vacuum_retention: DurationSetting = "7 days"
    vacuum_retention_floor: DurationSetting = "1 hour"
    # How long a table's commit log keeps its entries (Delta's delta.logRetentionDuration):
    # with vacuum_retention, how far behind a change-feed follower may fall (docs/consumers.md)
    log_retention: DurationSetting = "30 days"
    quarantine_retention: DurationSetting = "30 days"
    # device_events_raw is the system of record: every record ingest read, what a job is
    # recomputed from once Kafka's retention has passed (sigflow checkpoint recover --from raw).
    # Maintenance deletes raw rows sent longer ago than this; a recompute that would need them
    # is then refused. forever: never.
    raw_retention: RetentionSetting = "forever"
    # table_status gets a row per table per batch; maintenance deletes those older than this,
    # each table's newest kept
    table_status_retention: DurationSetting = "30 days"
    checkpoint_batches_retained: AtLeastOne = 100
    # `sigflow metrics serve`: the Prometheus exporter of what Spark does not know (verdicts,
    # records behind in Kafka, late and quarantined counts); loopback unless set otherwise.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9466
    # The catalog: a Hive metastore (thrift://host:port) where deploy registers every table by
    # name, in catalog_database; empty: the embedded one `sigflow catalog start` runs, when it
    # runs (docs/consumers.md, "Query by name").
    catalog_uri: ThriftUri = ""
    catalog_database: SqlName = "sigflow"
    # Where the metastore `sigflow catalog start|serve` runs keeps its own database: empty, Derby
    # under <data_dir>/catalog; production, PostgreSQL (the user's password read from its file).
    catalog_db_url: PostgresJdbcUrl = ""
    catalog_db_user: str = "metastore"
    catalog_db_password_file: str = ""
    # `sigflow sql`: Spark Connect on the catalog, loopback unless set otherwise. Every client
    # presents the token in sql_token_file (default <data_dir>/sql/token, made 0600 at first start).
    sql_host: str = "127.0.0.1"
    sql_port: int = 15002
    sql_token_file: str = ""
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
    # The embedded catalog's metastore (`sigflow catalog start`): its port, 0 picks a free one
    # (kept with its database under <data_dir>/catalog).
    catalog_port: int = 19083
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


