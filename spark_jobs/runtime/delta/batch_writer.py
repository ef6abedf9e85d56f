"""One micro-batch: its rows split into the job's tables, its late events found again when
Spark dropped some, each table appended once per (app id, batch id) (``foreachBatch``)."""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import LATE_EVENTS, TableSpec
from spark_jobs.jobs.base import BatchContext, StreamingJob
from spark_jobs.runtime import failpoints
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.lease import Lease
from spark_jobs.runtime.delta import concurrent_writes
from spark_jobs.runtime.delta.sink import DeltaSink
from spark_jobs.runtime.kafka import client as kafka_client
from spark_jobs.runtime.kafka import source as kafka_source
from spark_jobs.runtime.kafka.connection import KafkaConnection
from spark_jobs.runtime.metrics import progress as metrics
from spark_jobs.runtime.metrics.recorder import MetricsRecorder
from spark_jobs.runtime.metrics.summary import RunSummary

log = logging.getLogger("sigflow.runner")


class BatchWriter:
    """The ``foreachBatch`` function of a job's query."""

    def __init__(
        self, job: StreamingJob, settings: Settings, spark: SparkSession, sink: DeltaSink,
        checkpoint: Checkpoint, kafka: KafkaConnection, tables: tuple[TableSpec, ...], app_id: str, checkpoint_id: str,
        summary: RunSummary, recorder: MetricsRecorder, before_batch: Callable[[], None], lease: Lease,
    ):
        self.job, self.settings, self.spark, self.sink = job, settings, spark, sink
        self.checkpoint, self.kafka, self.tables = checkpoint, kafka, tables
        self.app_id, self.checkpoint_id = app_id, checkpoint_id
        self.summary, self.recorder = summary, recorder
        self.before_batch = before_batch  # the recorder catching up on the batches before
        self.lease = lease
        self.replayable_upto = -1  # the last batch an earlier query planned (set at each start)

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        self.lease.check()  # a run that lost its lease must not write beside its successor
        self.before_batch()
        offsets = self.checkpoint.offsets(batch_id)
        previous = self.checkpoint.offsets(batch_id - 1) if batch_id > 0 else None
        if not self.settings.kafka.fail_on_data_loss and offsets and previous:
            self._report_skipped_offsets(offsets, previous)
        if previous and offsets and previous.watermark_ms > 0 and offsets.sources != previous.sources:
            self.summary.batches_behind_a_watermark += 1
        context = BatchContext(
            job=self.job.name,
            batch_id=batch_id,
            watermark_ms=offsets.watermark_ms if offsets else 0,
            batch_timestamp_ms=offsets.batch_timestamp_ms if offsets else int(time.time() * 1000),
            kafka_end_offsets=(offsets.sources[0] if offsets and offsets.sources else {}),
            previous_watermark_ms=previous.watermark_ms if previous else 0,
            read_table=lambda name: self.spark.read.format("delta").load(self.settings.table_uri(name)),
        )
        metadata = {
            "job": self.job.name,
            "checkpoint_id": self.checkpoint_id,
            "app_id": self.app_id,
            "batch_id": batch_id,
            "watermark_ms": context.watermark_ms,
            "kafka_end_offsets": context.kafka_end_offsets,
        }
        no_input = offsets is not None and _read_nothing(offsets, previous)
        write_tasks = self._write_tasks(offsets, previous)
        self.first_commit = threading.Lock()  # taken by the batch's first table commit
        batch_df.persist()
        try:
            outputs = self.job.split(self.settings.streaming, batch_df, context)
            failpoints.hit("before_delta_commit", batch_id, self.job.name, self.spark)
            if not outputs:
                # the batch's plan must run: stateful operators commit their state for the
                # batch only then, and Spark counts the batch's input from it
                batch_df.count()
            job_tables = [spec for spec in self.tables if spec is not LATE_EVENTS]
            written = self._write_tables(outputs, set(), job_tables, batch_id, metadata, write_tasks)
            if self.job.late_rule:
                late = {} if no_input or not self._dropped_late() else {
                    LATE_EVENTS.name: self.late_events(context, previous)}
                written |= self._write_tables(late, set(late), (LATE_EVENTS,), batch_id, metadata, write_tasks)
            failpoints.hit("after_delta_commit", batch_id, self.job.name)
        finally:
            for frame in context.cached:
                frame.unpersist()
            batch_df.unpersist()
        self.summary.batches += 1
        # a replayed batch's metrics row counts what its first attempt wrote
        counted = {spec.name: self.sink.rows_written_before(spec, metadata) if written[spec.name] is None
                   else written[spec.name] for spec in self.tables}
        late = counted.get(LATE_EVENTS.name, 0)
        self.recorder.batch_written(batch_id, sum(counted.values()) - late, late)
        if any(rows is None for rows in written.values()) and not any(written.values()):
            self.summary.batches_skipped += 1  # a replay: what had rows was already committed
        for table, rows in written.items():
            self.summary.add(table, rows or 0)
        described = ", ".join(
            f"{t} {'already written' if n is None else n}" for t, n in written.items()
        )
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
                      metadata: dict, write_tasks: int | None) -> dict[str, int | None]:
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
            frame, rows = outputs.get(spec.name), None
            has_rows = frame is not None and (spec.name in with_rows or not frame.isEmpty())
            self.lease.check()  # again at each commit: a driver stalled since the batch began may have lost it
            if has_rows:
                if write_tasks:
                    frame = frame.coalesce(write_tasks)
                rows = self.sink.append(frame, spec, self.app_id, batch_id, metadata, replay_possible)
            if not has_rows or (rows is None and not replay_possible):
                rows = 0
            # the crash point between tables: once the first of them has committed, while
            # the others may still be writing
            if self.first_commit.acquire(blocking=False):
                failpoints.hit("between_tables", batch_id, self.job.name)
            return rows

        return concurrent_writes.run_all(self.spark, {spec.name: partial(write, spec) for spec in tables})

    def _report_skipped_offsets(self, offsets, previous) -> None:
        """Say which offsets Kafka lost and the source skipped (failOnDataLoss=false): a
        partition whose end went backwards (topic recreated) or whose earliest offset is
        past where the previous batch ended (retention)."""
        if not previous.sources or not offsets.sources:
            return
        for topic, parts in offsets.sources[0].items():
            before = previous.sources[0].get(topic, {})
            earliest = {p: low for p, (low, _) in kafka_client.offset_bounds(
                self.kafka, topic, [int(p) for p in parts]).items()}
            for p, end in parts.items():
                was = before.get(p)
                if was is None:
                    continue
                if end < was:
                    what = f"{topic}[{p}] is back at offset {end} after {was} (topic recreated?)"
                elif earliest[int(p)] > was:
                    what = f"offsets {was}..{earliest[int(p)] - 1} of {topic}[{p}] are no longer in Kafka"
                else:
                    continue
                log.warning("data loss skipped (failOnDataLoss=false): %s; resuming at %s",
                            what, min(end, max(was, earliest[int(p)])))

    def late_events(self, batch: BatchContext, previous) -> DataFrame:
        """The valid events of this batch that the job's stateful operators dropped as late.

        The offset log gives the batch's exact Kafka range (end of entry N-1 to end of N), so
        the same records are read again and the job's lateness rule applied: only for a batch
        whose operators dropped rows as late (``_dropped_late``), since the rule selects
        exactly the rows Spark counted (tests/spark_jobs/runtime/test_metrics.py). Measured on
        Spark 4.2: stateful operators drop late rows using the watermark of entry N-1
        (``previous``, the batch before's offsets) and evict state with entry N's
        (docs/streaming-facts.md).
        """
        late_watermark_ms = previous.watermark_ms if previous else 0
        if late_watermark_ms <= 0 or not batch.kafka_end_offsets:
            return self.spark.createDataFrame([], LATE_EVENTS.schema)
        records = kafka_source.read_range(
            self.spark, self.settings, self.kafka,
            self.job.topics(self.settings.streaming), previous.sources[0], batch.kafka_end_offsets,
        )
        late = self.job.late_rule(self.settings.streaming, records, late_watermark_ms)
        return late.select(
            F.lit(self.job.name).alias("job"), "event_id", "device_id", "event_time", "signal",
            "missed", F.timestamp_millis(F.lit(late_watermark_ms)).alias("watermark"),
            F.lit(batch.batch_id).cast("bigint").alias("batch_id"), "topic", "partition", "offset",
            F.lit(self.checkpoint_id).alias("checkpoint_id"),
        )


def _read_nothing(offsets, previous) -> bool:
    """Whether a batch read no Kafka record: its end offsets are the batch before's, or, in a
    query's first batch, every partition ends at offset 0 (nothing was ever written to its
    topics). Such a batch cannot have dropped a record as late."""
    if previous is not None:
        return offsets.sources == previous.sources
    ends = [end for source in offsets.sources if source for parts in source.values() for end in parts.values()]
    return bool(ends) and all(end == 0 for end in ends)
