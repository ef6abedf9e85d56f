"""The job registry: name -> StreamingJob, in the order of ``spark_jobs.jobs.JOB_NAMES``."""

from __future__ import annotations

from spark_jobs.errors import ConfigError
from spark_jobs.jobs import ALL_JOB_NAMES, JOB_NAMES
from spark_jobs.jobs.alert_fastpath import ALERT_FASTPATH
from spark_jobs.jobs.alert_join import ALERT_JOIN
from spark_jobs.jobs.base import RealTimeJob, StreamingJob
from spark_jobs.jobs.dedup import DEDUP
from spark_jobs.jobs.fleet_rollup import FLEET_ROLLUP
from spark_jobs.jobs.ingest import INGEST
from spark_jobs.jobs.sessions import SESSIONS
from spark_jobs.jobs.windowed_averages import WINDOWED_AVERAGES

_BY_NAME = {job.name: job for job in (INGEST, DEDUP, WINDOWED_AVERAGES, FLEET_ROLLUP, SESSIONS, ALERT_JOIN)}
JOBS: dict[str, StreamingJob] = {name: _BY_NAME[name] for name in JOB_NAMES}
REAL_TIME_JOBS: dict[str, RealTimeJob] = {ALERT_FASTPATH.name: ALERT_FASTPATH}
ALL_JOBS: dict[str, StreamingJob | RealTimeJob] = {**JOBS, **REAL_TIME_JOBS}
assert tuple(ALL_JOBS) == ALL_JOB_NAMES


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
