"""The registry finds each job of the one list under its own name, with the tables the list gives it."""

from spark_jobs.jobs import JOB_TABLES, REAL_TIME_JOB_NAMES
from spark_jobs.jobs.base import RealTimeJob, StreamingJob
from spark_jobs.jobs.registry import ALL_JOBS, JOBS


def test_every_listed_job_is_registered_under_its_own_name_with_its_listed_tables():
    assert list(ALL_JOBS) == [*JOB_TABLES, *REAL_TIME_JOB_NAMES]
    assert {name: job.name for name, job in ALL_JOBS.items()} == {name: name for name in ALL_JOBS}
    assert {name: job.tables for name, job in JOBS.items()} == JOB_TABLES
    assert all(isinstance(JOBS[name], StreamingJob) for name in JOB_TABLES)
    assert all(isinstance(ALL_JOBS[name], RealTimeJob) for name in REAL_TIME_JOB_NAMES)
