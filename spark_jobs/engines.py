"""Native connectors when the JVM has them, Python fallbacks otherwise: decided here only.

The production image bakes Spark's Kafka connector and delta-spark into its classpath;
embedded machines cannot download them (no Maven), so they use the Python Kafka data source
and the delta-rs writer. Both paths read the same Kafka options and write the same tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.config import Settings
from spark_jobs.errors import ConfigError

KAFKA_PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
DELTA_SPARK_CLASS = "org.apache.spark.sql.delta.sources.DeltaDataSource"


@dataclass(frozen=True)
class Engines:
    kafka_source: str  # "native" | "python"
    delta_writer: str  # "delta-spark" | "delta-rs"

    @property
    def kafka_format(self) -> str:
        from spark_jobs.python_kafka_source import FORMAT_NAME

        return "kafka" if self.kafka_source == "native" else FORMAT_NAME


def choose_engines(settings: Settings, has_class: Callable[[str], bool]) -> Engines:
    """Pick each engine from the setting ('auto' = native when its classes load)."""
    kafka_native = has_class(KAFKA_PROVIDER_CLASS)
    delta_native = has_class(DELTA_SPARK_CLASS)
    if settings.kafka_source == "native" and not kafka_native:
        raise ConfigError(
            "kafka_source=native but Spark's Kafka connector is not on the classpath",
            "use the production Spark image, add spark-sql-kafka-0-10 to spark.jars, "
            "or set SIGFLOW_KAFKA_SOURCE=auto",
        )
    if settings.delta_writer == "delta-spark" and not delta_native:
        raise ConfigError(
            "delta_writer=delta-spark but delta-spark's JARs are not on the classpath",
            "use the production Spark image or set SIGFLOW_DELTA_WRITER=auto",
        )
    kafka = settings.kafka_source if settings.kafka_source != "auto" else (
        "native" if kafka_native else "python"
    )
    delta = settings.delta_writer if settings.delta_writer != "auto" else (
        "delta-spark" if delta_native else "delta-rs"
    )
    return Engines(kafka_source=kafka, delta_writer=delta)


def detect_engines(spark: SparkSession, settings: Settings) -> Engines:
    from spark_jobs.spark import class_available

    return choose_engines(settings, lambda name: class_available(spark, name))


def kafka_options(settings: Settings, bootstrap_servers: str, topics: list[str]) -> dict[str, str]:
    """The options of Spark's Kafka source; the Python source understands the same ones."""
    options = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "subscribe": ",".join(topics),
        "startingOffsets": settings.starting_offsets,
        "failOnDataLoss": str(settings.fail_on_data_loss).lower(),
        "includeHeaders": "false",
    }
    if settings.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(settings.max_offsets_per_trigger)
    return options


def read_kafka(
    spark: SparkSession, settings: Settings, engines: Engines, bootstrap_servers: str, topics: list[str]
) -> DataFrame:
    options = kafka_options(settings, bootstrap_servers, topics)
    if engines.kafka_source == "python":
        options.pop("includeHeaders")
        options["sigflow.readTimeoutSeconds"] = str(settings.kafka_read_timeout_s)
    return spark.readStream.format(engines.kafka_format).options(**options).load()


def read_kafka_range(
    spark: SparkSession, settings: Settings, engines: Engines, bootstrap_servers: str,
    topics: list[str], start: dict, end: dict,
) -> DataFrame:
    """A batch read of exactly the offsets [start, end), e.g. one micro-batch's input."""
    import json

    options = kafka_options(settings, bootstrap_servers, topics)
    options.update(startingOffsets=json.dumps(start), endingOffsets=json.dumps(end))
    if engines.kafka_source == "python":
        options.pop("includeHeaders")
        options["sigflow.readTimeoutSeconds"] = str(settings.kafka_read_timeout_s)
    return spark.read.format(engines.kafka_format).options(**options).load()
