"""The job registry: name -> job, in the order of ``spark_jobs.jobs.JOB_NAMES``, the one list
of jobs. Each job lives in the module named after it (``windowed-averages`` in
``windowed_averages.py``), as the constant of its name (``WINDOWED_AVERAGES``)."""

from __future__ import annotations

import importlib

from spark_jobs.errors import ConfigError
from spark_jobs.jobs import JOB_NAMES, REAL_TIME_JOB_NAMES
from spark_jobs.jobs.base import RealTimeJob, StreamingJob


def _defined(name: str):
    identifier = name.replace("-", "_")
    return getattr(importlib.import_module(f"spark_jobs.jobs.{identifier}"), identifier.upper())


JOBS: dict[str, StreamingJob] = {name: _defined(name) for name in JOB_NAMES}
REAL_TIME_JOBS: dict[str, RealTimeJob] = {name: _defined(name) for name in REAL_TIME_JOB_NAMES}
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
