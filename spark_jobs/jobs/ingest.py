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


def split_ingest_batch(settings: StreamingSettings, records: DataFrame, batch: BatchContext) -> dict[str, DataFrame]:
    ingest_time = F.timestamp_millis(F.lit(batch.batch_timestamp_ms))
    raw = records.select(
        "key", "value", "topic", "partition", "offset",
        F.col("timestamp").alias("kafka_timestamp"),
        ingest_time.alias("ingest_time"),
        F.lit(batch.batch_id).cast("bigint").alias("batch_id"),
    )
    events, bad_events = parse_device_events(records.where(F.col("topic") == settings.events_topic), settings.max_clock_ahead, batch.cache)
    alerts, bad_alerts = parse_device_alerts(records.where(F.col("topic") == settings.alerts_topic), settings.max_clock_ahead, batch.cache)
    return {
        DEVICE_EVENTS_RAW.name: raw,
        DEVICE_EVENTS.name: events.withColumn("ingest_time", ingest_time),
        DEVICE_ALERTS.name: alerts.withColumn("ingest_time", ingest_time),
        QUARANTINED_EVENTS.name: bad_events.unionByName(bad_alerts).withColumns(
            {"job": F.lit(batch.job), "source_job": F.lit(batch.job), "ingest_time": ingest_time}
        ),
        DEVICE_STATUS.name: device_status(events, alerts),
    }


def _latest(rows: DataFrame, time: str, fields: list[str], prefix: str) -> DataFrame:
    """Each device's latest row: the largest ``time``, then the latest to reach Kafka (its
    timestamp, then its offset; a device's records share a partition, keyed by its id)."""
    order = [F.col(time), F.col("kafka_timestamp"), F.col("offset")]
    latest = F.max(F.struct(*order, *[F.col(name) for name in fields])).alias("latest")
    return rows.groupBy("device_id").agg(latest).select(
        "device_id", *[F.col(f"latest.{name}").alias(name) for name in fields],
        F.col("latest.kafka_timestamp").alias(f"{prefix}_kafka_timestamp"), F.col("latest.offset").alias(f"{prefix}_offset"),
        F.col(f"latest.{time}").alias(time))


def device_status(events: DataFrame, alerts: DataFrame) -> DataFrame:
    """The batch's newest event and alert per device (device_status's merge keeps the newer of
    these and what the table holds)."""
    latest_events = _latest(events, "event_time", ["event_id", "signal"], "event")
    latest_alerts = _latest(alerts, "alert_time", ["alert_id", "severity", "kind"], "alert")
    return latest_events.join(latest_alerts, "device_id", "full_outer").select(*DEVICE_STATUS.columns)


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
