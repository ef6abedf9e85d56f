"""Job ``fleet-rollup``: a second aggregation chained on the per-device tumbling windows.

Spark 3.4+ keeps a watermark per stateful operator, so rows the first aggregation emits
(stamped with their window's time via ``window_time``) are counted by the second one, not
dropped as late (docs/semantics.md, windows).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.config import StreamingSettings
from spark_jobs.contracts.tables import FLEET_SIGNAL_ROLLUPS
from spark_jobs.jobs import JOB_TABLES
from spark_jobs.jobs.base import StreamingJob
from spark_jobs.jobs.event_time import (
    DEDUP_BY_DEVICE,
    behind_watermark,
    deduplicate,
    flatten_window,
    observed_events,
    signal_stats,
    tumbling,
)


def fleet_signal_rollups(settings: StreamingSettings, events: DataFrame) -> DataFrame:
    return rollup(settings, deduplicate(settings, events))


def rollup(settings: StreamingSettings, events: DataFrame) -> DataFrame:
    """The fleet windows over deduplicated events, streaming or batch (reconcile's recount)."""
    per_device = signal_stats(events, tumbling(settings), "tumbling")
    fleet_window = F.window(
        F.window_time("window"), settings.fleet_window.spark
    )
    rollup = per_device.groupBy(fleet_window.alias("window")).agg(
        F.size(F.collect_set("device_id")).cast("bigint").alias("device_count"),
        F.avg("avg_signal").alias("mean_device_avg_signal"),
        F.max("max_signal").alias("max_signal"),
        F.count("*").alias("device_window_count"),
    )
    return flatten_window(rollup).select(*FLEET_SIGNAL_ROLLUPS.job_schema.fieldNames())


FLEET_ROLLUP = StreamingJob(
    name="fleet-rollup",
    summary="fleet-wide rollup chained on per-device windows -> fleet_signal_rollups",
    topics=lambda settings: [settings.events_topic],
    build=lambda settings, records: fleet_signal_rollups(settings, observed_events(settings, records)),
    split=lambda settings, rows, batch: {FLEET_SIGNAL_ROLLUPS.name: rows},
    tables=JOB_TABLES["fleet-rollup"],
    late_rule=behind_watermark,
    checkpoint_settings=("tumbling_window", "fleet_window"),
    state_format=DEDUP_BY_DEVICE,  # 1 and 2 deduplicated events by event_id alone
)
