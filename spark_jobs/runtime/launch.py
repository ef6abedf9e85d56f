"""Which run a job gets: a micro-batch ``JobRun`` (runtime/runner.py) or a real-time
``RealTimeRun`` (runtime/real_time.py), one job alone or every job at once in one session:
available-now (``run_pipeline``), or continuously as one application (``keep_pipeline``)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed, wait
from functools import partial
from typing import Callable

import tenacity
from pyspark import inheritable_thread_target

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import PIPELINE_METRICS, TABLE_STATUS
from spark_jobs.errors import (
    ConfigError,
    DriverDied,
    JobAlreadyRunning,
    NeedsRestart,
    first_line,
)
from spark_jobs.jobs.base import RealTimeJob
from spark_jobs.jobs.registry import JOBS, get_any_job, get_job
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.lease import Lease
from spark_jobs.runtime.delta import concurrent_writes
from spark_jobs.runtime.delta.sink import DeltaSink
from spark_jobs.runtime.metrics.progress import listen, query_name
from spark_jobs.runtime.metrics.summary import RunSummary
from spark_jobs.runtime.real_time import RealTimeRun
from spark_jobs.runtime.runner import JobRun, stop_on_signals, tables_written
from spark_jobs.runtime.spark import get_spark

log = logging.getLogger("sigflow.pipeline")
# a failed job's first restart comes after this, each next one twice as late, up to RESTART_MAX_S
RESTART_FIRST_S, RESTART_MAX_S = 2.0, 60.0
LEASE_LOOK_S = 2.0  # how often a job whose lease a restart holds looks whether it may go on


def run(job_name: str, settings: Settings, available_now: bool = True) -> RunSummary:
    """A job's run from its checkpoint: available-now, or continuous until a signal (a
    real-time job's checkpoint interval is its own setting, not the trigger interval)."""
    job = get_any_job(job_name)
    run_ = RealTimeRun(job, settings) if isinstance(job, RealTimeJob) else JobRun(job, settings)
    return run_.run_available_now() if available_now else run_.run_continuous()


def run_pipeline(
    settings: Settings, job_names: list[str] | None = None, on_job_done: Callable[[RunSummary], None] | None = None
) -> list[RunSummary]:
    """Every job (or those named) as available-now queries at once in one session, as they
    run side by side in production: each reads Kafka itself, never another job's tables.

    ``on_job_done`` is called in this thread as each job ends. Every job runs to its end
    even when another fails; the first failure (in the jobs' order) is raised then. Ctrl-C
    or SIGTERM stops every query after its batch in flight and is raised once they have."""
    names = job_names or list(JOBS)
    for name in names:
        get_job(name)  # a micro-batch job, or refused here in one line, before a driver starts
    spark = get_spark(settings, "sigflow-pipeline", one_application=True)
    listen(spark)  # once, before the threads: each would otherwise register its own listener
    create_shared_tables(spark, settings, names)
    interrupted = threading.Event()

    def run_one(name: str) -> RunSummary:
        started = time.monotonic()
        if interrupted.is_set():
            raise KeyboardInterrupt
        summary = JobRun(get_job(name), settings, spark).run_available_now()
        summary.seconds = time.monotonic() - started
        return summary

    with ThreadPoolExecutor(len(names), thread_name_prefix="sigflow-job") as pool:
        # PySpark's pinned threads: each job's Spark calls run in a JVM thread of their own
        futures = {pool.submit(inheritable_thread_target(spark)(run_one), name): name for name in names}
        try:
            for future in as_completed(futures):
                if future.exception() is None and on_job_done:
                    on_job_done(future.result())
        except KeyboardInterrupt:
            interrupted.set()
            ours = {query_name(name) for name in names}
            while not all(future.done() for future in futures):
                for query in spark.streams.active:
                    if query.name in ours:
                        query.stop()  # processAllAvailable returns once its query stops
                wait(futures, timeout=0.5)
            raise
    for future in futures:  # in the jobs' order
        if future.exception() is not None:
            raise future.exception()
    return [future.result() for future in futures]


def keep_pipeline(settings: Settings, job_names: list[str] | None = None, stop: threading.Event | None = None,
                  on_start: Callable[[], None] | None = None) -> list[RunSummary]:
    """Every job (or those named) continuously as queries of one Spark application, each on
    its own checkpoint, lease and tables, until SIGTERM or Ctrl-C (or ``stop``) stops them all
    after their batches in flight.

    A job whose query fails is started again alone from its checkpoint, after a backoff that
    doubles with each failure, while the others go on. A restart of one job (rewind,
    recover, resume) asks it to stop (``stop_running``) and it waits, its lease free, until
    that restart has been applied; the others go on. A dead driver JVM or a setting that
    cannot work ends them all, after their batches in flight. ``on_start`` is called once the
    jobs are known free to run, before the application starts."""
    names = job_names or list(JOBS)
    leases = {name: Lease(Checkpoint(settings.checkpoint_uri(name)), name, settings.operations.lease_ttl.seconds)
              for name in names}
    for name in names:
        get_job(name)  # a micro-batch job, or refused here in one line
        # a second application of the same jobs would only wait, a driver held idle: refused
        # before it starts one, as a second `sigflow run` of a job is
        leases[name].refuse_if_run_elsewhere()
    if on_start:
        on_start()
    stop = stop or stop_on_signals()
    spark = get_spark(settings, "sigflow-pipeline", one_application=True)
    listen(spark)
    create_shared_tables(spark, settings, names)
    summaries: dict[str, list[RunSummary]] = {name: [] for name in names}
    failed_again = tenacity.wait_exponential(multiplier=RESTART_FIRST_S, max=RESTART_MAX_S)

    def keep(name: str) -> None:
        lease = leases[name]
        said_waiting = threading.Event()  # once per wait: the lease is looked at every LEASE_LOOK_S
        refused = _RestartAwaited(lease)

        def once() -> None:
            if stop.is_set():
                return
            if lease.stop_requested():  # until the restart that asked has been applied
                raise _AskedToStop
            refused.before_a_run()
            run_ = JobRun(get_job(name), settings, spark, shared=True)
            said_waiting.clear()
            summaries[name].append(run_.run_continuous(stop))
            if not stop.is_set():
                raise _AskedToStop

        def pause(state: tenacity.RetryCallState) -> float:
            waiting = isinstance(state.outcome.exception(), (_AskedToStop, JobAlreadyRunning, NeedsRestart))
            return LEASE_LOOK_S if waiting else failed_again(state)

        def say(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception()
            if isinstance(error, NeedsRestart):
                if refused.anew(error):  # started again as it is, it fails alike: said once
                    log.error("%s cannot go on until a restart of it is applied: %s; the other jobs go on, and "
                              "it starts again once that restart has been applied", name,
                              str(error).removeprefix(f"{name}: "))
                return
            refused.clear()
            if isinstance(error, JobAlreadyRunning) and not said_waiting.is_set():
                log.info("%s: waits for its lease; %s", name, first_line(error))
                said_waiting.set()
            elif isinstance(error, _AskedToStop) and not said_waiting.is_set():
                # a request left by `sigflow stop` holds across the application's restarts too
                log.warning("%s: stays stopped, as `sigflow stop %s` asked, until a restart of it is applied "
                            "(`sigflow checkpoint resume %s --yes` starts it again); the other jobs go on",
                            name, name, name)
                said_waiting.set()
            elif isinstance(error, (_AskedToStop, JobAlreadyRunning)):
                log.debug("%s: waiting for its lease (%s)", name, error or "a restart of it is being applied")
            else:
                log.error("%s failed (%s); starting it again from its checkpoint in %.0f s, the other jobs go on",
                          name, str(error).splitlines()[0] if str(error) else type(error).__name__,
                          state.upcoming_sleep)

        tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda error: not isinstance(error, (DriverDied, ConfigError))),
            wait=pause, sleep=stop.wait, before_sleep=say, reraise=True,
        )(once)

    with ThreadPoolExecutor(len(names), thread_name_prefix="sigflow-job") as pool:
        futures = [pool.submit(inheritable_thread_target(spark)(keep), name) for name in names]
        for done in as_completed(futures):
            if done.exception() is not None:
                stop.set()  # a job that cannot go on ends the application: the others stop too
    for future in futures:
        if future.exception() is not None:
            raise future.exception()
    return [summary for name in names for summary in summaries[name]]


class _RestartAwaited:
    """A job of one application refused for what only a restart of it mends (NeedsRestart):
    its runs fail alike until then. Not run again until a restart has taken its lease (every
    taking makes a new generation), or RESTART_MAX_S after the refusal even so (a table
    restored by hand is no restart)."""

    def __init__(self, lease: Lease):
        self.lease = lease
        self.error: NeedsRestart | None = None
        self.generation = -1  # the lease's, as the run refused took it
        self.until = 0.0
        self.said = ""

    def before_a_run(self) -> None:
        """Raise the refusal again, without a run, while nothing has taken the lease since."""
        taken = self.lease.latest_generation()
        if self.error is not None and taken == self.generation and time.monotonic() < self.until:
            raise self.error.with_traceback(None)
        self.error = None
        self.generation = 0 if taken is None else taken + 1  # what the run about to start takes (lease.py)

    def anew(self, error: NeedsRestart) -> bool:
        """Note a run's refusal: whether it is one to say (not the one raised again, nor one
        said before in the same words)."""
        if error is self.error:
            return False
        self.error, self.until = error, time.monotonic() + RESTART_MAX_S
        if self.said == str(error):
            log.debug("%s: still waits for a restart of it (%s)", self.lease.job, first_line(error))
            return False
        self.said = str(error)
        return True

    def clear(self) -> None:
        self.error, self.said = None, ""


def create_shared_tables(spark, settings: Settings, job_names: list[str]) -> None:
    """Create (or migrate) the tables several of the jobs write, before their runs start:
    started at once, every run would race to create each of them, and those that lost would
    each wait for the winner's creation and then migrate it, adding, as if to a table made by
    an older version, the constraint and properties the winner was still adding."""
    written = [spec for name in job_names for spec in tables_written(get_job(name)) + (PIPELINE_METRICS, TABLE_STATUS)]
    writers = Counter(spec.name for spec in written)
    shared = {spec.name: spec for spec in written if writers[spec.name] > 1}
    sink = DeltaSink(spark, settings)
    concurrent_writes.run_all(spark, {name: partial(sink.ensure_table, spec) for name, spec in shared.items()})


class _AskedToStop(Exception):
    """A job of the application ended its run on a stop request: its restart is being applied."""
