"""pipeline_metrics: one row per finished batch, written once; table_status: one row per
table of the batch, rows or none, written once."""

from __future__ import annotations

import functools
import threading
from datetime import datetime, timezone
from operator import itemgetter

import pyarrow.compute as pc
import pyarrow.dataset as ds

from spark_jobs.contracts.tables import PIPELINE_METRICS, TABLE_STATUS, TableSpec
from spark_jobs.runtime.delta import table_access
from spark_jobs.runtime.delta.commit_info import CommitInfo
from spark_jobs.runtime.delta.sink import DeltaSink
from spark_jobs.runtime.metrics.progress import (
    Counting,
    last_batch_id,
    progress_dicts,
    progress_row,
    reached_latest,
)
from spark_jobs.runtime.metrics.summary import RunSummary


class MetricsRecorder:
    """Turns a query's progress into pipeline_metrics rows and the run's summary counts.

    Called at the start of each batch (the batches before it have their progress by then),
    every 0.5 s of a processing-time run, and when a run stops. A call with no batch newer
    than the last one examined returns at once; the Delta txn (app id, last batch id) makes
    a repeat after a restart a no-op, and a lock keeps the batch thread and the driving
    loop from recording at once.
    """

    def __init__(self, job: str, sink: DeltaSink, app_id: str, checkpoint_id: str, summary: RunSummary,
                 skip_empty: bool = False, tables: tuple[TableSpec, ...] = (), streaming=None):
        self.job, self.sink, self.app_id, self.summary = job, sink, app_id, summary
        self.tables = tables  # the job's own tables, whose table_status rows it writes
        self.streaming = streaming  # the settings a table's final_through waits by (a session's gap)
        # a real-time query commits a batch every interval, records or not: rows only for
        # the batches that read some
        self.skip_empty = skip_empty
        self.checkpoint_id = checkpoint_id
        self.counting = Counting()  # set once the plan is built (metrics.Counting)
        self.output_rows: dict[int, tuple[int, int]] = {}  # batch -> (output rows, late events)
        self.table_rows: dict[int, dict[str, int]] = {}  # batch -> rows written per table
        self.rows: dict[int, dict] = {}  # batch -> its pipeline_metrics row
        self.examined_through = -1  # the newest batch whose progress was turned into its row (or skipped)
        self.complete_as_of: dict[int, datetime | None] = {}  # batch -> the time its tables hold Kafka up to
        self.newest_complete: datetime | None = None  # the trigger time of this run's last batch that read all
        self.lock = threading.Lock()

    def batch_written(self, batch_id: int, output_rows: int, late_events: int,
                      table_rows: dict[str, int] | None = None) -> None:
        self.output_rows[batch_id] = (output_rows, late_events)
        self.table_rows[batch_id] = table_rows or {}

    def record(self, query) -> None:
        with self.lock:
            self._record(query)

    def _record(self, query) -> None:
        # Most calls come between batches, with nothing new: they must cost nothing, since
        # reading every progress and the table's log twice a second took CPU from the batch
        # in flight (a real-time run's p95 latency, docs/streaming-facts.md).
        if last_batch_id(query) <= self.examined_through:
            return
        fresh, examined = [], self.examined_through
        for progress in progress_dicts(query, self.examined_through):
            batch_id = int(progress["batchId"])
            examined = max(examined, batch_id)
            if batch_id in self.rows or (self.skip_empty and not progress.get("numInputRows")):
                continue
            # a Kafka sink's batch (real-time mode) reports its output in the progress; the
            # same read, so a batch whose progress arrives meanwhile cannot go uncounted
            output, late = self.output_rows.get(batch_id) or (_sink_output_rows(progress), 0)
            row = progress_row(self.job, progress, output, late, self.counting)
            if reached_latest(progress):
                self.newest_complete = row["batch_time"]
            self.complete_as_of[batch_id] = self.newest_complete or self._promised_before_run
            fresh.append({**row, "checkpoint_id": self.checkpoint_id})
        if fresh:  # a failure here leaves the rows unrecorded, so the next call retries them
            self.sink.append_unwritten(fresh, PIPELINE_METRICS, self.app_id, CommitInfo(job=self.job), batch_of=_batch)
            self._record_status(fresh)
        self.examined_through = examined
        for row in fresh:
            self.rows[row["batch_id"]] = row
            self.summary.rows_in += row["input_rows"]
            self.summary.rows_dropped_by_watermark += row["rows_dropped_by_watermark"]
            self.summary.duplicates_dropped += row["duplicates_dropped"]
            self.summary.state_rows = row["state_rows"]


    @functools.cached_property
    def _promised_before_run(self) -> datetime | None:
        """What a batch cut short by max_offsets_per_trigger before this run's first complete
        one still promises: the newest batch_time table_status holds for the job, read once."""
        if not self.tables:
            return None
        recorded = table_access.read_arrow(self.sink.uri(TABLE_STATUS), ["batch_time"],
                                           (ds.field("job") == self.job) & (ds.field("table_name") == self.tables[0].name))
        return pc.max(recorded["batch_time"]).as_py() if recorded.num_rows else None

    def _record_status(self, fresh: list[dict]) -> None:
        """The table_status rows of the batches just recorded, under the same application
        transaction as their pipeline_metrics rows (a repeat after a restart writes none).
        batch_time is the batch's trigger time only where the batch read all Kafka had then;
        a batch max_offsets_per_trigger cut short repeats the last time that held."""
        if not self.tables:
            return
        now = datetime.now(timezone.utc)
        rows = [{"table_name": spec.name, "job": self.job, "checkpoint_id": self.checkpoint_id,
                 "batch_id": row["batch_id"], "batch_time": self.complete_as_of.get(row["batch_id"]),
                 **self._finality(spec, row["watermark"]),
                 "rows_written": self.table_rows.get(row["batch_id"], {}).get(spec.name, 0), "recorded_at": now}
                for row in fresh for spec in self.tables]
        self.sink.append_unwritten(rows, TABLE_STATUS, self.app_id, CommitInfo(job=self.job), batch_of=_batch)


    def _finality(self, spec: TableSpec, watermark) -> dict:
        """Up to where the table's rows are final, by its own column; none before the first
        event (Spark reports the epoch then) or for a table with no such column."""
        seen = watermark if watermark is not None and watermark.timestamp() > 0 else None
        if spec.finality is None or seen is None:
            return {"final_through": None, "final_column": None}
        return {"final_through": spec.finality.final_through(seen, self.streaming),
                "final_column": spec.finality.column}


_batch = itemgetter("batch_id")  # a pipeline_metrics or table_status row's batch


def _sink_output_rows(progress: dict) -> int:
    """What the query's sink wrote in the batch (-1, unknown, for foreachBatch: 0)."""
    return max(int((progress.get("sink") or {}).get("numOutputRows") or 0), 0)
