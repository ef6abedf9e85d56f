"""Job ``windowed-averages``: per-device signal statistics per event-time window.

Tumbling (default 5 minutes) and sliding (10 minutes every 5) windows over deduplicated
events, appended once per window when the watermark passes its end; each device's latest
final tumbling window is merged into device_status.

When the sliding window and its step are multiples of the tumbling window (the defaults
are), the tumbling windows are panes the sliding windows are made of: sum, count, min and
max of a sliding window merge exactly from its panes. Spark then deduplicates and
aggregates once, into tumbling windows; each batch's split merges the sliding windows the
watermark closed in that batch from the panes it emitted and those the table holds. Other
settings run a dedup and an aggregation per window kind.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.config import StreamingSettings
from spark_jobs.contracts.tables import DEVICE_SIGNAL_AVERAGES, DEVICE_STATUS
from spark_jobs.jobs import JOB_TABLES
from spark_jobs.jobs.base import BatchContext, StreamingJob
from spark_jobs.jobs.event_time import (
    DEDUP_BY_DEVICE,
    behind_watermark,
    deduplicate,
    flatten_window,
    observed_events,
    signal_stats,
    sliding,
    tumbling,
)

PANE_SUM = "_pane_signal_sum"  # a pane's exact sum, for merging; never written


def from_panes(settings: StreamingSettings) -> bool:
    """Whether every sliding window is a union of tumbling windows."""
    pane = settings.tumbling_window.ms
    return settings.sliding_window.ms % pane == 0 and settings.sliding_step.ms % pane == 0


def device_signal_averages(settings: StreamingSettings, events: DataFrame) -> DataFrame:
    columns = DEVICE_SIGNAL_AVERAGES.job_schema.fieldNames()
    if from_panes(settings):
        panes = signal_stats(deduplicate(settings, events), tumbling(settings), "tumbling",
                             extra=[F.sum("signal").alias(PANE_SUM)])
        return flatten_window(panes).select(*columns, PANE_SUM)
    # Each branch gets its own watermark + dedup. Measured on Spark 4.2: when both branches
    # share one deduplicated DataFrame, the sliding windows made final by a no-data batch
    # are only emitted with the next data batch.
    per_window = signal_stats(deduplicate(settings, events), tumbling(settings), "tumbling").unionByName(
        signal_stats(deduplicate(settings, events), sliding(settings), "sliding")
    )
    return flatten_window(per_window).select(*columns)


def split(settings: StreamingSettings, rows: DataFrame, batch: BatchContext) -> dict[str, DataFrame]:
    if not from_panes(settings):
        return {DEVICE_SIGNAL_AVERAGES.name: rows, DEVICE_STATUS.name: final_tumbling_windows(rows)}
    panes = rows.drop(PANE_SUM)
    status = {DEVICE_STATUS.name: final_tumbling_windows(panes)}
    if not sliding_windows_close(settings, batch.previous_watermark_ms, batch.watermark_ms):
        return {DEVICE_SIGNAL_AVERAGES.name: panes, **status}
    return {DEVICE_SIGNAL_AVERAGES.name: panes.unionByName(
        closed_sliding_windows(settings, rows, batch.read_table(DEVICE_SIGNAL_AVERAGES.name), batch)), **status}


def final_tumbling_windows(windows: DataFrame) -> DataFrame:
    """device_status's window part: the tumbling windows the batch made final (its merge keeps
    each device's latest)."""
    return windows.where(F.col("window_kind") == "tumbling").select(
        "device_id", "window_start", "window_end", F.col("event_count").alias("window_event_count"),
        F.col("avg_signal").alias("window_avg_signal"))


def sliding_windows_close(settings: StreamingSettings, since_ms: int, until_ms: int) -> bool:
    """Whether a sliding window ends in ``(since_ms, until_ms]``: they end on multiples of the
    step, so a watermark that moved less than a step mostly closes none, and the table's
    earlier panes need not be read (with a 10 s trigger and a 5 minute step, 29 batches in 30)."""
    step = settings.sliding_step.ms
    return until_ms // step > since_ms // step


def closed_sliding_windows(
    settings: StreamingSettings, new_panes: DataFrame, table: DataFrame, batch: BatchContext
) -> DataFrame:
    """The sliding windows whose end the watermark passed in this batch, each merged from
    its panes: the ones this batch emitted and the earlier ones in the table (every pane
    of such a window ended at or before the watermark, so Spark has emitted it)."""
    length = settings.sliding_window.ms
    since, until = batch.previous_watermark_ms, batch.watermark_ms
    # a window ending in (since, until] starts after since - length: its panes too
    first_start, last_start = _timestamp(since - length), _timestamp(until)
    earlier = table.where(
        (F.col("window_kind") == "tumbling") & (F.col("window_start") > first_start)
        & (F.col("window_start") < last_start)
    ).withColumn(PANE_SUM, F.col("avg_signal") * F.col("event_count"))
    panes = new_panes.unionByName(earlier.select(*new_panes.columns))
    window = F.window("window_start", settings.sliding_window.spark, settings.sliding_step.spark)
    merged = (
        panes.groupBy(window.alias("window"), "device_id")
        .agg(
            (F.sum(PANE_SUM) / F.sum("event_count")).alias("avg_signal"),
            F.min("min_signal").alias("min_signal"),
            F.max("max_signal").alias("max_signal"),
            F.sum("event_count").alias("event_count"),
        )
        .where((F.col("window.end") > _timestamp(since)) & (F.col("window.end") <= _timestamp(until)))
        .withColumn("window_kind", F.lit("sliding"))
    )
    return flatten_window(merged).select(*DEVICE_SIGNAL_AVERAGES.job_schema.fieldNames())


def _timestamp(ms: int) -> Column:
    return F.timestamp_millis(F.lit(ms))


WINDOWED_AVERAGES = StreamingJob(
    name="windowed-averages",
    summary="per-device avg/min/max signal per tumbling and sliding window -> device_signal_averages; "
            "each device's last final window -> device_status",
    topics=lambda settings: [settings.events_topic],
    build=lambda settings, records: device_signal_averages(settings, observed_events(settings, records)),
    split=split,
    tables=JOB_TABLES["windowed-averages"],
    late_rule=behind_watermark,
    checkpoint_settings=("tumbling_window", "sliding_window", "sliding_step"),
    state_format=DEDUP_BY_DEVICE,  # 2: panes; 3: events deduplicated by device and id
    branches=lambda settings: 1 if from_panes(settings) else 2,
)
