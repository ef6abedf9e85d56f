"""How a micro-batch commits exactly once: the protocol, in the order it runs.

``BatchCommit`` is the ``foreachBatch`` function of a job's query. For batch N:

1. **Lease.** Stop unless this run still holds the checkpoint's lease: a run that lost it
   (another took over while this one stalled) must not write beside its successor. Checked
   again before each table's commit (step 4).
2. **Offsets.** Batch N's entry of the offset log and N-1's: its Kafka range, the watermark
   it ran with, and whether an earlier query planned it. Only such a batch can be a replay
   (the lease admits one run, so a batch this query planned is new by construction). N-1's
   watermark, the one its stateful operators drop late rows by, goes to the batch's tasks
   (a local property), so its plan can tell its late rows as it reads them.
3. **Split.** The job's pure split of the batch into rows per table (``StreamingJob.split``).
4. **Appends.** Once the run's tables exist (it creates them while its query starts) and
   the batches before have their metrics rows: every table with rows, at once, one commit
   each. Each row is stamped with the checkpoint id and batch id that wrote it (what a
   rewind deletes by); each commit carries the batch's ``CommitInfo`` (job, checkpoint id,
   app id, batch id, watermark, Kafka end offsets). A batch that may be a replay is checked
   against the table and appended under Delta's application transaction (txnAppId = app
   id, txnVersion = N), so Delta itself refuses a second copy; a new batch skips that
   lookup, which rebuilds the table's state on every append (``sink.DeltaSink.append``). An
   append that found its table gone (Delta made it again, its commit version 0) stops the
   job there (``tables_kept.TableLost``). A table without rows gets no commit. A batch
   whose split gave no table, or a replay its tables already hold, still runs its plan to
   the end, where its stateful operators commit their state.
5. **Late events.** Only when the job's stateful operators dropped rows as late (Spark's
   own count): the rows the plan observed as late (``late_events.observed``), or, where it
   could not judge them, the batch's range read again from where the query reads (Kafka, or
   device_events_raw in a replay) and the job's lateness rule applied; appended to
   late_events through delta-rs, once as in step 4 (``DeltaSink.append_held``).
6. **Metrics row.** The batch's pipeline_metrics row (``MetricsRecorder``), appended under
   its own application transaction: its presence says every table of the batch was written.
7. **Spark's commit.** Returning lets Spark write ``commits/N``. A crash anywhere before it
   re-runs batch N in the next run, whose step 4 finds what was already committed.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import LATE_EVENTS, TableSpec
from spark_jobs.jobs.base import BatchContext, StreamingJob
from spark_jobs.jobs.batch_values import batch_bigint
from spark_jobs.jobs.late_rows import LATE_WATERMARK_PROPERTY
from spark_jobs.runtime import failpoints, late_events
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.lease import Lease
from spark_jobs.runtime.delta import concurrent_writes
from spark_jobs.runtime.delta.commit_info import CommitInfo
from spark_jobs.runtime.delta.sink import DeltaSink, with_kept_names
from spark_jobs.runtime.kafka import offsets as kafka_offsets
from spark_jobs.runtime.kafka.connection import KafkaConnection
from spark_jobs.runtime.kafka.source import KafkaRecords
from spark_jobs.runtime.metrics import progress as metrics
from spark_jobs.runtime.metrics.recorder import MetricsRecorder
from spark_jobs.runtime.metrics.summary import RunSummary
from spark_jobs.runtime.replay.source import RawRecords
from spark_jobs.runtime.rows import has_rows

log = logging.getLogger("sigflow.runner")


@dataclass(frozen=True)
class CommitContext:
    """What a run hands its commit: the job, where it reads and writes, the lease it writes
    under and the ids its commits carry, and where each batch is counted. Built where the
    run is prepared (``JobRun._wire``), ``records`` changed for a replay from raw."""

    job: StreamingJob
    settings: Settings
    spark: SparkSession
    sink: DeltaSink
    checkpoint: Checkpoint
    lease: Lease
    kafka: KafkaConnection
    records: KafkaRecords | RawRecords  # where the query reads: a batch's range is read again there
    tables: tuple[TableSpec, ...]
    app_id: str
    checkpoint_id: str
    summary: RunSummary
    recorder: MetricsRecorder
    # waits until the run's tables exist: it creates them while its query starts (JobRun._prepare)
    tables_created: Callable[[], object] = lambda: None


class BatchCommit:
    """The ``foreachBatch`` function of a job's query: the protocol above, for one run."""

    def __init__(self, context: CommitContext, before_batch: Callable[[], None]):
        self.job, self.settings, self.spark, self.sink = context.job, context.settings, context.spark, context.sink
        self.checkpoint, self.lease, self.kafka, self.tables = (context.checkpoint, context.lease, context.kafka,
                                                                context.tables)
        self.records = context.records
        self.app_id, self.checkpoint_id = context.app_id, context.checkpoint_id
        self.summary, self.recorder = context.summary, context.recorder
        self.tables_created = context.tables_created
        self.before_batch = before_batch  # the recorder catching up on the batches before
        self.replayable_upto = -1  # the last batch an earlier query planned

    def query_starting(self) -> None:
        """At each start of the query: the batches already in the offset log are the only
        ones that can be replays (step 2)."""
        batches = self.checkpoint.offset_batches()
        self.replayable_upto = batches[-1] if batches else -1

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        # 1. lease
        self.lease.check()
        # 2. offsets
        offsets = self.checkpoint.offsets(batch_id)
        previous = self.checkpoint.offsets(batch_id - 1) if batch_id > 0 else None
        self._note_offsets(offsets, previous)
        context = self._context(batch_id, offsets, previous)
        self._late_watermark_for_tasks(context.previous_watermark_ms)
        info = CommitInfo(job=self.job.name, checkpoint_id=self.checkpoint_id, app_id=self.app_id, batch_id=batch_id,
                          watermark_ms=context.watermark_ms, kafka_end_offsets=context.kafka_end_offsets)
        write_tasks = self._write_tasks(offsets, previous)
        self.first_commit = threading.Lock()  # taken by the batch's first table commit
        batch_df.persist()
        try:
            # 3. split
            outputs = self.job.split(self.settings.streaming, batch_df, context)
            self.tables_created()
            self.before_batch()
            failpoints.hit("before_delta_commit", batch_id, self.job.name, self.spark)
            # 4. appends
            job_tables = [spec for spec in self.tables if spec is not LATE_EVENTS]
            written = self._write_tables(outputs, set(), job_tables, batch_id, info, write_tasks)
            if not outputs or any(rows is None for rows in written.values()):
                # The batch's plan must run to its end even when no table needed it (a
                # replay whose tables hold it already read one row at most): each partition
                # of a stateful operator commits its state only then, Spark fails the query
                # on a partition that did not (STATE_STORE_COMMIT_VALIDATION_FAILED), and
                # counts the batch's input from it.
                batch_df.count()
            # 5. late events
            if self.job.late_rule:
                no_input = offsets is not None and _read_nothing(offsets, previous)
                written[LATE_EVENTS.name] = 0 if no_input or not self._dropped_late() else self._append_late(
                    context, previous, info)
            failpoints.hit("after_delta_commit", batch_id, self.job.name)
        finally:
            for frame in context.cached:
                frame.unpersist()
            batch_df.unpersist()
        # 6. metrics row
        self._record(batch_id, info, written)
        # 7. Spark's commit: on return

    def _late_watermark_for_tasks(self, watermark_ms: int) -> None:
        """The watermark this batch's stateful operators drop late rows by (N-1's), for the
        tasks of every job the batch runs (its writes' threads inherit it): how its plan tells
        its late rows (jobs/late_rows.py). None where it has none yet."""
        self.spark.sparkContext.setLocalProperty(LATE_WATERMARK_PROPERTY, str(watermark_ms) if watermark_ms > 0 else None)

    def _note_offsets(self, offsets, previous) -> None:
        if not self.settings.kafka.fail_on_data_loss and offsets and previous:
            kafka_offsets.report_skipped(self.kafka, offsets, previous)
        if previous and offsets and previous.watermark_ms > 0 and offsets.sources != previous.sources:
            self.summary.batches_behind_a_watermark += 1

    def _context(self, batch_id: int, offsets, previous) -> BatchContext:
        return BatchContext(
            job=self.job.name,
            batch_id=batch_id,
            watermark_ms=offsets.watermark_ms if offsets else 0,
            batch_timestamp_ms=offsets.batch_timestamp_ms if offsets else int(time.time() * 1000),
            kafka_end_offsets=(offsets.sources[0] if offsets and offsets.sources else {}),
            previous_watermark_ms=previous.watermark_ms if previous else 0,
            read_table=lambda name: self.spark.read.format("delta").load(self.settings.table_uri(name)),
        )

    def _record(self, batch_id: int, info: CommitInfo, written: dict[str, int | None]) -> None:
        """The batch's metrics row and the run's summary; a replayed batch's row counts what
        its first attempt wrote."""
        self.summary.batches += 1
        counted = {spec.name: self.sink.rows_written_before(spec, info) if written[spec.name] is None
                   else written[spec.name] for spec in self.tables}
        late = counted.get(LATE_EVENTS.name, 0)
        self.recorder.batch_written(batch_id, sum(counted.values()) - late, late, counted)
        if any(rows is None for rows in written.values()) and not any(written.values()):
            self.summary.batches_skipped += 1  # a replay: what had rows was already committed
        for table, rows in written.items():
            self.summary.add(table, rows or 0)
        described = ", ".join(f"{t} {'already written' if n is None else n}" for t, n in written.items())
        # detail for -v: the per-batch line people read is the progress sentence (metrics)
        log.debug("%s batch %d -> %s", self.job.name, batch_id, described)

    def _write_tasks(self, offsets, previous) -> int | None:
        """How many tasks each table's write of this batch needs (``records_per_write_task``),
        from the Kafka records between the batch's offsets and the batch before's; a first
        batch counts ``max_offsets_per_trigger``, its bound. None when unknown: the writes
        keep the plan's partitions."""
        if offsets is None or not offsets.sources:
            return None
        if previous is not None and previous.sources:
            records = sum(end - previous.sources[0].get(topic, {}).get(partition, 0)
                          for topic, parts in offsets.sources[0].items() for partition, end in parts.items())
        elif self.settings.kafka.max_offsets_per_trigger:
            records = self.settings.kafka.max_offsets_per_trigger
        else:
            return None
        return max(1, -(-records // self.settings.spark.records_per_write_task))

    def _dropped_late(self) -> bool:
        """Whether the batch's stateful operators dropped rows as late, by Spark's own count
        once its plan has run; True when that count cannot be read. Most batches drop none,
        and then late_events needs no second read of the batch's Kafka range."""
        dropped = metrics.rows_dropped_by_watermark(self.spark, metrics.query_name(self.job.name))
        return dropped is None or dropped > 0

    def _write_tables(self, outputs: dict[str, DataFrame], with_rows: set[str], tables, batch_id: int,
                      info: CommitInfo, write_tasks: int | None) -> dict[str, int | None]:
        """Append the rows of each of ``tables`` at once (``concurrent_writes``), each in
        ``write_tasks`` tasks when known: rows written per table, None where the batch was
        already committed.

        Only a table with rows gets a commit: ``with_rows`` are known to have some, the
        others are asked (a one-row read of the batch's cached rows, measured
        docs/streaming-facts.md). A table without rows gets none, neither a Spark append (a
        write job and a transaction that commit nothing) nor a delta-rs empty commit (after
        which the table's next Spark append rebuilds its state, 1 to 5 s). Where a batch
        left a table without rows, ``recover`` reads from pipeline_metrics, whose row of a
        batch says that it finished with every table written (``recover.py``)."""
        replay_possible = batch_id <= self.replayable_upto

        def write(spec: TableSpec) -> int | None:
            frame, rows = with_kept_names(outputs.get(spec.name), spec), None
            self.lease.check()  # again at each commit: a driver stalled since the batch began may have lost it
            if frame is not None and spec.merge_key:
                # its few rows are collected anyway: no emptiness check first (a Spark job of its
                # own), and a merge of none commits nothing
                rows = self.sink.merge(frame, spec, info)
            else:
                any_rows = frame is not None and (spec.name in with_rows or has_rows(frame))
                if any_rows:
                    frame = _stamped(frame, spec, info)
                    if write_tasks:
                        frame = frame.coalesce(write_tasks)
                    rows = self.sink.append(frame, spec, info, replay_possible, still_held=self.lease.check)
                if not any_rows or (rows is None and not replay_possible):
                    rows = 0
            self._committed(batch_id)
            return rows

        return concurrent_writes.run_all(self.spark, {spec.name: partial(write, spec) for spec in tables})

    def _committed(self, batch_id: int) -> None:
        """The crash point between tables: once the first of them has committed, while the
        others may still be writing."""
        if self.first_commit.acquire(blocking=False):
            failpoints.hit("between_tables", batch_id, self.job.name)

    def _append_late(self, batch: BatchContext, previous, info: CommitInfo) -> int | None:
        """Step 5's rows (a batch's late events are few, at most its records, as the
        device_status rows a merge collects), appended through delta-rs."""
        self.lease.check()
        rows = self.batch_late_events(batch, previous)
        written = self.sink.append_held(rows, LATE_EVENTS, info, batch.batch_id <= self.replayable_upto,
                                        still_held=self.lease.check)
        if rows.num_rows:
            self._committed(batch.batch_id)
        return written

    def batch_late_events(self, batch: BatchContext, previous) -> pa.Table:
        """The valid events of this batch that the job's stateful operators dropped as late.

        Measured on Spark 4.2: stateful operators drop late rows using the watermark of entry
        N-1 (``previous``, the batch before's offsets) and evict state with entry N's
        (docs/semantics.md, what Spark does underneath). The batch's plan observed them
        (``late_events.observed``: it judged its rows by that watermark, which step 2 gave
        its tasks). Where it could not, the offset log gives the batch's exact Kafka range
        (end of entry N-1 to end of N), so the same records are read again (from Kafka, or
        from raw in a replay) and the job's lateness rule applied. Either way only for a
        batch whose operators dropped rows as late (``_dropped_late``), since the rule
        selects exactly the rows Spark counted (tests/spark_jobs/runtime/test_metrics.py).
        """
        late_watermark_ms = batch.previous_watermark_ms
        rows = late_events.LATE_ROW.empty_table()
        if late_watermark_ms > 0 and batch.kafka_end_offsets:
            rows = late_events.observed(self.spark, metrics.query_name(self.job.name))
            if rows is None:
                log.info("%s batch %d: its plan could not tell its late events; reading its records again",
                         self.job.name, batch.batch_id)
                records = self.records.range(previous.sources[0], batch.kafka_end_offsets)
                rows = self.job.late_rule(self.settings.streaming, records, late_watermark_ms).toArrow()
        return late_events.table_rows(rows, self.job.name, late_watermark_ms, batch.batch_id, self.checkpoint_id)


def _read_nothing(offsets, previous) -> bool:
    """Whether a batch read no Kafka record: its end offsets are the batch before's, or, in a
    query's first batch, every partition ends at offset 0 (nothing was ever written to its
    topics). Such a batch cannot have dropped a record as late."""
    if previous is not None:
        return offsets.sources == previous.sources
    ends = [end for source in offsets.sources if source for parts in source.values() for end in parts.values()]
    return bool(ends) and all(end == 0 for end in ends)


def _stamped(frame: DataFrame, spec: TableSpec, info: CommitInfo) -> DataFrame:
    """The rows with the table's columns saying which batch of which checkpoint wrote them
    (``WRITTEN_BY``) and, in a table reconcile corrects, that the stream wrote them
    (``REVISION`` 0), where the job's split left them out, in the table's column order."""
    stamps = {"checkpoint_id": F.lit(info.checkpoint_id), "batch_id": batch_bigint(info.batch_id),
              "revision": F.lit(0), "corrected_at": F.lit(None).cast("timestamp")}
    present = set(frame.columns)
    missing = [column for column in spec.columns if column not in present and column in stamps]
    if not missing:
        return frame
    return frame.withColumns({column: stamps[column] for column in missing}).select(*spec.columns)
