"""The two engines, chosen once: what reads Kafka and what writes Delta.

* ``jvm`` (the default and production path): Spark's Kafka source (``format("kafka")``)
  and delta-spark, from the pinned JARs (``infra/jars/``, ``sigflow jars fetch``).
* ``python`` (a fallback): a Kafka source written with Spark's Python Data Source API and
  the delta-rs writer; taken when the JARs are absent, or with ``SIGFLOW_ENGINE=python``.

Both read the same Kafka options and write the same tables; the rest of sigflow only sees
an :class:`Engine`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.config import Settings
from spark_jobs.errors import ConfigError
from spark_jobs.runtime.delta_sink import DeltaRsSink, DeltaSink, DeltaSparkSink
from spark_jobs.runtime.kafka_connection import KafkaConnection

KAFKA_PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
DELTA_SPARK_CLASS = "org.apache.spark.sql.delta.sources.DeltaDataSource"


def kafka_options(settings: Settings, kafka: KafkaConnection | str, topics: list[str]) -> dict[str, str]:
    """The options of Spark's Kafka source; the Python source understands the same ones."""
    options = {
        **KafkaConnection.of(kafka).spark_options(),
        "subscribe": ",".join(topics),
        "startingOffsets": settings.starting_offsets,
        "failOnDataLoss": str(settings.fail_on_data_loss).lower(),
        "includeHeaders": "false",
    }
    if settings.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(settings.max_offsets_per_trigger)
    return options


@dataclass(frozen=True)
class Engine:
    name: str
    kafka_format: str
    writer: type[DeltaSink]

    def source_options(self, settings: Settings, kafka: KafkaConnection | str, topics: list[str]) -> dict[str, str]:
        # Fail a planning or a read within kafka_read_timeout_s when Kafka is gone (the
        # defaults wait 3 x 60 s to plan and 120 s to read): the runner then backs off and
        # restarts the query from its checkpoint, so one try here is enough.
        timeout_ms = str(int(settings.kafka_read_timeout_s * 1000))
        return {
            **kafka_options(settings, kafka, topics),
            "kafka.default.api.timeout.ms": timeout_ms,
            "kafka.request.timeout.ms": timeout_ms,
            "kafkaConsumer.pollTimeoutMs": timeout_ms,
            "fetchOffset.numRetries": "1",
        }

    def prepare(self, spark: SparkSession) -> None:
        """Make the source known to the session (nothing to do for Spark's own)."""

    def read_kafka(self, spark: SparkSession, settings: Settings, kafka: KafkaConnection | str, topics: list[str]) -> DataFrame:
        self.prepare(spark)
        options = self.source_options(settings, kafka, topics)
        return spark.readStream.format(self.kafka_format).options(**options).load()

    def read_kafka_range(
        self, spark: SparkSession, settings: Settings, kafka: KafkaConnection | str, topics: list[str],
        start: dict, end: dict,
    ) -> DataFrame:
        """A batch read of exactly the offsets [start, end), e.g. one micro-batch's input."""
        self.prepare(spark)
        options = self.source_options(settings, kafka, topics)
        options.pop("maxOffsetsPerTrigger", None)
        options.update(startingOffsets=json.dumps(start), endingOffsets=json.dumps(end))
        return spark.read.format(self.kafka_format).options(**options).load()

    def sink(self, spark: SparkSession, settings: Settings) -> DeltaSink:
        return self.writer(spark, settings)


@dataclass(frozen=True)
class PythonEngine(Engine):
    def source_options(self, settings: Settings, kafka: KafkaConnection | str, topics: list[str]) -> dict[str, str]:
        options = kafka_options(settings, kafka, topics)
        options.pop("includeHeaders")
        options["sigflow.readTimeoutSeconds"] = str(settings.kafka_read_timeout_s)
        return options

    def prepare(self, spark: SparkSession) -> None:
        from spark_jobs.runtime.python_kafka_source import KafkaDataSource

        spark.dataSource.register(KafkaDataSource)


JVM = Engine("jvm", "kafka", DeltaSparkSink)
PYTHON = PythonEngine("python", "sigflow_kafka", DeltaRsSink)


def choose_engine(settings: Settings, has_class: Callable[[str], bool]) -> Engine:
    """The setting's engine; 'auto' is jvm when its classes load, else python."""
    missing = [name for name in (KAFKA_PROVIDER_CLASS, DELTA_SPARK_CLASS) if not has_class(name)]
    if settings.engine == "python" or (settings.engine == "auto" and missing):
        return PYTHON
    if missing:
        raise ConfigError(
            f"engine=jvm but {', '.join(missing)} is not on Spark's classpath",
            "run `sigflow jars fetch` (make install does), or set SIGFLOW_ENGINE=python",
        )
    return JVM


def detect_engine(spark: SparkSession, settings: Settings) -> Engine:
    from spark_jobs.runtime.spark import class_available

    return choose_engine(settings, lambda name: class_available(spark, name))
