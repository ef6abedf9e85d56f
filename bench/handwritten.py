"""The jobs a user writes by hand from Spark's and Delta's own docs to get the same tables as
sigflow's, measured beside them in `make bench` (bench/jobs.py).

Each reads the same topics with the same Kafka source options, parses with ``from_json``,
and runs trigger availableNow into native Delta writes. None quarantines with reasons,
keeps lineage metadata, lists late events or records metrics: those are what sigflow adds.

* ``plain ingest``: events only, one Delta sink (the base the stateful jobs are held to).
* ``ingest``: both topics; a ``foreachBatch`` that persists the batch and appends the raw
  records, the typed events, the typed alerts and the rows that did not parse, one after
  the other, each append idempotent with Delta's ``txnAppId``/``txnVersion``.
* ``ingest with device_status``: the same, then ingest's fifth table, each device's newest
  event and alert, by Delta's documented upsert from ``foreachBatch``: the batch's newest
  per device (a window), merged where newer.
* ``dedup``: ``dropDuplicatesWithinWatermark(event_id)``, one native Delta sink.
* ``windowed-averages``: per window kind a watermark, a dedup within it and avg/min/max/count
  per device and window (tumbling, and sliding every step), the two unioned into one native
  Delta sink.
"""

from __future__ import annotations

import time
from pathlib import Path

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

EVENT_SCHEMA = "event_id STRING, device_id STRING, event_time STRING, signal DOUBLE"
ALERT_SCHEMA = "alert_id STRING, device_id STRING, alert_time STRING, severity STRING, kind STRING"
KINDS = ("plain ingest", "ingest", "ingest with device_status", "dedup", "windowed-averages")
STATUS_PARTS = {  # device_status' part: its columns, its order (newest first), from the events or alerts
    "event": (("event_id", "event_time", "signal"), ("event_time", "timestamp", "offset")),
    "alert": (("alert_id", "alert_time", "severity", "kind"), ("alert_time", "timestamp", "offset")),
}


def _time(column: str) -> F.Column:
    return F.coalesce(F.try_to_timestamp(column), F.timestamp_millis(F.col(column).try_cast("bigint")))


def _typed(records: DataFrame, schema: str, time_field: str, timestamp: bool = False) -> DataFrame:
    body = F.from_json(F.col("value").cast("string"), schema)
    kept = ["value", "topic", "partition", "offset"] + (["timestamp"] if timestamp else [])
    return records.select(body.alias("r"), *kept).select("r.*", *kept).withColumn(time_field, _time(time_field))


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


def _newest(rows: DataFrame, part: str) -> DataFrame:
    """The batch's newest row of each device for a part of device_status, its columns named as
    the table names them."""
    columns, order = STATUS_PARTS[part]
    newest_first = Window.partitionBy("device_id").orderBy(*[F.col(c).desc() for c in order])
    return (rows.withColumn("_n", F.row_number().over(newest_first)).where("_n = 1")
            .select("device_id", *columns, F.col("timestamp").alias(f"{part}_kafka_timestamp"),
                    F.col("offset").alias(f"{part}_offset")))


def _merge_status(spark, path: str, events: DataFrame, alerts: DataFrame) -> None:
    from delta.tables import DeltaTable

    source = _newest(events, "event").join(_newest(alerts, "alert"), "device_id", "full_outer")
    if not DeltaTable.isDeltaTable(spark, path):
        DeltaTable.createIfNotExists(spark).location(path).addColumns(source.schema).execute()
    newer = {part: (f"s.{order[0]} IS NOT NULL AND (t.{order[0]} IS NULL OR "
                    f"struct(s.{order[0]}, s.{part}_kafka_timestamp, s.{part}_offset) > "
                    f"struct(t.{order[0]}, t.{part}_kafka_timestamp, t.{part}_offset))")
             for part, (_, order) in STATUS_PARTS.items()}
    updates = {column: f"CASE WHEN {newer[part]} THEN s.{column} ELSE t.{column} END"
               for part, (columns, _) in STATUS_PARTS.items()
               for column in (*columns, f"{part}_kafka_timestamp", f"{part}_offset")}
    (DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), "t.device_id = s.device_id")
     .whenMatchedUpdate(condition=" OR ".join(f"({c})" for c in newer.values()), set=updates)
     .whenNotMatchedInsertAll().execute())


def _ingest_batch(root: Path, events_topic: str, app_id: str, with_status: bool = False):
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
        if with_status:
            _merge_status(batch.sparkSession, str(root / "device_status"),
                          _typed(batch.where(F.col("topic") == events_topic), EVENT_SCHEMA, "event_time", True)
                          .where(event_ok), _typed(batch.where(F.col("topic") != events_topic), ALERT_SCHEMA,
                                                   "alert_time", True).where(alert_ok))
        batch.unpersist()
    return write


def rate(spark, settings, kind: str, events: int, root: Path) -> float:
    """events/s of the hand-written job ``kind`` over the settings' topics, from a fresh
    checkpoint: ``events`` over the seconds from its start to its end. Its start is where its
    code begins, before the stream and the plan over it are defined, as sigflow's run is timed
    from before ``JobRun`` builds them (``side_by_side`` in bench/jobs.py)."""
    from spark_jobs.runtime.kafka import source as kafka_source

    started = time.perf_counter()
    streaming = settings.streaming
    both = kind in ("ingest", "ingest with device_status")
    topics = [streaming.events_topic] + ([streaming.alerts_topic] if both else [])
    records = kafka_source.read_stream(spark, settings, settings.kafka.bootstrap_servers, topics)
    out = root / f"handwritten-{kind.replace(' ', '-')}"
    delay = streaming.watermark_delay.spark
    if both:
        writer = records.writeStream.foreachBatch(_ingest_batch(out, streaming.events_topic, f"bench-{out.name}",
                                                                with_status=kind != "ingest"))
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
    query = writer.option("checkpointLocation", str(out) + "-cp").trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    return events / seconds if seconds > 0 else float("inf")
