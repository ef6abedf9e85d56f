"""Which run a job gets: a micro-batch ``JobRun`` (runtime/runner.py) or a real-time
``RealTimeRun`` (runtime/real_time.py), one job alone or every job at once in one session."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed, wait
from typing import Callable

from pyspark import inheritable_thread_target

from spark_jobs.config import Settings
from spark_jobs.jobs.base import RealTimeJob
from spark_jobs.jobs.registry import JOBS, get_any_job, get_job
from spark_jobs.runtime.metrics.progress import listen, query_name
from spark_jobs.runtime.metrics.summary import RunSummary
from spark_jobs.runtime.real_time import RealTimeRun
from spark_jobs.runtime.runner import JobRun
from spark_jobs.runtime.spark import get_spark


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
    spark = get_spark(settings, "sigflow-pipeline")
    listen(spark)  # once, before the threads: each would otherwise register its own listener
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
