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
from dataclasses import dataclass, field

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from spark_jobs import broker, failpoints, kafka_client
from spark_jobs.checkpoint import Checkpoint
from spark_jobs.config import Settings, spark_interval
from spark_jobs.delta_sink import DeltaSink
from spark_jobs.engines import detect_engines, read_kafka
from spark_jobs.errors import DataLossError, SigflowError
from spark_jobs.jobs import BatchContext, StreamingJob, get_job
from spark_jobs.python_kafka_source import DATA_LOSS_MARKER
from spark_jobs.spark import configure_session, get_spark

log = logging.getLogger("sigflow.runner")


@dataclass
class RunSummary:
    job: str
    batches: int = 0
    batches_skipped: int = 0  # replayed batches whose rows Delta already held
    rows_in: int = 0
    rows_written: dict[str, int] = field(default_factory=dict)

    def add(self, table: str, rows: int) -> None:
        self.rows_written[table] = self.rows_written.get(table, 0) + rows

    def line(self) -> str:
        written = ", ".join(f"{t}={n}" for t, n in self.rows_written.items()) or "nothing"
        skipped = f", {self.batches_skipped} replayed batch(es) already in Delta" if self.batches_skipped else ""
        return f"{self.job}: {self.batches} batch(es), {self.rows_in} rows in; written: {written}{skipped}"


class JobRun:
    """One job's streaming query, from its checkpoint."""

    def __init__(self, job: StreamingJob, settings: Settings, spark: SparkSession | None = None):
        self.job = job
        self.settings = settings
        self.bootstrap = broker.bootstrap_servers(settings)
        kafka_client.check_reachable(self.bootstrap)
        for topic in job.topics(settings):
            kafka_client.topic_partitions(self.bootstrap, topic)
        self.spark = spark or get_spark(settings, f"sigflow-{job.name}")
        configure_session(self.spark, settings)
        self.engines = detect_engines(self.spark, settings)
        self.sink = DeltaSink(self.spark, settings, self.engines)
        for spec in job.tables:
            self.sink.ensure_table(spec)
        self.checkpoint = Checkpoint(settings.checkpoint_uri(job.name))
        self.app_id = self.checkpoint.app_id(job.name)
        self.summary = RunSummary(job.name)

    def plan(self) -> DataFrame:
        records = read_kafka(
            self.spark, self.settings, self.engines, self.bootstrap, self.job.topics(self.settings)
        )
        return self.job.build(self.settings, records)

    def write_batch(self, batch_df: DataFrame, batch_id: int) -> None:
        offsets = self.checkpoint.offsets(batch_id)
        context = BatchContext(
            job=self.job.name,
            batch_id=batch_id,
            watermark_ms=offsets.watermark_ms if offsets else 0,
            batch_timestamp_ms=offsets.batch_timestamp_ms if offsets else int(time.time() * 1000),
            kafka_end_offsets=(offsets.sources[0] if offsets and offsets.sources else {}),
        )
        metadata = {
            "job": self.job.name,
            "batch_id": batch_id,
            "watermark_ms": context.watermark_ms,
            "kafka_end_offsets": context.kafka_end_offsets,
        }
        batch_df.persist()
        try:
            rows_in = batch_df.count()
            outputs = self.job.split(self.settings, batch_df, context)
            failpoints.hit("before_delta_commit", batch_id)
            written = {}
            for index, spec in enumerate(self.job.tables):
                if index == 1:
                    failpoints.hit("between_tables", batch_id)
                rows = self.sink.append(outputs[spec.name], spec, self.app_id, batch_id, metadata)
                written[spec.name] = rows
            failpoints.hit("after_delta_commit", batch_id)
        finally:
            batch_df.unpersist()
        self.summary.batches += 1
        self.summary.rows_in += rows_in
        if all(rows is None for rows in written.values()):
            self.summary.batches_skipped += 1
        for table, rows in written.items():
            self.summary.add(table, rows or 0)
        described = ", ".join(
            f"{t} {'already written' if n is None else n}" for t, n in written.items()
        )
        log.info("%s batch %d: %d rows in -> %s", self.job.name, batch_id, rows_in, described)

    def start(self, trigger_interval: str):
        return (
            self.plan()
            .writeStream.queryName(f"sigflow_{self.job.name}")
            .foreachBatch(self.write_batch)
            .option("checkpointLocation", self.checkpoint.uri)
            .trigger(processingTime=trigger_interval)
            .start()
        )

    def run_available_now(self) -> RunSummary:
        query = self.start("0 seconds")
        try:
            query.processAllAvailable()
        except StreamingQueryException as exc:
            raise _explain(self.job.name, exc) from None
        finally:
            query.stop()
        return self.summary

    def run_continuous(self, stop: threading.Event | None = None) -> RunSummary:
        stop = stop or _stop_on_signals()
        query = self.start(spark_interval(self.settings.trigger_interval, "trigger_interval"))
        try:
            while query.isActive and not stop.is_set():
                query.awaitTermination(0.5)
            if query.exception():
                raise _explain(self.job.name, query.exception())
            # Graceful: let the batch in flight finish before stopping.
            while query.isActive and query.status.get("isTriggerActive"):
                time.sleep(0.1)
        except StreamingQueryException as exc:
            raise _explain(self.job.name, exc) from None
        finally:
            query.stop()
        return self.summary


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _explain(job: str, exc: Exception) -> Exception:
    text = str(exc)
    if DATA_LOSS_MARKER in text or "might have been lost" in text or "OffsetOutOfRange" in text:
        detail = text.split(DATA_LOSS_MARKER + ":", 1)[-1].split("\n")[0].strip()
        return DataLossError(
            f"job {job} stopped: Kafka no longer has offsets its checkpoint needs: {detail}",
            "see docs/runbooks/checkpoint-lost-or-corrupt.md; SIGFLOW_FAIL_ON_DATA_LOSS=false skips ahead",
        )
    first = next((line for line in text.splitlines() if line.strip()), text)
    return SigflowError(f"job {job} failed: {first[:500]}", "see the log above for the batch that failed")


def run(job_name: str, settings: Settings, available_now: bool = True) -> RunSummary:
    run_ = JobRun(get_job(job_name), settings)
    return run_.run_available_now() if available_now else run_.run_continuous()


def run_pipeline(settings: Settings, job_names: list[str] | None = None) -> list[RunSummary]:
    """Every job (or those named), in dependency order, as available-now runs in one session."""
    from spark_jobs.jobs import JOBS

    spark = get_spark(settings, "sigflow-pipeline")
    summaries = []
    for name in job_names or list(JOBS):
        log.info("running %s", name)
        summaries.append(JobRun(get_job(name), settings, spark).run_available_now())
    return summaries
