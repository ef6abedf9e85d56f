"""Wires a real-time job to its Kafka source, Spark's real-time trigger, a Kafka sink and a
checkpoint, with the supervision of every other job (``runner.JobRun``): the lease, the
checkpoint guards, Kafka outages waited out, failures explained.

Real-time mode (Spark 4.1+) runs long batches whose tasks read and write each record as it
arrives; the trigger's duration is how often offsets are committed, not a latency. Each
task holds a slot for the whole batch, one per Kafka partition, so the session needs at
least as many slots as the source has partitions: checked before the query starts, as is
the output topic (a missing one fails the query only after 60 s). Its Kafka sink is
at-least-once: a batch stopped before its commit is read and sent again by the next run.

* ``available_now``: run until a committed batch reaches the offsets Kafka held at the
  start, then stop; its batches are Spark's shortest (5 s), so it ends soon after.
* ``continuous``: until SIGTERM/SIGINT; the batch in flight is stopped at once (what it
  forwarded is forwarded; the next run sends it again).
"""

from __future__ import annotations

import logging
import threading

from pyspark.sql import DataFrame

from spark_jobs.config import Settings
from spark_jobs.errors import ConfigError, SigflowError
from spark_jobs.jobs.base import RealTimeJob
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.kafka import offsets as kafka_offsets
from spark_jobs.runtime.kafka import source as kafka_source
from spark_jobs.runtime.kafka.connection import KafkaConnection
from spark_jobs.runtime.metrics.progress import (
    Counting,
    progress_dicts,
    query_name,
)
from spark_jobs.runtime.metrics.recorder import MetricsRecorder
from spark_jobs.runtime.metrics.summary import RunSummary
from spark_jobs.runtime.runner import JobRun, run_lineage, stop_on_signals
from spark_jobs.runtime.waiting import wait_until

log = logging.getLogger("sigflow.runner")

# How often an available-now run looks at the checkpoint for the batch that caught up.
CAUGHT_UP_POLL_S = 0.5
# Spark's spark.sql.streaming.realTimeMode.minBatchDuration: a shorter interval is refused.
MIN_CHECKPOINT_INTERVAL_S = 5


class RealTimeRun(JobRun):
    """One real-time job's query from its checkpoint. pipeline_metrics gets a row per
    committed batch (the figures of its progress), as for every other job."""

    job: RealTimeJob

    # hooks of JobRun._prepare, as a real-time run takes them

    def _effective_settings(self, job: RealTimeJob, settings: Settings) -> Settings:
        interval = settings.streaming.real_time_checkpoint_interval
        if interval.seconds < MIN_CHECKPOINT_INTERVAL_S:
            raise ConfigError(f"real_time_checkpoint_interval {interval} is shorter than Spark's minimum of "
                              f"{MIN_CHECKPOINT_INTERVAL_S} seconds for a real-time batch",
                              "set it to 5 seconds or more: it is how often offsets are committed, not a latency")
        return settings

    def _check_topics(self, job: RealTimeJob, settings: Settings, answered: kafka_admin.Answer) -> None:
        self.output_topic = job.output_topic(settings.streaming)
        try:
            kafka_admin.topic_partitions(self.kafka, self.output_topic, listing=answered.listing)
        except SigflowError:
            raise ConfigError(
                f"{job.name}: its output topic {self.output_topic!r} does not exist at {self.kafka}",
                "create it with `sigflow topics create` (or the sigflow_deploy DAG)") from None

    def _slots_needed(self) -> int:
        return sum(len(parts) for parts in self.partitions.values())

    def _check_session(self, job: RealTimeJob, settings: Settings) -> None:
        slots, slots_needed = self.spark.sparkContext.defaultParallelism, self._slots_needed()
        if slots < slots_needed:
            raise ConfigError(
                f"{job.name}: real-time mode holds a task slot per Kafka partition for the whole batch; "
                f"its topics have {slots_needed} partitions and this session has {slots} slots",
                "give the job at least that many cores (spark_master local[N], or the cluster's cores; "
                "docs/jobs/alert-fastpath.md)")

    def _tables_written(self, job: RealTimeJob) -> tuple:
        return ()  # its output is a Kafka topic

    def _wire(self, job: RealTimeJob, settings: Settings) -> None:
        self.summary = RunSummary(job.name, counts_late=False)
        self.recorder = MetricsRecorder(job.name, self.sink, self.app_id, self.checkpoint_id, self.summary,
                                        skip_empty=True)
        self.lineage = run_lineage(self, tables={}, topics_out=[self.output_topic])

    def plan(self) -> DataFrame:
        records = kafka_source.read_stream(self.spark, self.settings, self.kafka,
                                           self.job.topics(self.settings.streaming), real_time=True)
        self.progress_log.follow(self.job.name, Counting(), self.settings.progress_file(self.job.name))
        return self.job.build(self.settings.streaming, records)

    def start(self, trigger_interval: str):
        self.query = (
            self.plan()
            .writeStream.queryName(query_name(self.job.name))
            .format("kafka")
            .options(**KafkaConnection.of(self.kafka).spark_options())
            .option("topic", self.output_topic)
            .option("checkpointLocation", self.checkpoint.uri)
            .outputMode("update")
            .trigger(realTime=trigger_interval)
            .start()
        )
        return self.query

    def record_metrics(self, query) -> None:
        self.recorder.record(query)  # a batch's output is what the Kafka sink sent
        self.summary.batches = len(self.recorder.rows)
        self.summary.rows_written = {self.output_topic: sum(row["output_rows"] for row in self.recorder.rows.values())}

    def run_available_now(self) -> RunSummary:
        ends = {topic: {p: end for p, (_, end) in kafka_offsets.offset_bounds(self.kafka, topic, parts).items()}
                for topic, parts in self.partitions.items()}

        def drive(query) -> None:
            while query.isActive and not self.checkpoint.committed_through(ends):
                query.awaitTermination(CAUGHT_UP_POLL_S)
                self.record_metrics(query)
            if query.exception():
                raise query.exception()
            self._await_committed_progress(query)

        return self._run(f"{MIN_CHECKPOINT_INTERVAL_S} seconds", drive)

    def _await_committed_progress(self, query) -> None:
        """Spark writes a batch's commit before it reports the batch's progress, so a run
        stopped as soon as the commit shows could lose the last batch's figures (its alerts
        forwarded, counted as none, seen on a loaded machine): wait for them, 30 s at most."""
        last = self.checkpoint.last_committed()
        if last is None:
            return
        reported = wait_until(lambda: any(int(p["batchId"]) >= last for p in progress_dicts(query)),
                              timeout_s=30, every_s=0.2, give_up=lambda: not query.isActive)
        if not reported:
            log.warning("%s: batch %d's progress did not arrive within 30 s; its figures are left out",
                        self.job.name, last)
        self.record_metrics(query)

    def run_continuous(self, stop: threading.Event | None = None) -> RunSummary:
        stop = stop or stop_on_signals()

        def drive(query) -> None:
            while query.isActive and not stop.is_set():
                query.awaitTermination(CAUGHT_UP_POLL_S)
                self.record_metrics(query)
            if query.exception():
                raise query.exception()

        return self._run(self.settings.streaming.real_time_checkpoint_interval.spark, drive, stop)
