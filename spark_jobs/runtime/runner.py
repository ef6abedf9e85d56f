"""Wires a job to its Kafka source, its Delta tables, a trigger and a checkpoint.

Two ways to run:

* ``available_now``: process everything in Kafka, then exit. Spark's own availableNow
  trigger runs no trailing no-data batch (measured), so windows, timeouts and outer-join
  rows made final by the new watermark would wait for the next run. We instead drive a
  processing-time query with ``processAllAvailable()``, which returns only after that
  no-data batch ran, then stop it.
* ``continuous``: a processing-time trigger until SIGTERM/SIGINT, which stops the query
  after the batch in flight.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from py4j.protocol import Py4JNetworkError
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.config import Settings, duration_seconds, spark_interval
from spark_jobs.contracts.tables import LATE_EVENTS, PIPELINE_METRICS
from spark_jobs.errors import BrokerUnavailable, DataLossError, DriverDied, SigflowError
from spark_jobs.jobs.base import BatchContext, StreamingJob
from spark_jobs.jobs.registry import get_job
from spark_jobs.local import broker
from spark_jobs.ops import status
from spark_jobs.runtime import checkpoint_guards, failpoints, kafka_client
from spark_jobs.runtime.checkpoint import Checkpoint
from spark_jobs.runtime.engines import detect_engine
from spark_jobs.runtime.metrics import (
    QUERY_PREFIX,
    Counting,
    listen,
    progress_dicts,
    progress_row,
    source_scans,
)
from spark_jobs.runtime.python_kafka_source import DATA_LOSS_MARKER
from spark_jobs.runtime.spark import configure_session, get_spark

log = logging.getLogger("sigflow.runner")
# Operating-system errors of a table write that the operator, not the code, must fix.
STORAGE_FAILURES = ("No space left on device", "Disk quota exceeded", "Read-only file system", "Permission denied")


@dataclass
class RunSummary:
    job: str
    counts_late: bool = False  # the job has a lateness rule (every stateful event job)
    batches: int = 0
    batches_skipped: int = 0  # replayed batches whose rows Delta already held
    batches_behind_a_watermark: int = 0  # batches with records that ran after a watermark was set
    rows_in: int = 0
    rows_written: dict[str, int] = field(default_factory=dict)
    rows_dropped_by_watermark: int = 0
    duplicates_dropped: int = 0
    state_rows: int = 0
    seconds: float = 0.0  # wall time of the run, when measured (pipeline)

    def add(self, table: str, rows: int) -> None:
        self.rows_written[table] = self.rows_written.get(table, 0) + rows

    def zero_late_reason(self) -> str:
        """Why nothing was dropped late, when nothing was (a zero should say why)."""
        if not self.counts_late or self.rows_dropped_by_watermark:
            return ""
        if self.batches_behind_a_watermark:
            return "none behind the watermark"
        return ("all records came before a watermark was set: cut the stream into batches "
                "with SIGFLOW_MAX_OFFSETS_PER_TRIGGER to see late data dropped")

    def line(self) -> str:
        written = ", ".join(f"{t}={n}" for t, n in self.rows_written.items()) or "nothing"
        skipped = f", {self.batches_skipped} replayed batch(es) already in Delta" if self.batches_skipped else ""
        stateful = ""
        if self.counts_late:
            late = f"{self.rows_dropped_by_watermark} dropped late"
            if self.zero_late_reason():
                late += f" ({self.zero_late_reason()})"
            stateful = f"; {self.duplicates_dropped} duplicates removed, {late}, {self.state_rows} state rows"
        return (
            f"{self.job}: {self.batches} batch(es), {self.rows_in} rows in; "
            f"written: {written}{stateful}{skipped}"
        )


class JobRun:
    """One job's streaming query, from its checkpoint."""

    def __init__(self, job: StreamingJob, settings: Settings, spark: SparkSession | None = None):
        self.job = job
        self.checkpoint = Checkpoint(settings.checkpoint_uri(job.name))
        checkpoint_guards.check_no_pending_rewind(self.checkpoint, job.name)
        recovered_start = self.checkpoint.starting_offsets()
        if recovered_start:  # a checkpoint rebuilt by `sigflow checkpoint recover`
            settings = settings.replace(starting_offsets=recovered_start)
        checkpoint_guards.check_settings_compatible(self.checkpoint, job, settings)
        self.settings = settings
        self.bootstrap = broker.bootstrap_servers(settings)
        kafka_client.check_reachable(self.bootstrap)
        for topic in job.topics(settings):
            kafka_client.topic_partitions(self.bootstrap, topic)
        self.spark = spark or get_spark(settings, f"sigflow-{job.name}")
        configure_session(self.spark, settings)
        self.progress_log = listen(self.spark)  # a progress line per batch
        self.engine = detect_engine(self.spark, settings)
        self.sink = self.engine.sink(self.spark, settings)
        self.tables = job.tables + ((LATE_EVENTS,) if job.late_rule else ())
        for spec in self.tables + (PIPELINE_METRICS,):
            self.sink.ensure_table(spec)
        self.app_id = self.checkpoint.app_id(job.name)
        self.checkpoint_id = self.checkpoint.checkpoint_id(job.name)
        self.summary = RunSummary(job.name, counts_late=job.late_rule is not None)
        self.output_rows: dict[int, tuple[int, int]] = {}  # batch -> (output rows, late events)
        self.metrics: dict[int, dict] = {}  # batch -> its pipeline_metrics row
        self.metrics_lock = threading.Lock()  # batches (Spark's thread) and the driving loop record
        self.query = None

    def plan(self) -> DataFrame:
        records = self.engine.read_kafka(
            self.spark, self.settings, self.bootstrap, self.job.topics(self.settings)
        )
        plan = self.job.build(self.settings, records)
        self.counting = Counting(scans=source_scans(plan), branches=self.job.branches)
        self.progress_log.follow(self.job.name, self.counting, self.settings.progress_file(self.job.name))
        return plan

    def write_batch(self, batch_df: DataFrame, batch_id: int) -> None:
        if self.query is not None:  # the batches before this one have their progress by now
            self.record_metrics(self.query)
        offsets = self.checkpoint.offsets(batch_id)
        previous = self.checkpoint.offsets(batch_id - 1) if batch_id > 0 else None
        if not self.settings.fail_on_data_loss and offsets and previous:
            self._report_skipped_offsets(offsets, previous)
        if previous and offsets and previous.watermark_ms > 0 and offsets.sources != previous.sources:
            self.summary.batches_behind_a_watermark += 1
        context = BatchContext(
            job=self.job.name,
            batch_id=batch_id,
            watermark_ms=offsets.watermark_ms if offsets else 0,
            batch_timestamp_ms=offsets.batch_timestamp_ms if offsets else int(time.time() * 1000),
            kafka_end_offsets=(offsets.sources[0] if offsets and offsets.sources else {}),
        )
        metadata = {
            "job": self.job.name,
            "checkpoint_id": self.checkpoint_id,
            "app_id": self.app_id,
            "batch_id": batch_id,
            "watermark_ms": context.watermark_ms,
            "kafka_end_offsets": context.kafka_end_offsets,
        }
        batch_df.persist()
        try:
            rows_out = batch_df.count()
            outputs = self.job.split(self.settings, batch_df, context)
            if self.job.late_rule:
                outputs[LATE_EVENTS.name] = self.late_events(context, previous)
            failpoints.hit("before_delta_commit", batch_id, self.job.name)
            written = {}
            for index, spec in enumerate(self.tables):
                if index == 1:
                    failpoints.hit("between_tables", batch_id, self.job.name)
                rows = self.sink.append(outputs[spec.name], spec, self.app_id, batch_id, metadata)
                written[spec.name] = rows
            failpoints.hit("after_delta_commit", batch_id, self.job.name)
        finally:
            for frame in context.cached:
                frame.unpersist()
            batch_df.unpersist()
        self.summary.batches += 1
        late = written.get(LATE_EVENTS.name) or 0
        self.output_rows[batch_id] = (sum(n or 0 for n in written.values()) - late, late)
        if all(rows is None for rows in written.values()):
            self.summary.batches_skipped += 1
        for table, rows in written.items():
            self.summary.add(table, rows or 0)
        described = ", ".join(
            f"{t} {'already written' if n is None else n}" for t, n in written.items()
        )
        # detail for -v: the per-batch line people read is the progress sentence (metrics)
        log.debug("%s batch %d: %d result rows -> %s", self.job.name, batch_id, rows_out, described)

    def _report_skipped_offsets(self, offsets, previous) -> None:
        """Say which offsets Kafka lost and the source skipped (failOnDataLoss=false): a
        partition whose end went backwards (topic recreated) or whose earliest offset is
        past where the previous batch ended (retention)."""
        if not previous.sources or not offsets.sources:
            return
        for topic, parts in offsets.sources[0].items():
            before = previous.sources[0].get(topic, {})
            earliest = {p: low for p, (low, _) in kafka_client.offset_bounds(
                self.bootstrap, topic, [int(p) for p in parts]).items()}
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
        the same records are read again and the job's lateness rule applied. Measured on
        Spark 4.2: stateful operators drop late rows using the watermark of entry N-1
        (``previous``, the batch before's offsets) and evict state with entry N's
        (docs/streaming-facts.md).
        """
        late_watermark_ms = previous.watermark_ms if previous else 0
        if late_watermark_ms <= 0 or not batch.kafka_end_offsets:
            return self.spark.createDataFrame([], LATE_EVENTS.schema)
        records = self.engine.read_kafka_range(
            self.spark, self.settings, self.bootstrap,
            self.job.topics(self.settings), previous.sources[0], batch.kafka_end_offsets,
        )
        late = self.job.late_rule(self.settings, records, late_watermark_ms)
        return late.select(
            F.lit(self.job.name).alias("job"), "event_id", "device_id", "event_time", "signal",
            "missed", F.timestamp_millis(F.lit(late_watermark_ms)).alias("watermark"),
            F.lit(batch.batch_id).cast("bigint").alias("batch_id"), "topic", "partition", "offset",
        )

    def record_metrics(self, query) -> None:
        """Append finished batches' progress to pipeline_metrics, once per batch: at the start
        of the next batch, every 0.5 s of a processing-time run, and when a run stops. The
        Delta txn (app id, last batch id) makes a repeat a no-op."""
        with self.metrics_lock:
            self._record_metrics(query)

    def _record_metrics(self, query) -> None:
        fresh = []
        for progress in progress_dicts(query):
            batch_id = int(progress["batchId"])
            if batch_id in self.metrics:
                continue
            output, late = self.output_rows.get(batch_id, (0, 0))
            self.metrics[batch_id] = row = progress_row(self.job.name, progress, output, late, self.counting)
            fresh.append(row)
            self.summary.rows_in += row["input_rows"]
            self.summary.rows_dropped_by_watermark += row["rows_dropped_by_watermark"]
            self.summary.duplicates_dropped += row["duplicates_dropped"]
            self.summary.state_rows = row["state_rows"]
        done = self.sink.committed_version(PIPELINE_METRICS, self.app_id)
        fresh = [r for r in fresh if done is None or r["batch_id"] > done]
        if fresh:
            frame = self.spark.createDataFrame(fresh, PIPELINE_METRICS.schema)
            last = max(r["batch_id"] for r in fresh)
            self.sink.append(frame, PIPELINE_METRICS, self.app_id, last, {"job": self.job.name})

    def start(self, trigger_interval: str):
        self.query = (
            self.plan()
            .writeStream.queryName(f"{QUERY_PREFIX}{self.job.name}")
            .foreachBatch(self.write_batch)
            .option("checkpointLocation", self.checkpoint.uri)
            .trigger(processingTime=trigger_interval)
            .start()
        )
        return self.query

    @contextmanager
    def _running(self, trigger_interval: str):
        """The query for the duration of a run: errors explained, stopped and metered after."""
        query = self.start(trigger_interval)
        status.mark_running(self.settings, self.job.name, trigger_interval)
        jvm_alive = True
        try:
            yield query
        except StreamingQueryException as exc:
            raise self._failure(query, exc) from None
        except (Py4JNetworkError, ConnectionRefusedError):  # py4j finds no JVM to talk to
            jvm_alive = False
            raise _jvm_died(self.job.name, self.settings) from None
        finally:
            if jvm_alive:  # a dead driver JVM has no query left to stop
                query.stop()
            status.mark_stopped(self.settings, self.job.name)
        self.record_metrics(query)

    def _failure(self, query, exc: Exception) -> Exception:
        if "OutOfMemoryError" in str(exc):
            return _jvm_died(self.job.name, self.settings)
        if kafka_client.is_reachable(self.bootstrap, timeout_s=3):
            return _explain(self.job.name, exc)
        self.record_metrics(query)  # the batches done before Kafka went away
        return _KafkaGone(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    def _run(self, trigger_interval: str, drive, stop: threading.Event | None = None) -> RunSummary:
        """Run the query; while Kafka is away, wait with backoff and start again from the
        checkpoint (a restarted query replays at most the batch that was in flight)."""
        while True:
            try:
                with self._running(trigger_interval) as query:
                    drive(query)
                return self.summary
            except _KafkaGone as gone:
                if not self._await_kafka(str(gone), stop):
                    return self.summary

    def _await_kafka(self, cause: str, stop: threading.Event | None) -> bool:
        """Back off (1, 2, 4 ... 30 s) until Kafka answers. False when stopped meanwhile;
        BrokerUnavailable once broker_outage_budget is spent."""
        budget = duration_seconds(self.settings.broker_outage_budget, "broker_outage_budget")
        began = time.monotonic()
        delay, attempt = 1.0, 0
        while True:
            waited = time.monotonic() - began
            if waited >= budget:
                raise BrokerUnavailable(
                    f"job {self.job.name} stopped: Kafka at {self.bootstrap} unreachable for "
                    f"{waited:.0f} s (broker_outage_budget {self.settings.broker_outage_budget}); "
                    f"last error: {cause[:300]}",
                    "bring Kafka back and rerun: the job resumes from its checkpoint, "
                    "nothing is lost (docs/runbooks/broker-outage.md)",
                )
            attempt += 1
            pause = min(delay, budget - waited)
            log.warning(
                "%s: Kafka at %s is unreachable; retry %d in %.0f s, giving up after %s. "
                "Check `sigflow broker status` or the Kafka cluster; the job resumes from its "
                "checkpoint when Kafka is back (docs/runbooks/broker-outage.md)",
                self.job.name, self.bootstrap, attempt, pause, self.settings.broker_outage_budget,
            )
            if stop is None:
                time.sleep(pause)
            elif stop.wait(pause):
                return False
            if kafka_client.is_reachable(self.bootstrap, timeout_s=3):
                log.warning(
                    "%s: Kafka at %s is back after %.0f s; resuming from the checkpoint",
                    self.job.name, self.bootstrap, time.monotonic() - began,
                )
                return True
            delay = min(delay * 2, 30.0)

    def run_available_now(self) -> RunSummary:
        return self._run("0 seconds", lambda query: query.processAllAvailable())

    def run_continuous(self, stop: threading.Event | None = None) -> RunSummary:
        stop = stop or _stop_on_signals()

        def drive(query) -> None:
            while query.isActive and not stop.is_set():
                query.awaitTermination(0.5)
                self.record_metrics(query)
            if query.exception():
                raise query.exception()
            # Graceful: let the batch in flight finish before stopping.
            while query.isActive and query.status.get("isTriggerActive"):
                time.sleep(0.1)

        return self._run(spark_interval(self.settings.trigger_interval, "trigger_interval"), drive, stop)


class _KafkaGone(Exception):
    """A query failed while Kafka was unreachable: retried, not reported."""


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _jvm_died(job: str, settings: Settings) -> DriverDied:
    """The driver JVM died in a batch. Measured cause: a batch too big for its heap (the
    JVM exits on OutOfMemoryError, and py4j then finds no one answering). The batch keeps
    the offsets it was planned with, so only more memory gets it through."""
    limit = settings.max_offsets_per_trigger or "no limit"
    return DriverDied(
        f"job {job} stopped: the Spark driver died during a batch, most likely out of memory "
        f"(max_offsets_per_trigger {limit}, spark_driver_memory {settings.spark_driver_memory})",
        "raise SIGFLOW_SPARK_DRIVER_MEMORY and rerun: the job redoes the batch from its checkpoint "
        "with the offsets it was planned with, exactly once; lower SIGFLOW_MAX_OFFSETS_PER_TRIGGER "
        "to keep later batches smaller (docs/runbooks/job-crashed.md)",
    )


def _explain(job: str, exc: Exception) -> Exception:
    text = str(exc)
    if DATA_LOSS_MARKER in text or "have been lost" in text or "OffsetOutOfRange" in text:
        detail = text.split(DATA_LOSS_MARKER + ":", 1)[-1].split("\n")[0].strip()
        return DataLossError(
            f"job {job} stopped: Kafka no longer has offsets its checkpoint needs: {detail}",
            "see docs/runbooks/checkpoint-lost-or-corrupt.md; SIGFLOW_FAIL_ON_DATA_LOSS=false skips ahead",
        )
    storage = next((reason for reason in STORAGE_FAILURES if reason in text), None)
    if storage:
        return SigflowError(
            f"job {job} stopped: a table write failed with '{storage}'; the batch was not "
            "committed, and Delta readers see none of its rows",
            "fix the storage (space, permissions), then rerun the job: it redoes the batch "
            "from its checkpoint, exactly once (docs/runbooks/job-crashed.md)",
        )
    first = next((line for line in text.splitlines() if line.strip()), text)
    return SigflowError(f"job {job} failed: {first[:500]}", "see the log above for the batch that failed")


def run(job_name: str, settings: Settings, available_now: bool = True) -> RunSummary:
    run_ = JobRun(get_job(job_name), settings)
    return run_.run_available_now() if available_now else run_.run_continuous()


def run_pipeline(
    settings: Settings, job_names: list[str] | None = None, on_job_done: Callable[[RunSummary], None] | None = None
) -> list[RunSummary]:
    """Every job (or those named), in dependency order, as available-now runs in one session."""
    from spark_jobs.jobs.registry import JOBS

    spark = get_spark(settings, "sigflow-pipeline")
    summaries = []
    for name in job_names or list(JOBS):
        log.debug("running %s", name)
        started = time.monotonic()
        summaries.append(JobRun(get_job(name), settings, spark).run_available_now())
        summaries[-1].seconds = time.monotonic() - started
        if on_job_done:
            on_job_done(summaries[-1])
    return summaries


def summary_table(summaries: list[RunSummary]) -> list[str]:
    """The runs side by side, one row per job, then why a zero dropped-late is a zero."""
    header = ("job", "batches", "records in", "rows written", "duplicates", "dropped late", "state rows")
    rows = [header]
    for s in summaries:
        stateful = [f"{s.duplicates_dropped:,}", f"{s.rows_dropped_by_watermark:,}", f"{s.state_rows:,}"]
        rows.append((s.job, f"{s.batches:,}", f"{s.rows_in:,}", f"{sum(s.rows_written.values()):,}",
                     *(stateful if s.counts_late else ["-", "-", "-"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in rows]
    notes = [f"{s.job}: {why}" for s in summaries if (why := s.zero_late_reason())]
    return lines + notes
