"""The job registry: name -> StreamingJob, in the order of ``spark_jobs.jobs.JOB_NAMES``."""

from __future__ import annotations

from spark_jobs.errors import ConfigError
from spark_jobs.jobs import JOB_NAMES
from spark_jobs.jobs.alert_join import ALERT_JOIN
from spark_jobs.jobs.base import StreamingJob
from spark_jobs.jobs.dedup import DEDUP
from spark_jobs.jobs.fleet_rollup import FLEET_ROLLUP
from spark_jobs.jobs.ingest import INGEST
from spark_jobs.jobs.sessions import SESSIONS
from spark_jobs.jobs.windowed_averages import WINDOWED_AVERAGES

_BY_NAME = {job.name: job for job in (INGEST, DEDUP, WINDOWED_AVERAGES, FLEET_ROLLUP, SESSIONS, ALERT_JOIN)}
JOBS: dict[str, StreamingJob] = {name: _BY_NAME[name] for name in JOB_NAMES}


def get_job(name: str) -> StreamingJob:
    try:
        return JOBS[name]
    except KeyError:
        raise ConfigError(f"unknown job {name!r}", f"jobs: {', '.join(JOBS)}") from None
