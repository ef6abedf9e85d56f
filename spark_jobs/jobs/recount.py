"""What reconcile recounts: the result rows a late event belongs to, computed again as a batch
from every event of their time, by the rules the streaming jobs follow (docs/semantics.md).

Pure functions over batch DataFrames: the events (device_events' columns) and the late events
(late_events' columns) in, rows in the result tables' job columns out. Which rows are final
enough to correct, and how they are written, is ``spark_jobs.ops.reconcile``'s.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.config import StreamingSettings
from spark_jobs.contracts.dictionary import CLOSED_BY_GAP
from spark_jobs.contracts.tables import (
    ALERT_SIGNAL_CONTEXT,
    ALERTS_WITHOUT_TELEMETRY,
    DEVICE_SESSIONS,
    DEVICE_SIGNAL_AVERAGES,
)
from spark_jobs.jobs.alert_join import ALERT_COLUMNS, in_context
from spark_jobs.jobs.event_time import (
    EVENT_KEY,
    flatten_window,
    signal_stats,
    sliding,
    tumbling,
)
from spark_jobs.jobs.fleet_rollup import rollup

ALERT_KEY = ["alert_id"]


def first_copies(records: DataFrame, key: list[str] = EVENT_KEY) -> DataFrame:
    """One row per event (``EVENT_KEY``), or per alert (``ALERT_KEY``): the copy that reached
    Kafka first, the one the streaming jobs' deduplication keeps. A copy re-sent later counts
    once, however late."""
    first = Window.partitionBy(*key).orderBy("kafka_timestamp", "partition", "offset")
    return records.withColumn("_copy", F.row_number().over(first)).where("_copy = 1").drop("_copy")


def pane_end(settings: StreamingSettings, time_col: str = "event_time"):
    """The end of the tumbling window an event time falls in: where its lateness is measured from."""
    return tumbling(settings, time_col).end


# ---- windowed-averages: the tumbling and sliding windows of each device


def windows_of(settings: StreamingSettings, late: DataFrame) -> DataFrame:
    """(late event's key, device_id, window_kind, window_start, window_end) of every window a
    late event belongs to: its tumbling window and each sliding window."""
    kinds = [(tumbling(settings), "tumbling"), (sliding(settings), "sliding")]
    frames = [late.select("topic", "partition", "offset", "device_id", window.alias("window"),
                          F.lit(kind).alias("window_kind")) for window, kind in kinds]
    return flatten_window(frames[0].unionByName(frames[1]))


def window_rows(settings: StreamingSettings, events: DataFrame) -> DataFrame:
    """device_signal_averages rows from deduplicated events: every window they fall in."""
    both = signal_stats(events, tumbling(settings), "tumbling").unionByName(
        signal_stats(events, sliding(settings), "sliding"))
    return flatten_window(both).select(*DEVICE_SIGNAL_AVERAGES.job_schema.fieldNames())


# ---- fleet-rollup: the fleet windows over the devices' tumbling windows


def fleet_windows_of(settings: StreamingSettings, late: DataFrame) -> DataFrame:
    """(late event's key, window_start, window_end) of the fleet window a late event counts
    in: the one its tumbling window's time falls in, as the streaming rollup assigns it."""
    fleet = F.window(F.window_time(tumbling(settings)), settings.fleet_window.spark)
    return flatten_window(late.select("topic", "partition", "offset", fleet.alias("window")))


def fleet_rows(settings: StreamingSettings, events: DataFrame) -> DataFrame:
    """fleet_signal_rollups rows from deduplicated events (the streaming plan, run as a batch)."""
    return rollup(settings, events)


# ---- sessions: each device's runs of events without a silence longer than the gap


def session_rows(settings: StreamingSettings, events: DataFrame) -> DataFrame:
    """device_sessions rows from deduplicated events, cut where two of a device's events are
    more than session_gap apart (an event exactly the gap later joins, as in the stream).
    Times are compared in milliseconds, as the streaming state holds them."""
    in_order = Window.partitionBy("device_id").orderBy("_ms")
    t_ms = F.floor(F.unix_micros("event_time") / 1000)
    cuts = (
        events.withColumn("_ms", t_ms)
        .withColumn("_new", F.when(F.col("_ms") - F.lag("_ms").over(in_order) <= settings.session_gap.ms, 0)
                    .otherwise(1))
        .withColumn("_session", F.sum("_new").over(in_order.rowsBetween(Window.unboundedPreceding, 0)))
    )
    sessions = cuts.groupBy("device_id", "_session").agg(
        F.timestamp_millis(F.min("_ms")).alias("session_start"),
        F.timestamp_millis(F.max("_ms")).alias("session_end"),
        F.count("*").alias("event_count"),
        F.avg("signal").alias("avg_signal"),
        F.min("signal").alias("min_signal"),
        F.max("signal").alias("max_signal"),
    )
    return sessions.withColumn("closed_reason", F.lit(CLOSED_BY_GAP)).select(
        *DEVICE_SESSIONS.job_schema.fieldNames())


# ---- alert-join: each alert with its device's events in the range before it


def alert_rows(settings: StreamingSettings, alerts: DataFrame, events: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(alert_signal_context rows, alerts_without_telemetry rows) of deduplicated alerts
    joined with deduplicated events by the streaming join's condition."""
    joined = alerts.select(*ALERT_COLUMNS).join(
        events.select(F.col("device_id").alias("event_device_id"), "event_id", "event_time", "signal"),
        in_context(settings), "left")
    return (joined.where(F.col("event_id").isNotNull()).select(*ALERT_SIGNAL_CONTEXT.job_schema.fieldNames()),
            joined.where(F.col("event_id").isNull()).select(*ALERTS_WITHOUT_TELEMETRY.job_schema.fieldNames()))
