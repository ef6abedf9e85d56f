"""What keeps a run's streaming query going and says why it stopped: the query started and
stopped around each drive, a Kafka outage waited out with backoff (within
``broker_outage_budget``) and the query started again from its checkpoint (a restarted query
replays at most the batch in flight), any other failure turned into one explained error,
and the run's lease released when it ends. Every run uses one (``runner.JobRun``,
``real_time.RealTimeRun``), handed what it needs of the run."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import tenacity
from py4j.protocol import Py4JNetworkError
from pyspark.errors import StreamingQueryException

from spark_jobs.config import Settings
from spark_jobs.errors import (
    BrokerUnavailable,
    CheckpointDamaged,
    DataLossError,
    DriverDied,
    SigflowError,
    first_line,
)
from spark_jobs.runtime import driver_log
from spark_jobs.runtime.checkpoint.directory import recover_hint
from spark_jobs.runtime.checkpoint.lease import Lease
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.metrics.summary import RunSummary

log = logging.getLogger("sigflow.runner")
# Operating-system errors of a table write that the operator, not the code, must fix.
STORAGE_FAILURES = ("No space left on device", "Disk quota exceeded", "Read-only file system", "Permission denied")
# What py4j raises once the driver's JVM is gone: its answer cut off, or no JVM to connect to.
JVM_GONE = (Py4JNetworkError, ConnectionRefusedError)
# Kafka errors of a cluster that answers while a partition has no leader yet (a broker lost,
# its partitions moving): waited out like an outage, within broker_outage_budget.
KAFKA_TRANSIENT = ("org.apache.kafka.common.errors.TimeoutException", "NotLeaderOrFollowerException",
                   "LeaderNotAvailableException")


@dataclass(frozen=True)
class Supervisor:
    """One run's supervision. ``start`` starts its query with a trigger interval;
    ``record_metrics`` records the batches a query has done; ``settle`` waits, after a stop,
    for what the query's listener reports asynchronously; ``raised_in_batch`` is the error
    sigflow's own batch code raised in the query's failed batch, if it did."""

    job: str
    settings: Settings
    kafka: str
    lease: Lease
    summary: RunSummary
    start: Callable[[str], object]
    record_metrics: Callable[[object], None]
    settle: Callable[[object], None]
    raised_in_batch: Callable[[], SigflowError | None] = lambda: None

    def run(self, trigger_interval: str, drive: Callable[[object], None],
            stop: threading.Event | None = None) -> RunSummary:
        """Start the query and ``drive`` it; while Kafka is away, wait with backoff and start
        it again from the checkpoint. The lease is released however it ends."""
        outage: tuple[float, int] | None = None  # since when, and the batches done by then
        try:
            while True:
                try:
                    with self._running(trigger_interval) as query:
                        drive(query)
                    return self.summary
                except _KafkaGone as gone:
                    if outage is None or self.summary.batches > outage[1]:  # a new outage
                        outage = (time.monotonic(), self.summary.batches)
                    if not self._await_kafka(str(gone), stop, outage[0]):
                        return self.summary
        finally:
            self.lease.release()

    def run_once(self, trigger_interval: str, drive: Callable[[object], None]) -> None:
        """Start the query and ``drive`` it, its failure explained as ``run`` explains it, but
        neither waiting out a Kafka outage nor releasing the lease: a phase of the run before
        ``run`` (a replay from device_events_raw, which reads no Kafka)."""
        with self._running(trigger_interval) as query:
            drive(query)

    @contextmanager
    def _running(self, trigger_interval: str):
        """The query for the duration of one drive: errors explained, stopped and metered after."""
        query = self.start(trigger_interval)
        jvm_alive = True
        try:
            try:
                yield query
            except StreamingQueryException as exc:
                raise self._failure(query, exc) from None
            except JVM_GONE:
                jvm_alive = False
                raise
            finally:
                if jvm_alive:  # a dead driver JVM has no query left to stop
                    query.stop()
                    self.settle(query)
            self.record_metrics(query)
        except JVM_GONE:  # in the drive, or after it: dying while its query stops, the JVM ends the run alike
            raise jvm_died(self.job, self.settings, self.lease.shared) from None

    def _failure(self, query, exc: Exception) -> Exception:
        own = self.raised_in_batch()
        if own is not None:  # said for people already, where Spark's wrapping names only the query
            return own
        if "OutOfMemoryError" in str(exc):
            return jvm_died(self.job, self.settings, self.lease.shared)
        text = str(exc)
        if kafka_admin.is_reachable(self.kafka, timeout_s=3) and not any(m in text for m in KAFKA_TRANSIENT):
            return explain(self.job, exc, self.settings.checkpoint_uri(self.job), driver_log.written_to())
        self.record_metrics(query)  # the batches done before Kafka went away
        return _KafkaGone(text.splitlines()[0] if text else type(exc).__name__)

    def _await_kafka(self, cause: str, stop: threading.Event | None, began: float) -> bool:
        """Back off (1, 2, 4 ... 30 s) until Kafka answers. False when stopped meanwhile;
        BrokerUnavailable once broker_outage_budget is spent, counted from ``began``: a
        cluster that answers while a partition has no leader fails the query again and
        again, and each of those failures is the same outage."""
        budget = max(0.0, self.settings.kafka.outage_budget.seconds - (time.monotonic() - began))

        def say_retry(state: tenacity.RetryCallState) -> None:
            log.warning(
                "%s: Kafka at %s is unreachable; retry %d in %.0f s, giving up after %s. "
                "Check `sigflow broker status` or the Kafka cluster; the job resumes from its "
                "checkpoint when Kafka is back (docs/runbooks/broker-outage.md)",
                self.job, self.kafka, state.attempt_number, state.upcoming_sleep,
                self.settings.kafka.outage_budget,
            )

        def pause(seconds: float) -> None:
            if stop is not None and stop.wait(seconds):
                raise _Stopped
            if stop is None:
                time.sleep(seconds)

        waiting = tenacity.Retrying(
            retry=tenacity.retry_if_result(lambda reachable: not reachable),
            wait=tenacity.wait_exponential(multiplier=1, max=30),
            stop=tenacity.stop_after_delay(budget),
            before_sleep=say_retry,
            sleep=pause,
            retry_error_callback=lambda state: False,
        )
        try:
            back = budget > 0 and waiting(kafka_admin.is_reachable, self.kafka, timeout_s=3)
        except _Stopped:
            return False
        if not back:
            waited = time.monotonic() - began
            raise BrokerUnavailable(
                f"job {self.job} stopped: Kafka at {self.kafka} unreachable for "
                f"{waited:.0f} s (broker_outage_budget {self.settings.kafka.outage_budget}); "
                f"last error: {cause[:300]}",
                "bring Kafka back and rerun: the job resumes from its checkpoint, "
                "nothing is lost (docs/runbooks/broker-outage.md)",
            )
        if waiting.statistics.get("attempt_number") == 1:  # it never stopped answering
            log.warning("%s: a Kafka read failed while Kafka at %s answers (%s); resuming from the "
                        "checkpoint", self.job, self.kafka, cause[:200])
        else:
            log.warning("%s: Kafka at %s is back after %.0f s; resuming from the checkpoint",
                        self.job, self.kafka, time.monotonic() - began)
        return True


class _KafkaGone(Exception):
    """A query failed while Kafka was unreachable: retried, not reported."""


class _Stopped(Exception):
    """A stop was asked for while waiting for Kafka."""


def jvm_died(job: str, settings: Settings, one_application: bool = False) -> DriverDied:
    """The driver JVM died in a batch. Measured cause: a batch too big for its heap (the
    JVM exits on OutOfMemoryError, and py4j then finds no one answering). The batch keeps
    the offsets it was planned with, so only more memory gets it through."""
    limit = settings.kafka.max_offsets_per_trigger or "no limit"
    return DriverDied(
        f"job {job} stopped: the Spark driver died during a batch, most likely out of memory "
        f"(max_offsets_per_trigger {limit}, spark_driver_memory {settings.spark.driver_heap(one_application)})",
        "raise SIGFLOW_SPARK_DRIVER_MEMORY and rerun: the job redoes the batch from its checkpoint "
        "with the offsets it was planned with, exactly once; lower SIGFLOW_MAX_OFFSETS_PER_TRIGGER "
        "to keep later batches smaller (docs/runbooks/job-crashed.md)",
    )


def explain(job: str, exc: Exception, checkpoint_uri: str = "", full_log: Path | None = None) -> Exception:
    text = str(exc)
    checksum = re.search(r"Checksum error: (?:file:)?(\S+) at", text)  # Hadoop's on a local disk
    if checksum and checkpoint_uri and checksum[1].startswith(os.path.abspath(checkpoint_uri.removeprefix("file:")) + "/"):
        return CheckpointDamaged(f"job {job} stopped: {checksum[1]} does not match its checksum (.crc): "
                                 "its checkpoint is damaged", recover_hint(job))
    if "have been lost" in text or "OffsetOutOfRange" in text:
        detail = text.split("\n")[0].strip()
        return DataLossError(
            f"job {job} stopped: Kafka no longer has offsets its checkpoint needs: {detail}",
            "see docs/runbooks/checkpoint-lost-or-corrupt.md; SIGFLOW_FAIL_ON_DATA_LOSS=false skips ahead",
        )
    state = re.search(r"\[CANNOT_LOAD_STATE_STORE[.\w]*\][^\n]*", text)
    if state:
        cause = re.search(r"Caused by: ([^\n]+)", text[state.end():])  # the JVM's, under Spark's class of error
        return CheckpointDamaged(
            f"job {job} stopped: its state in the checkpoint could not be loaded ({state[0][:200].strip()}"
            + (f"; caused by {cause[1].strip()[:200]}" if cause else "") + ")",
            "run it again once; if it fails alike, its checkpoint is damaged: "
            + recover_hint(job).removeprefix("rebuild the checkpoint: "))
    storage = next((reason for reason in STORAGE_FAILURES if reason in text), None)
    if storage:
        return SigflowError(
            f"job {job} stopped: a table write failed with '{storage}'; the batch was not "
            "committed, and Delta readers see none of its rows",
            "fix the storage (space, permissions), then rerun the job: it redoes the batch "
            "from its checkpoint, exactly once (docs/runbooks/job-crashed.md)",
        )
    said = _python_error(text)  # the batch's own Python code raised it: that error is the cause
    if said is None:
        first, root = first_line(exc), _innermost_cause(exc)
        said = first if not root or root in first else f"{first}; caused by {root}"
    return SigflowError(f"job {job} failed: {said[:700]}",
                        f"see {full_log} for the batch that failed, in full" if full_log
                        else "see the log above for the batch that failed")


def _innermost_cause(exc: Exception) -> str | None:
    """The first line of the innermost JVM exception under a query's failure: Spark's own
    wrappers ("Exception thrown in awaitResult", a job aborted) name the query, not what broke."""
    try:
        cause = getattr(exc, "_origin", None)  # pyspark's captured JVM throwable
        while cause is not None and cause.getCause() is not None and cause.getCause() != cause:
            cause = cause.getCause()
        said = cause.toString() if cause is not None else None
    except Exception:  # noqa: BLE001 - the driver may be gone: the query's own message stands
        return None
    return said.strip().splitlines()[0] if said and said.strip() else None


def _python_error(text: str) -> str | None:
    """The error a batch's Python code raised (the foreachBatch commit), from the query's
    failure: Spark's first line names only the query, the traceback's last names the error."""
    _, found, traceback = text.partition("Traceback (most recent call last):")
    if not found:
        return None
    raised = re.findall(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?:: .*)?$", traceback.split("\n\tat ", 1)[0],
                        re.M)
    return raised[-1].strip() if raised else None  # of chained errors, the last one raised
