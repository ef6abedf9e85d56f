"""Job ``dedup``: device events without repeats -> device_events_deduplicated."""

from __future__ import annotations

from pyspark.sql import DataFrame

from spark_jobs.config import StreamingSettings
from spark_jobs.contracts.tables import DEVICE_EVENTS_DEDUPLICATED
from spark_jobs.jobs import JOB_TABLES
from spark_jobs.jobs.base import BatchContext, StreamingJob
from spark_jobs.jobs.event_time import (
    DEDUP_BY_DEVICE,
    behind_watermark,
    deduplicate,
    observed_events,
)


def split(settings: StreamingSettings, deduped: DataFrame, batch: BatchContext) -> dict[str, DataFrame]:
    return {DEVICE_EVENTS_DEDUPLICATED.name: deduped}


DEDUP = StreamingJob(
    name="dedup",
    summary="device events without repeats of a device's event_id -> device_events_deduplicated",
    topics=lambda settings: [settings.events_topic],
    build=lambda settings, records: deduplicate(settings, observed_events(settings, records)),
    split=split,
    tables=JOB_TABLES["dedup"],
    late_rule=behind_watermark,
    state_format=DEDUP_BY_DEVICE,
)
