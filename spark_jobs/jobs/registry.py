"""The job registry: name -> job, every job listed here once, in the order of
``spark_jobs.jobs.JOB_NAMES`` (the Spark-free list of the jobs and their tables that DAG
files read); importing it fails at once, naming the job, when the two lists differ."""

from __future__ import annotations

from spark_jobs.errors import ConfigError
from spark_jobs.jobs import JOB_NAMES, REAL_TIME_JOB_NAMES
from spark_jobs.jobs.alert_fastpath import ALERT_FASTPATH
from spark_jobs.jobs.alert_join import ALERT_JOIN
from spark_jobs.jobs.base import RealTimeJob, StreamingJob
from spark_jobs.jobs.dedup import DEDUP
from spark_jobs.jobs.fleet_rollup import FLEET_ROLLUP
from spark_jobs.jobs.ingest import INGEST
from spark_jobs.jobs.sessions import SESSIONS
from spark_jobs.jobs.windowed_averages import WINDOWED_AVERAGES


def _by_name(names: tuple[str, ...], jobs: tuple) -> dict:
    found = {job.name: job for job in jobs}
    if set(found) != set(names):
        raise RuntimeError(f"spark_jobs/jobs/registry.py lists {sorted(found)}, spark_jobs/jobs/__init__.py "
                           f"{sorted(names)}: every job is named in both")
    return {name: found[name] for name in names}


JOBS: dict[str, StreamingJob] = _by_name(JOB_NAMES, (INGEST, DEDUP, WINDOWED_AVERAGES, FLEET_ROLLUP, SESSIONS,
                                                     ALERT_JOIN))
REAL_TIME_JOBS: dict[str, RealTimeJob] = _by_name(REAL_TIME_JOB_NAMES, (ALERT_FASTPATH,))
ALL_JOBS: dict[str, StreamingJob | RealTimeJob] = {**JOBS, **REAL_TIME_JOBS}


def get_job(name: str) -> StreamingJob:
    """A micro-batch job (what checkpoint rewinds, recovers and the pipeline take)."""
    if name in REAL_TIME_JOBS:
        raise ConfigError(f"{name} runs in real-time mode and writes no table: this command is for the "
                          f"micro-batch jobs", f"micro-batch jobs: {', '.join(JOBS)}")
    try:
        return JOBS[name]
    except KeyError:
        raise ConfigError(f"unknown job {name!r}", f"jobs: {', '.join(ALL_JOBS)}") from None


def get_any_job(name: str) -> StreamingJob | RealTimeJob:
    """Any job, micro-batch or real-time (what runs, stops and reports status)."""
    try:
        return ALL_JOBS[name]
    except KeyError:
        raise ConfigError(f"unknown job {name!r}", f"jobs: {', '.join(ALL_JOBS)}") from None
