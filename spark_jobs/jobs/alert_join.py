"""Job ``alert-join``: each alert with its device's signal just before it (stream-stream join).

Alerts and events are both watermarked (``alert_watermark_delay``, ``watermark_delay``)
and joined on ``device_id`` with a time range: the events of the device with
``event_time`` in ``[alert_time - alert_context, alert_time]``. The range bounds both sides,
so Spark evicts each side's state once the other side's watermark makes a match impossible
(a state value watermark, docs/semantics.md).

Events are deduplicated by ``event_id`` and alerts by ``alert_id`` before the join, as in
the dedup job. One left outer
join from alerts serves both tables: matched rows are emitted as soon as
both sides are there (-> alert_signal_context), and an alert with no event in its range
is emitted with nulls once the watermark proves none can come (-> alerts_without_telemetry).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.config import StreamingSettings
from spark_jobs.contracts.events import valid_device_alerts
from spark_jobs.contracts.tables import ALERT_SIGNAL_CONTEXT, ALERTS_WITHOUT_TELEMETRY
from spark_jobs.jobs import JOB_TABLES
from spark_jobs.jobs.base import BatchContext, StreamingJob
from spark_jobs.jobs.event_time import (
    DEDUP_BY_DEVICE,
    behind_watermark,
    deduplicate,
    observed_events,
)
from spark_jobs.jobs.late_rows import LateRule

ALERT_COLUMNS = ["alert_id", "device_id", "alert_time", "severity", "kind"]


def alerts_with_signal(settings: StreamingSettings, alert_records: DataFrame, event_records: DataFrame) -> DataFrame:
    # An alert_id is one alert: a producer that re-sends (at-least-once) must not make it
    # join, or be reported without telemetry, twice. Same rule as events, on the alerts' delay.
    alerts = (
        UNREPORTED_ALERT.observed(valid_device_alerts(alert_records, settings.max_clock_ahead))
        .select(*ALERT_COLUMNS)
        .withWatermark("alert_time", settings.alert_watermark_delay.spark)
        .dropDuplicatesWithinWatermark(["alert_id"])
    )
    # A re-sent event would join every alert in its range once more: events are deduplicated
    # first, as in the dedup job, so each (alert, event) pair is one row.
    events = deduplicate(settings, observed_events(settings, event_records, UNJOINED_EVENT)).select(
        F.col("device_id").alias("event_device_id"), "event_id", "event_time", "signal"
    )
    return alerts.join(events, in_context(settings), "leftOuter").select(*ALERT_COLUMNS, "event_id", "event_time", "signal")


def in_context(settings: StreamingSettings) -> Column:
    """The join's condition: an event of the alert's device (``event_device_id``) with
    ``event_time`` in ``[alert_time - alert_context, alert_time]``."""
    context = F.expr(f"INTERVAL {int(settings.alert_context.seconds)} SECONDS")
    return (
        (F.col("device_id") == F.col("event_device_id"))
        & (F.col("event_time") >= F.col("alert_time") - context)
        & (F.col("event_time") <= F.col("alert_time"))
    )


def build(settings: StreamingSettings, records: DataFrame) -> DataFrame:
    return alerts_with_signal(
        settings,
        records.where(F.col("topic") == settings.alerts_topic),
        records.where(F.col("topic") == settings.events_topic),
    )


# Spark keeps one watermark per query (``multiple_watermark_policy`` combines the two sides'
# delays) and filters each side's input with it on its own time column; the range condition
# only decides when buffered rows are evicted. Pinned against Spark's own
# ``numRowsDroppedByWatermark`` by the alert-join tests. A dropped alert is listed with its
# ``alert_id`` as ``event_id`` and ``alert_time`` as ``event_time``, ``record_kind`` "alert".
UNJOINED_EVENT = LateRule("event", "event_time", "event_id",
                          "event time at or behind the watermark: joined with no alert")
UNREPORTED_ALERT = LateRule("alert", "alert_time", "alert_id",
                            "alert time at or behind the watermark: neither joined nor reported", signal=None)


def dropped_by_the_join(settings: StreamingSettings, records: DataFrame, watermark_ms: int) -> DataFrame:
    """Rows the join drops as late, among ``records`` read again: on each side, time at or
    behind the query watermark."""
    events = behind_watermark(settings, records.where(F.col("topic") == settings.events_topic), watermark_ms,
                              UNJOINED_EVENT)
    alerts = valid_device_alerts(records.where(F.col("topic") == settings.alerts_topic), settings.max_clock_ahead)
    return events.unionByName(UNREPORTED_ALERT.selected(alerts, watermark_ms))


def split(settings: StreamingSettings, joined: DataFrame, batch: BatchContext) -> dict[str, DataFrame]:
    return {
        ALERT_SIGNAL_CONTEXT.name: joined.where(F.col("event_id").isNotNull()),
        ALERTS_WITHOUT_TELEMETRY.name: joined.where(F.col("event_id").isNull()).select(*ALERT_COLUMNS),
    }


ALERT_JOIN = StreamingJob(
    name="alert-join",
    summary="alerts joined with their device's recent events -> alert_signal_context, "
    "alerts_without_telemetry",
    topics=lambda settings: [settings.events_topic, settings.alerts_topic],
    build=build,
    split=split,
    tables=JOB_TABLES["alert-join"],
    late_rule=dropped_by_the_join,
    checkpoint_settings=("alert_context", "multiple_watermark_policy"),
    # 2: alerts deduplicated by alert_id before the join; 3: events by device and id
    state_format=DEDUP_BY_DEVICE,
)
