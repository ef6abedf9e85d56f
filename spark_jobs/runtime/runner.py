"""Wires a job to its Kafka source, its Delta tables, a trigger and a checkpoint.

Two ways to run:

* ``available_now``: process everything in Kafka, then exit: a processing-time query
  driven with ``processAllAvailable()``, which returns only after the trailing no-data
  batch ran (the windows, timeouts and outer-join rows the new watermark made final), then
  stopped; the same query a continuous run and a replay drive (docs/semantics.md).
* ``continuous``: a processing-time trigger until SIGTERM/SIGINT, which stops the query
  after the batch in flight.

Either first finishes a replay from device_events_raw that a restart recorded in the
checkpoint (``Checkpoint.replay_from_raw``): the same plan and commit over raw's rows up to
where raw ends, then Kafka from there, on the same checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import (
    DEVICE_EVENTS_RAW,
    LATE_EVENTS,
    PIPELINE_METRICS,
    TABLE_STATUS,
    TableSpec,
)
from spark_jobs.errors import SigflowError
from spark_jobs.jobs.base import StreamingJob
from spark_jobs.runtime import classpath
from spark_jobs.runtime.checkpoint import guards as checkpoint_guards
from spark_jobs.runtime.checkpoint import tables_kept
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.lease import Lease
from spark_jobs.runtime.commit import BatchCommit, CommitContext
from spark_jobs.runtime.delta import concurrent_writes, table_access
from spark_jobs.runtime.delta.fence import fence_after_takeover
from spark_jobs.runtime.delta.sink import DeltaSink
from spark_jobs.runtime.kafka import address as kafka_address
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.kafka import source as kafka_source
from spark_jobs.runtime.lineage_events import (
    PARENT_PROPERTIES,
    RunLineage,
    topic_dataset,
)
from spark_jobs.runtime.metrics.progress import (
    Counting,
    listen,
    progress_dicts,
    query_name,
    source_scans,
)
from spark_jobs.runtime.metrics.recorder import MetricsRecorder
from spark_jobs.runtime.metrics.summary import RunSummary
from spark_jobs.runtime.replay.source import RawRecords
from spark_jobs.runtime.spark import configure_session, get_spark
from spark_jobs.runtime.stopped_mid_batch import StopGate, told_as_a_stop
from spark_jobs.runtime.supervision import Supervisor
from spark_jobs.runtime.waiting import wait_until

log = logging.getLogger("sigflow.runner")
# how long a stop waits for the batch in flight to finish
STOP_GRACE_S = 300


def tables_written(job: StreamingJob) -> tuple[TableSpec, ...]:
    """The tables a micro-batch run of ``job`` writes, besides pipeline_metrics and table_status."""
    return job.tables + ((LATE_EVENTS,) if job.late_rule else ())


class JobRun:
    """One job's streaming query, from its checkpoint: the checks before it starts, the
    wiring (source, trigger, checkpoint, sinks) and a graceful stop on signals; its
    ``Supervisor`` (runtime/supervision.py) keeps the query going through Kafka outages and
    explains its failures. Each batch is written by a
    ``BatchCommit`` (runtime/commit.py: the commit protocol); pipeline_metrics by a ``MetricsRecorder``. It holds the checkpoint's
    lease (``lease.Lease``) from its construction until its run ends."""

    def __init__(self, job: StreamingJob, settings: Settings, spark: SparkSession | None = None,
                 shared: bool = False):
        self.job = job
        self.checkpoint = Checkpoint(settings.checkpoint_uri(job.name))
        # held from here until the run ends: before the app id is read or made, so two runs
        # starting at once cannot each make one; a restart being applied holds it too. A run
        # ``shared`` with other jobs' in one application is stopped by request (lease.py).
        self.lease = Lease(self.checkpoint, job.name, settings.operations.lease_ttl.seconds, shared=shared)
        self.lease.acquire()
        self.tables_created: concurrent_writes.Begun | None = None
        self.tables_recorded = False
        self.recording = threading.Lock()  # the query's batch thread and the main one both wait
        try:
            # checked holding the lease: a rewind recorded just before it was taken is seen
            with checkpoint_guards.naming_the_job(job.name):
                checkpoint_guards.check_no_unfinished_restart(self.checkpoint, job.name)
                checkpoint_guards.check_readable(self.checkpoint, job.name)
                self._prepare(job, settings, spark)
        except BaseException:
            if self.tables_created is not None:  # none goes on once the lease is released
                with contextlib.suppress(BaseException):  # the run's own failure is raised
                    self.tables_created.wait()
            self.lease.release()
            raise

    def _prepare(self, job: StreamingJob, settings: Settings, spark: SparkSession | None) -> None:
        """The checks before a run starts and its wiring, in order. A real-time run
        (runtime/real_time.py) varies the steps marked as hooks."""
        settings = self._effective_settings(job, settings)
        checkpoint_guards.check_settings_compatible(self.checkpoint, job, settings)
        self.settings = settings
        self.kafka = kafka_address.connection(settings)
        answered = kafka_admin.check_reachable(self.kafka)  # asked again below, not reconnected
        self.partitions = kafka_admin.topics_partitions(self.kafka, job.topics(settings.streaming),
                                                        listing=answered.listing)
        self._check_topics(job, settings, answered)
        self.spark = spark or get_spark(settings, f"sigflow-{job.name}", local_slots=self._slots_needed())
        configure_session(self.spark, settings)
        self._check_session(job, settings)
        self.progress_log = listen(self.spark)  # a progress line per batch
        kafka_source.require_classes(self.spark)
        self.sink = DeltaSink(self.spark, settings)
        self.tables = self._tables_written(job)
        written = self.tables + (PIPELINE_METRICS, TABLE_STATUS)
        uris = {spec.name: settings.table_uri(spec.name) for spec in written}
        # before any is made again
        self.tables_to_record = tables_kept.check_tables_kept(self.checkpoint, job.name, uris)
        tables_kept.check_checkpoint_there(self.checkpoint, job.name, uris, settings.kafka.starting_offsets)
        # at once (concurrent_writes), each a Delta commit of its own, mostly fixed cost, and
        # while the run goes on to start its query: waited for before anything is written
        # (``_start``, and ``BatchCommit`` before a batch's first write)
        self.tables_created = concurrent_writes.begin(self.spark, {
            spec.name: partial(self._make_table, spec) for spec in written})
        fence_after_takeover(settings, job.name, self.tables, self.lease,  # before this run's first write
                             tables_created=self._tables_ready)
        self.app_id = self.checkpoint.app_id(job.name)
        self.checkpoint_id = self.checkpoint.checkpoint_id(job.name)
        self._wire(job, settings)
        self.supervisor = Supervisor(job.name, settings, self.kafka, self.lease, self.summary, self._start,
                                     self.record_metrics, self._await_progress_lines, lambda: self.batch_failure)
        self.query = None
        self.batch_failure: SigflowError | None = None
        self.stop_gate = StopGate(hold_s=STOP_GRACE_S)  # each start of the query makes its own

    # hooks of _prepare, as a micro-batch run takes them

    def _effective_settings(self, job: StreamingJob, settings: Settings) -> Settings:
        recovered_start = self.checkpoint.starting_offsets()
        if recovered_start:  # a checkpoint rebuilt by `sigflow checkpoint recover`
            return settings.replace(starting_offsets=recovered_start)
        return settings

    def _check_topics(self, job: StreamingJob, settings: Settings, answered: kafka_admin.Answer) -> None:
        checkpoint_guards.check_broker_time(job, settings, kafka_admin.timestamp_types(
            self.kafka, job.topics(settings.streaming), client=answered.client))

    def _slots_needed(self) -> int:
        return 0  # a micro-batch job runs in whatever slots it has

    def _check_session(self, job: StreamingJob, settings: Settings) -> None:
        classpath.require_s3_log_store(settings.delta_root_uri, self.spark.conf.get("spark.delta.logStore.s3a.impl", None))

    def _tables_written(self, job: StreamingJob) -> tuple[TableSpec, ...]:
        return tables_written(job)

    def _wire(self, job: StreamingJob, settings: Settings) -> None:
        self.summary = RunSummary(job.name, counts_late=job.late_rule is not None)
        self.recorder = MetricsRecorder(job.name, self.sink, self.app_id, self.checkpoint_id, self.summary,
                                        tables=job.tables, streaming=settings.streaming)
        self.commit_context = CommitContext(
            job, settings, self.spark, self.sink, self.checkpoint, self.lease, self.kafka,
            kafka_source.KafkaRecords(self.spark, settings, self.kafka, job.topics(settings.streaming)),
            self.tables, self.app_id, self.checkpoint_id, self.summary, self.recorder, self._tables_ready)
        self.commit_batch = BatchCommit(self.commit_context, before_batch=self._catch_up)
        self.lineage = run_lineage(self, tables={spec.name: settings.table_uri(spec.name) for spec in self.tables})

    def plan(self) -> DataFrame:
        plan = self.job.build(self.settings.streaming, self.commit_batch.records.stream())
        counting = Counting(scans=source_scans(plan), branches=self.job.branches(self.settings.streaming))
        self.recorder.counting = counting
        self.progress_log.follow(self.job.name, counting, self.settings.progress_file(self.job.name))
        return plan

    def record_metrics(self, query) -> None:
        self.recorder.record(query)

    def _catch_up(self) -> None:
        if self.query is not None:  # the batches before this one have their progress by now
            self.recorder.record(self.query)

    def _make_table(self, spec: TableSpec) -> str | None:
        """Create or migrate one of the run's tables (in a thread of its own, ``_prepare``):
        its id when the checkpoint is to record it, read there rather than after all of them,
        when the run's first batch waits for it."""
        self.sink.ensure_table(spec)
        return table_access.table_id(self.sink.uri(spec)) if spec.name in self.tables_to_record else None

    def _tables_ready(self) -> None:
        """Wait for the run's tables to exist (``_prepare`` began creating them); the first
        time, record them in the checkpoint (``tables_kept``) and hand the sink their ids."""
        made = self.tables_created.wait()
        with self.recording:
            if not self.tables_recorded:
                tables_kept.record_tables(self.checkpoint, made)
                self.sink.hold_ids(tables_kept.own_table_ids(self.checkpoint, self.job.name))
                self.tables_recorded = True

    def _start(self, trigger_interval: str):
        """The query started while the run's tables may still be being created (``_prepare``),
        returned once they are: a creation that failed is raised here, before any drive, as
        it would have been before the query."""
        query = self.start(trigger_interval)
        try:
            self._tables_ready()
        except BaseException:
            query.stop()
            raise
        return query

    def start(self, trigger_interval: str):
        self.commit_batch.query_starting()
        self.stop_gate = StopGate(hold_s=STOP_GRACE_S)
        self.batch_failure = None
        self.query = (
            self.plan()
            .writeStream.queryName(query_name(self.job.name))
            .foreachBatch(told_as_a_stop(self._keeping_failure(self.commit_batch),
                                         lambda: self.query is None or self.query.isActive, self.stop_gate))
            .option("checkpointLocation", self.checkpoint.uri)
            .trigger(processingTime=trigger_interval)
            .start()
        )
        return self.query

    def _keeping_failure(self, commit: Callable[[DataFrame, int], None]) -> Callable[[DataFrame, int], None]:
        """``commit`` keeping the SigflowError it raises, which the supervisor reports as it is
        (its message and hint) rather than as Spark's failure of the query that wraps it."""
        def call(batch_df: DataFrame, batch_id: int) -> None:
            try:
                commit(batch_df, batch_id)
            except SigflowError as error:
                self.batch_failure = error
                raise
        return call

    def _replay_from_raw(self, stop: threading.Event | None) -> bool:
        """The replay from device_events_raw the checkpoint has yet to finish, if any: a query
        of the same plan and commit whose source is raw, until its batches have read up to
        where raw ends. False when ``stop`` came first; a failure is raised. Either way the
        next run goes on from the replay's last committed batch, as a Kafka run goes on from
        its own; a no-data batch the replay's watermark calls for, if not begun by then, runs
        as the Kafka query's first."""
        pending = self.checkpoint.replay_from_raw()
        if pending is None:
            return True
        first, until, version = pending
        log.info("%s: replaying device_events_raw up to %s, then reading Kafka from there", self.job.name,
                 ", ".join(f"{t}[{p}]@{o}" for t, parts in sorted(until.items()) for p, o in sorted(parts.items())))
        ends = {topic: {int(p): o for p, o in parts.items()} for topic, parts in until.items()}
        stop, asked = stop or threading.Event(), _StopRequests(self.lease)

        def drive(query) -> None:
            while (query.isActive and not stop.is_set() and not asked.now()
                   and not self.checkpoint.committed_through(ends)):
                query.awaitTermination(0.5)
                self.record_metrics(query)
            if query.exception():
                raise query.exception()
            self._let_batch_finish(query)  # a no-data batch begun after the last one, too

        kafka_commit = self.commit_batch
        raw = RawRecords(self.spark, self.settings.table_uri(DEVICE_EVENTS_RAW.name), first, until,
                         self.settings.kafka.max_offsets_per_trigger, version)
        self.commit_batch = BatchCommit(replace(self.commit_context, records=raw), before_batch=self._catch_up)
        try:
            self.supervisor.run_once("0 seconds", drive)
        finally:
            self.commit_batch, self.query = kafka_commit, None
        return not (stop.is_set() or asked.now())

    def _await_progress_lines(self, query) -> None:
        """The listener gets progress asynchronously: without this wait a process that exits
        right after its run lost the last batch's line and progress-file entry."""
        last = max((int(p["batchId"]) for p in progress_dicts(query)), default=-1)
        if last >= 0 and not self.progress_log.wait_for(self.job.name, last):
            log.warning("%s: batch %d's progress line did not arrive within 30 s", self.job.name, last)

    def _run(self, trigger_interval: str, drive, stop: threading.Event | None = None) -> RunSummary:
        """The run between its lineage events: START, then COMPLETE or FAIL."""
        self.lineage.start()
        try:
            try:
                replayed = self._replay_from_raw(stop)
            except BaseException:
                self.lease.release()  # ``supervisor.run`` releases it otherwise
                raise
            summary = self.supervisor.run(trigger_interval, drive, stop) if replayed else self._stopped()
        except BaseException as exc:
            self.lineage.fail(str(exc) or type(exc).__name__)
            raise
        self.lineage.complete()
        return summary

    def _stopped(self) -> RunSummary:
        self.lease.release()
        return self.summary

    def run_available_now(self) -> RunSummary:
        return self._run("0 seconds", lambda query: query.processAllAvailable())

    def run_continuous(self, stop: threading.Event | None = None) -> RunSummary:
        stop = stop or stop_on_signals()

        asked = _StopRequests(self.lease)

        def drive(query) -> None:
            while query.isActive and not stop.is_set() and not asked.now():
                query.awaitTermination(0.5)
                self.record_metrics(query)
            if query.exception():
                raise query.exception()
            self._let_batch_finish(query)
            if query.exception():  # the batch in flight failed
                raise query.exception()

        return self._run(self.settings.streaming.trigger_interval.spark, drive, stop)

    def _let_batch_finish(self, query) -> None:
        """Graceful: let the batch in flight finish before stopping: until the query is idle,
        or the batch begun after it holds (``StopGate``: a query behind in Kafka is never
        idle). A batch stuck past the grace is stopped mid-way; the next run redoes it
        exactly once."""
        self.stop_gate.asked.set()
        if not wait_until(lambda: self.stop_gate.holding.is_set()
                          or not (query.isActive and query.status.get("isTriggerActive")),
                          timeout_s=STOP_GRACE_S, every_s=0.1):
            log.warning("%s: the batch in flight did not finish within %d s of the stop; stopping it",
                        self.job.name, STOP_GRACE_S)


class _StopRequests:
    """Whether a run shared with other jobs was asked to stop (``stop_running``): its lease's
    stop request, read every ``EVERY_S`` (a read of the checkpoint storage each time)."""

    EVERY_S = 2.0

    def __init__(self, lease: Lease):
        self.lease, self.next_look, self.asked = lease, 0.0, False

    def now(self) -> bool:
        if self.lease.shared and not self.asked and time.monotonic() >= self.next_look:
            self.next_look = time.monotonic() + self.EVERY_S
            self.asked = self.lease.stop_requested()
            if self.asked:
                log.warning("%s: asked to stop (a restart of it is being applied); stopping after the "
                            "batch in flight, the application's other jobs go on", self.lease.job)
        return self.asked


def run_lineage(run: "JobRun", tables: dict[str, str], topics_out: list[str] = ()) -> RunLineage:
    """The lineage of a run being prepared: its job's topics in, its tables or topics out,
    the Airflow task run that submitted it (from its Spark properties) as the parent."""
    # asked one by one: the session's copy of the Spark properties holds them, and
    # ``SparkContext.getConf`` would copy every property through py4j, two calls each
    conf = run.spark.conf
    properties = {key: value for key in (f"spark.openlineage.{name}" for name in PARENT_PROPERTIES)
                  if (value := conf.get(key, None))}
    return RunLineage(run.settings, run.job.name,
                      inputs=[topic_dataset(run.kafka, topic) for topic in run.job.topics(run.settings.streaming)],
                      tables=tables, topics_out=[topic_dataset(run.kafka, topic) for topic in topics_out],
                      spark_properties=properties)


def stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


