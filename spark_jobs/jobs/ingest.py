"""Job ``ingest``: every record kept raw, valid events and alerts typed, bad ones quarantined."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.config import StreamingSettings
from spark_jobs.contracts.events import parse_device_alerts, parse_device_events
from spark_jobs.contracts.tables import (
    DEVICE_ALERTS,
    DEVICE_EVENTS,
    DEVICE_EVENTS_RAW,
    DEVICE_STATUS,
    QUARANTINED_EVENTS,
)
from spark_jobs.jobs import JOB_TABLES
from spark_jobs.jobs.base import BatchContext, StreamingJob
from spark_jobs.jobs.batch_values import batch_bigint, batch_timestamp


def split_ingest_batch(settings: StreamingSettings, records: DataFrame, batch: BatchContext) -> dict[str, DataFrame]:
    ingest_time = batch_timestamp(batch.batch_timestamp_ms)
    raw = records.select(
        "key", "value", "topic", "partition", "offset",
        F.col("timestamp").alias("kafka_timestamp"),
        ingest_time.alias("ingest_time"),
        batch_bigint(batch.batch_id).alias("batch_id"),
    )
    events, bad_events = parse_device_events(records.where(F.col("topic") == settings.events_topic), settings.max_clock_ahead, batch.cache)
    alerts, bad_alerts = parse_device_alerts(records.where(F.col("topic") == settings.alerts_topic), settings.max_clock_ahead, batch.cache)
    return {
        DEVICE_EVENTS_RAW.name: raw,
        DEVICE_EVENTS.name: events.withColumn("ingest_time", ingest_time),
        DEVICE_ALERTS.name: alerts.withColumn("ingest_time", ingest_time),
        QUARANTINED_EVENTS.name: bad_events.unionByName(bad_alerts).withColumns(
            {"job": F.lit(batch.job), "ingest_time": ingest_time}
        ),
        DEVICE_STATUS.name: device_status(events, alerts),
    }


def device_status(events: DataFrame, alerts: DataFrame) -> DataFrame:
    """Every valid event and alert of the batch as a device_status row holding its part
    (the other null; the window and session parts are other jobs'). The sink keeps each device's newest of them per part, and
    device_status's merge the newer of that and what the table holds (the rule:
    runtime/delta/newest.py)."""
    event_rows = events.select("device_id", "event_id", "event_time", "signal",
                               F.col("kafka_timestamp").alias("event_kafka_timestamp"),
                               F.col("offset").alias("event_offset"))
    alert_rows = alerts.select("device_id", "alert_id", "alert_time", "severity", "kind",
                               F.col("kafka_timestamp").alias("alert_kafka_timestamp"),
                               F.col("offset").alias("alert_offset"))
    return event_rows.unionByName(alert_rows, allowMissingColumns=True)


INGEST = StreamingJob(
    name="ingest",
    summary="Kafka device-events and device-alerts -> device_events_raw, device_events, "
    "device_alerts, quarantined_events, device_status",
    topics=lambda settings: [settings.events_topic, settings.alerts_topic],
    build=lambda settings, records: records,
    split=split_ingest_batch,
    tables=JOB_TABLES["ingest"],
    stateful=False,
)
