"""The jobs a user writes by hand from Spark's and Delta's own docs to get the same tables as
sigflow's, measured beside them in `make bench` (bench/jobs.py).

Each reads the same topics with the same Kafka source options, parses with ``from_json``,
and runs trigger availableNow into native Delta writes. None quarantines with reasons,
keeps lineage metadata, lists late events or records metrics: those are what sigflow adds.

* ``plain ingest``: events only, one Delta sink (the base the stateful jobs are held to).
* ``ingest``: both topics; a ``foreachBatch`` that persists the batch and appends the raw
  records, the typed events, the typed alerts and the rows that did not parse, one after
  the other, each append idempotent with Delta's ``txnAppId``/``txnVersion``.
* ``dedup``: ``dropDuplicatesWithinWatermark(event_id)``, one native Delta sink.
* ``windowed-averages``: per window kind a watermark, a dedup within it and avg/min/max/count
  per device and window (tumbling, and sliding every step), the two unioned into one native
  Delta sink.
"""

from __future__ import annotations

import time
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

EVENT_SCHEMA = "event_id STRING, device_id STRING, event_time STRING, signal DOUBLE"
ALERT_SCHEMA = "alert_id STRING, device_id STRING, alert_time STRING, severity STRING, kind STRING"
KINDS = ("plain ingest", "ingest", "dedup", "windowed-averages")


def _time(column: str) -> F.Column:
    return F.coalesce(F.try_to_timestamp(column), F.timestamp_millis(F.col(column).try_cast("bigint")))


def _typed(records: DataFrame, schema: str, time_field: str) -> DataFrame:
    body = F.from_json(F.col("value").cast("string"), schema)
    return records.select(body.alias("r"), "value", "topic", "partition", "offset").select(
        "r.*", "value", "topic", "partition", "offset").withColumn(time_field, _time(time_field))


def _parsed(id_field: str, time_field: str) -> F.Column:
    return F.col(id_field).isNotNull() & F.col(time_field).isNotNull()


def _events(records: DataFrame) -> DataFrame:
    return _typed(records, EVENT_SCHEMA, "event_time").where(_parsed("event_id", "event_time")).drop("value")


def _stats(events: DataFrame, window: F.Column, kind: str) -> DataFrame:
    return (events.groupBy(window.alias("window"), "device_id")
            .agg(F.avg("signal").alias("avg_signal"), F.min("signal").alias("min_signal"),
                 F.max("signal").alias("max_signal"), F.count("*").alias("event_count"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    "device_id", "avg_signal", "min_signal", "max_signal", "event_count",
                    F.lit(kind).alias("window_kind")))


def _ingest_batch(root: Path, events_topic: str, app_id: str):
    def write(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        events = _typed(batch.where(F.col("topic") == events_topic), EVENT_SCHEMA, "event_time")
        alerts = _typed(batch.where(F.col("topic") != events_topic), ALERT_SCHEMA, "alert_time")
        event_ok, alert_ok = _parsed("event_id", "event_time"), _parsed("alert_id", "alert_time")
        tables = {
            "raw": batch.select("key", "value", "topic", "partition", "offset", "timestamp"),
            "events": events.where(event_ok).drop("value"),
            "alerts": alerts.where(alert_ok).drop("value"),
            "unparseable": events.where(~event_ok).select("value", "topic", "partition", "offset").unionByName(
                alerts.where(~alert_ok).select("value", "topic", "partition", "offset")),
        }
        for name, frame in tables.items():
            (frame.write.format("delta").mode("append")
             .option("txnAppId", app_id).option("txnVersion", batch_id).save(str(root / name)))
        batch.unpersist()
    return write


def rate(spark, settings, kind: str, events: int, root: Path) -> float:
    """events/s of the hand-written job ``kind`` over the settings' topics, from a fresh
    checkpoint: ``events`` over the seconds from its start to its end."""
    from spark_jobs.runtime.kafka import source as kafka_source

    streaming = settings.streaming
    topics = [streaming.events_topic] + ([streaming.alerts_topic] if kind == "ingest" else [])
    records = kafka_source.read_stream(spark, settings, settings.kafka.bootstrap_servers, topics)
    out = root / f"handwritten-{kind.replace(' ', '-')}"
    delay = streaming.watermark_delay.spark
    if kind == "ingest":
        writer = records.writeStream.foreachBatch(_ingest_batch(out, streaming.events_topic, f"bench-{out.name}"))
    else:
        result = _events(records)
        if kind == "dedup":
            result = result.withWatermark("event_time", delay).dropDuplicatesWithinWatermark(["event_id"])
        elif kind == "windowed-averages":
            def deduplicated():
                return result.withWatermark("event_time", delay).dropDuplicatesWithinWatermark(["event_id"])
            result = _stats(deduplicated(), F.window("event_time", streaming.tumbling_window.spark), "tumbling").unionByName(
                _stats(deduplicated(), F.window("event_time", streaming.sliding_window.spark,
                                                streaming.sliding_step.spark), "sliding"))
        writer = result.writeStream.format("delta").outputMode("append").option("path", str(out))
    started = time.perf_counter()
    query = writer.option("checkpointLocation", str(out) + "-cp").trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    return events / seconds if seconds > 0 else float("inf")
