"""Job ``windowed-averages``: per-device signal statistics per event-time window.

Tumbling (default 5 minutes) and sliding (10 minutes every 5) windows over deduplicated
events, appended once per window when the watermark passes its end.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from spark_jobs.config import StreamingSettings
from spark_jobs.contracts.tables import DEVICE_SIGNAL_AVERAGES
from spark_jobs.jobs import JOB_TABLES
from spark_jobs.jobs.base import StreamingJob
from spark_jobs.jobs.event_time import (
    behind_watermark,
    deduplicate,
    flatten_window,
    signal_stats,
    sliding,
    tumbling,
    valid_events,
)


def device_signal_averages(settings: StreamingSettings, events: DataFrame) -> DataFrame:
    # Each branch gets its own watermark + dedup. Measured on Spark 4.2: when both branches
    # share one deduplicated DataFrame, the sliding windows made final by a no-data batch
    # are only emitted with the next data batch.
    per_window = signal_stats(deduplicate(settings, events), tumbling(settings), "tumbling").unionByName(
        signal_stats(deduplicate(settings, events), sliding(settings), "sliding")
    )
    return flatten_window(per_window).select(*DEVICE_SIGNAL_AVERAGES.schema.fieldNames())


WINDOWED_AVERAGES = StreamingJob(
    name="windowed-averages",
    summary="per-device avg/min/max signal per tumbling and sliding window -> device_signal_averages",
    topics=lambda settings: [settings.events_topic],
    build=lambda settings, records: device_signal_averages(settings, valid_events(settings, records)),
    split=lambda settings, rows, batch: {DEVICE_SIGNAL_AVERAGES.name: rows},
    tables=JOB_TABLES["windowed-averages"],
    late_rule=behind_watermark,
    checkpoint_settings=("tumbling_window", "sliding_window", "sliding_step"),
    branches=2,
)
