"""The JVM options every sigflow driver and executor starts with, embedded or under
spark-submit (where the driver's JVM starts before any sigflow code runs, so they must come
as --conf). Spark-free: DAG files read it at parse time."""

from __future__ import annotations

from pathlib import Path

# Also in infra/spark/spark-defaults.conf, for spark-submit (tests/infra checks they agree).
# A driver out of memory can hang on a lost task result (measured: 1,000,000 records in one
# batch at 2g); exiting instead lets the job fail with advice.
DRIVER_JAVA_OPTIONS = "-Duser.timezone=UTC -XX:+ExitOnOutOfMemoryError"
# sigflow's JVM logging: warnings only, one short line each, start-up chatter off.
LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")


def java_options_conf(extra: str = "", driver_only: str = "") -> dict[str, str]:
    """The driver's and the executors' Java options: time zone, out-of-memory exit, logging,
    then the settings' ``java_options`` (``extra``), and the driver's own (``driver_only``:
    its class archive, runtime/class_archive.py)."""
    common = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG} {extra}".strip()
    return {
        "spark.driver.extraJavaOptions": f"{DRIVER_JAVA_OPTIONS} {common} {driver_only}".strip(),
        "spark.executor.extraJavaOptions": f"-Duser.timezone=UTC {common}",
    }
