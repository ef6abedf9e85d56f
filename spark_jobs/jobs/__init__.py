"""The job registry: name -> StreamingJob, in dependency order."""

from __future__ import annotations

from spark_jobs.errors import ConfigError
from spark_jobs.jobs.base import BatchContext, StreamingJob
from spark_jobs.jobs.ingest import INGEST

JOBS: dict[str, StreamingJob] = {job.name: job for job in (INGEST,)}


def get_job(name: str) -> StreamingJob:
    try:
        return JOBS[name]
    except KeyError:
        raise ConfigError(f"unknown job {name!r}", f"jobs: {', '.join(JOBS)}") from None


__all__ = ["JOBS", "BatchContext", "StreamingJob", "get_job"]
