"""How the deploy DAG runs the jobs: one Spark application per job, or the micro-batch jobs as
queries of one application (docs/deploy.md says when to choose which)."""

from __future__ import annotations

from spark_jobs.jobs import JOB_NAMES

ONE_PER_JOB, ONE_APPLICATION = "one application per job", "one application"
SHAPES = (ONE_PER_JOB, ONE_APPLICATION)


def start_tasks(jobs: list[str], shape: str) -> list[str]:
    """The deploy DAG's start tasks for the chosen jobs: one per job, or ``start_pipeline``
    for the micro-batch jobs together (the real-time job keeps an application of its own: it
    holds a task slot per partition for as long as it runs)."""
    if shape == ONE_PER_JOB:
        return [f"start_{job.replace('-', '_')}" for job in jobs]
    together = ["start_pipeline"] if any(job in JOB_NAMES for job in jobs) else []
    return together + [f"start_{job.replace('-', '_')}" for job in jobs if job not in JOB_NAMES]
