"""Job ``ingest``: every record kept raw, valid events typed, bad ones quarantined."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.config import Settings
from spark_jobs.events import parse_device_events
from spark_jobs.jobs.base import BatchContext, StreamingJob
from spark_jobs.tables import DEVICE_EVENTS, DEVICE_EVENTS_RAW, QUARANTINED_EVENTS


def split_ingest_batch(settings: Settings, records: DataFrame, batch: BatchContext) -> dict[str, DataFrame]:
    ingest_time = F.timestamp_millis(F.lit(batch.batch_timestamp_ms))
    raw = records.select(
        "key", "value", "topic", "partition", "offset",
        F.col("timestamp").alias("kafka_timestamp"),
        ingest_time.alias("ingest_time"),
        F.lit(batch.batch_id).cast("bigint").alias("batch_id"),
    )
    valid, quarantined = parse_device_events(records)
    return {
        DEVICE_EVENTS_RAW.name: raw,
        DEVICE_EVENTS.name: valid.withColumn("ingest_time", ingest_time),
        QUARANTINED_EVENTS.name: quarantined.withColumns(
            {"source_job": F.lit(batch.job), "ingest_time": ingest_time}
        ),
    }


INGEST = StreamingJob(
    name="ingest",
    summary="Kafka device-events -> device_events_raw, device_events, quarantined_events",
    topics=lambda settings: [settings.events_topic],
    build=lambda settings, records: records,
    split=split_ingest_batch,
    tables=(DEVICE_EVENTS_RAW, DEVICE_EVENTS, QUARANTINED_EVENTS),
)
