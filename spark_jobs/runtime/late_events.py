"""A batch's rows of late_events: as the batch's own plan observed them, or found by reading
its records again where that observation cannot answer (spark_jobs/jobs/late_rows.py)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.jobs.late_rows import OBSERVATION_PREFIX, ROW_FIELDS
from spark_jobs.runtime.metrics.progress import batch_in_flight

# a late row as the rule gives it, its time in microseconds
LATE_ROW = pa.schema(list(zip(ROW_FIELDS, (pa.string(), pa.string(), pa.string(), pa.int64(), pa.float64(),
                                           pa.string(), pa.string(), pa.int32(), pa.int64()), strict=True)))


def observed(spark, query_name: str) -> pa.Table | None:
    """The late rows the batch in flight of ``query_name`` observed as its plan ran; None when
    it has no such observation (no parser's JAR) or one of them could not judge a row (its
    tasks carried no watermark). A row the observation met twice (a stage run again) is one."""
    execution = batch_in_flight(spark, query_name)
    if execution is None:
        return None
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    metrics = jvm.scala.jdk.javaapi.CollectionConverters.asJava(execution.observedMetrics())
    found = [json.loads(row.json()) for name, row in metrics.items() if name.startswith(OBSERVATION_PREFIX)]
    if not found or any(observation["unjudged"] for observation in found):
        return None
    once = {(r["record_kind"], r["topic"], r["partition"], r["offset"]): r for o in found for r in o["rows"]}
    return pa.Table.from_pylist(list(once.values()), schema=LATE_ROW)


def table_rows(rows: pa.Table, job: str, watermark_ms: int, batch_id: int, checkpoint_id: str) -> pa.Table:
    """Late rows as late_events rows of ``job``'s batch, dropped by ``watermark_ms``."""
    count = rows.num_rows
    stamped = {
        "event_time": pc.cast(rows["event_time_us"], pa.timestamp("us", tz="UTC")),
        "job": pa.array([job] * count, pa.string()),
        "watermark": pa.array([watermark_ms * 1000] * count, pa.timestamp("us", tz="UTC")),
        "batch_id": pa.array([batch_id] * count, pa.int64()),
        "checkpoint_id": pa.array([checkpoint_id] * count, pa.string()),
    }
    kept = rows.drop_columns(["event_time_us"])
    for name, column in stamped.items():
        kept = kept.append_column(name, column)
    return kept
