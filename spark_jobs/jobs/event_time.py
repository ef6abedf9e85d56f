"""Event-time building blocks shared by the stateful jobs (rules: docs/semantics.md).

Every stateful job reads Kafka itself and applies the ingest job's contract parsing, so it
does not wait on ingest and works with both Delta writers (delta-rs has no streaming source).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.config import StreamingSettings
from spark_jobs.contracts.events import records_maybe_at_or_before, valid_device_events
from spark_jobs.jobs.late_rows import LateRule


def valid_events(settings: StreamingSettings, records: DataFrame) -> DataFrame:
    """Typed events from Kafka records; malformed ones are the ingest job's to quarantine."""
    return valid_device_events(records, settings.max_clock_ahead)


# An event is a device's: its id is unique per device, not across devices (firmware numbers
# its events from 1), so two devices' events with one id are two events.
EVENT_KEY = ["device_id", "event_id"]
# the state layout of a job that deduplicates by EVENT_KEY (1 and 2 keyed by event_id alone)
DEDUP_BY_DEVICE = 3


def with_event_watermark(settings: StreamingSettings, events: DataFrame) -> DataFrame:
    """The watermark every event job runs with: the newest event_time seen, less
    ``watermark_delay`` (docs/semantics.md)."""
    return events.withWatermark("event_time", settings.watermark_delay.spark)


def drop_repeats(events: DataFrame) -> DataFrame:
    """Drop repeats of a device's event_id seen within the watermark delay.

    State per key lives until the watermark passes its first event_time + delay, so it stays
    bounded. An id re-sent after that is treated as a new event (documented in
    docs/jobs/dedup.md); one re-sent behind the watermark is late and goes to late_events.
    """
    return events.dropDuplicatesWithinWatermark(EVENT_KEY)


def deduplicate(settings: StreamingSettings, events: DataFrame) -> DataFrame:
    """Events with a watermark, their repeats dropped: what every stateful event job reads."""
    return drop_repeats(with_event_watermark(settings, events))


def tumbling(settings: StreamingSettings, time_col: str | Column = "event_time") -> Column:
    return F.window(time_col, settings.tumbling_window.spark)


def sliding(settings: StreamingSettings, time_col: str | Column = "event_time") -> Column:
    return F.window(
        time_col,
        settings.sliding_window.spark,
        settings.sliding_step.spark,
    )


def signal_stats(events: DataFrame, window: Column, kind: str, extra: list[Column] = ()) -> DataFrame:
    """avg/min/max/count of signal (and ``extra`` aggregates) per device and window; keeps
    the window struct."""
    return (
        events.groupBy(window.alias("window"), "device_id")
        .agg(
            F.avg("signal").alias("avg_signal"),
            F.min("signal").alias("min_signal"),
            F.max("signal").alias("max_signal"),
            F.count("*").alias("event_count"),
            *extra,
        )
        .withColumn("window_kind", F.lit(kind))
    )


def flatten_window(df: DataFrame) -> DataFrame:
    return df.withColumns(
        {"window_start": F.col("window.start"), "window_end": F.col("window.end")}
    ).drop("window")


# The events deduplication drops as late: event time at or behind the watermark. Every
# windowed job deduplicates first, so this is also their lateness rule: an event is kept
# whole or dropped whole, never counted in some of its windows only.
LATE_EVENT = LateRule("event", "event_time", "event_id", "event time at or behind the watermark")


def observed_events(settings: StreamingSettings, records: DataFrame, rule: LateRule = LATE_EVENT) -> DataFrame:
    """The valid events of a stateful job, its plan observing which of each batch's are late."""
    return rule.observed(valid_events(settings, records))


def behind_watermark(settings: StreamingSettings, records: DataFrame, watermark_ms: int,
                     rule: LateRule = LATE_EVENT) -> DataFrame:
    """The late events among ``records`` read again, as ``rule`` gives them. Only the records
    that may be at or behind the watermark are parsed (``records_maybe_at_or_before``)."""
    candidates = records_maybe_at_or_before(records, watermark_ms)
    return rule.selected(valid_events(settings, candidates), watermark_ms)
