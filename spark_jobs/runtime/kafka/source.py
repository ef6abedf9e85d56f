"""Spark's own Kafka source (``format("kafka")``): the options sigflow reads with, and the
check that it and delta-spark are on the session's classpath.

Both come from the pinned JARs (``infra/jars/``, ``sigflow jars fetch``); a session without
them fails here, naming the fix, rather than in the middle of a query plan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.config import Settings
from spark_jobs.errors import ConfigError
from spark_jobs.runtime.kafka.connection import KafkaConnection

KAFKA_PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
DELTA_SPARK_CLASS = "org.apache.spark.sql.delta.sources.DeltaDataSource"
REQUIRED_CLASSES = (KAFKA_PROVIDER_CLASS, DELTA_SPARK_CLASS)


def kafka_options(settings: Settings, kafka: KafkaConnection | str, topics: list[str]) -> dict[str, str]:
    """The source options that follow from the settings (what an operator configures)."""
    options = {
        **KafkaConnection.of(kafka).spark_options(),
        "subscribe": ",".join(topics),
        "startingOffsets": settings.kafka.starting_offsets,
        "failOnDataLoss": str(settings.kafka.fail_on_data_loss).lower(),
        "includeHeaders": "false",
    }
    if settings.kafka.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(settings.kafka.max_offsets_per_trigger)
    return options


def source_options(settings: Settings, kafka: KafkaConnection | str, topics: list[str]) -> dict[str, str]:
    # Fail a planning or a read within kafka_read_timeout_s when Kafka is gone (the
    # defaults wait 3 x 60 s to plan and 120 s to read): the runner then backs off and
    # restarts the query from its checkpoint, so one try here is enough.
    timeout_ms = str(int(settings.kafka.read_timeout_s * 1000))
    return {
        **kafka_options(settings, kafka, topics),
        "kafka.default.api.timeout.ms": timeout_ms,
        "kafka.request.timeout.ms": timeout_ms,
        "kafkaConsumer.pollTimeoutMs": timeout_ms,
        "fetchOffset.numRetries": "1",
        # A task reads a known range, and its last fetch can reach the log's end, where the
        # broker holds the fetch for fetch.max.wait.ms (500 ms) waiting for records that the
        # task does not need: measured, a 2,500-record range read in 1.8 s, 0.3 s with 10 ms
        # (docs/streaming-facts.md).
        "kafka.fetch.max.wait.ms": "10",
    }


def read_stream(spark: SparkSession, settings: Settings, kafka: KafkaConnection | str, topics: list[str],
                real_time: bool = False) -> DataFrame:
    """``real_time``: for a real-time query, which reads records as they come and refuses a
    per-batch bound (maxOffsetsPerTrigger)."""
    options = source_options(settings, kafka, topics)
    if real_time:
        options.pop("maxOffsetsPerTrigger", None)
    return spark.readStream.format("kafka").options(**options).load()


def read_range(
    spark: SparkSession, settings: Settings, kafka: KafkaConnection | str, topics: list[str],
    start: dict, end: dict,
) -> DataFrame:
    """A batch read of exactly the offsets [start, end), e.g. one micro-batch's input.

    ``start`` may predate a change of the topic's partitions (Spark's source refuses ranges
    whose ends name different partitions): see ``aligned_start``."""
    options = source_options(settings, kafka, topics)
    options.pop("maxOffsetsPerTrigger", None)
    options.update(startingOffsets=json.dumps(aligned_start(start, end)), endingOffsets=json.dumps(end))
    return spark.read.format("kafka").options(**options).load()


@dataclass(frozen=True)
class KafkaRecords:
    """A job's records from Kafka: its stream, and one batch's range read again (the late-events
    rule's read). The other source of such records is device_events_raw (runtime/replay/)."""

    spark: SparkSession
    settings: Settings
    kafka: KafkaConnection | str
    topics: list[str]

    def stream(self) -> DataFrame:
        return read_stream(self.spark, self.settings, self.kafka, self.topics)

    def range(self, start: dict, end: dict) -> DataFrame:
        return read_range(self.spark, self.settings, self.kafka, self.topics, start, end)


EARLIEST = -2  # Spark's Kafka source's JSON offset for "the partition's earliest offset"


def aligned_start(start: dict, end: dict) -> dict:
    """Start offsets for exactly the partitions of ``end``: a partition added to the topic
    after ``start`` was taken begins at its earliest offset, as Spark's source reads a new
    partition; one that vanished since (a topic recreated smaller) has nothing to read."""
    return {
        topic: {partition: start.get(topic, {}).get(partition, EARLIEST) for partition in parts}
        for topic, parts in end.items()
    }


def require_classes(spark: SparkSession) -> None:
    """Spark's Kafka source and delta-spark must load in this session."""
    from spark_jobs.runtime.spark import class_available

    missing = [name for name in REQUIRED_CLASSES if not class_available(spark, name)]
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} is not on Spark's classpath",
            "run `sigflow jars fetch` (make install does), or ship the JARs of infra/jars/lock.txt "
            "with spark.jars",
        )
