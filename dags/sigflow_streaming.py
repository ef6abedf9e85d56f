"""sigflow_streaming: every job as an incremental available-now run, in dependency order.

For installs that run the jobs in batches rather than as long-running queries. Each task
resumes its job from its checkpoint, processes what Kafka holds (plus the batch that the
new watermark makes final), writes Delta exactly once and stops. Each task is the same as
`sigflow run <job>` by hand. The tables each job writes are emitted as Airflow Assets, so
data-quality checks can be scheduled on them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, task

from spark_jobs.jobs import JOB_TABLES

TABLE_ASSETS = {
    job: [Asset(name=f"sigflow.{spec.name}") for spec in tables] for job, tables in JOB_TABLES.items()
}


@task
def run_job(job: str) -> str:
    from spark_jobs.airflow import tasks

    return tasks.run_job(job)


with DAG(
    dag_id="sigflow_streaming",
    description="Every sigflow job as an incremental available-now run",
    doc_md=__doc__,
    schedule=timedelta(minutes=15),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # two runs of one checkpoint at once would fail
    default_args={"owner": "sigflow", "retries": 2, "retry_delay": timedelta(minutes=1)},
    tags=["sigflow", "streaming"],
) as dag:
    previous = None
    for name in JOB_TABLES:  # sequential: each job is a Spark application on the same cores
        current = run_job.override(task_id=name.replace("-", "_"), outlets=TABLE_ASSETS[name])(name)
        if previous is not None:
            previous >> current
        previous = current
