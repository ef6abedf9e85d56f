"""sigflow_deploy: set up Kafka topics and Delta tables, then start the streaming jobs.

Trigger it by hand (the form asks how to run the jobs). Every step is idempotent:
deploying twice changes nothing (a start task whose job already runs is refused, naming
that run: stop it first to start it anew).

1. `validate_config`: load the settings (a bad value fails here, naming the setting).
2. `ensure_topics`: create missing topics (events, alerts, critical alerts) with the
   configured partitions and retention.
3. `ensure_tables`: create missing Delta tables with their schemas.
   `register_tables`: register each by name in the catalog (`catalog_uri`, a Hive metastore),
   where one is configured; without one, tables are read by path.
4. `start_<job>` (shape `one application per job`): spark-submit of `sigflow run <job>` through the Apache Spark provider
   (`spark_default`: a local master in the embedded mode, the cluster in production),
   either `long-running` (a processing-time trigger; the task lives as long as the job)
   or `available-now` (process what Kafka holds and stop; `sigflow_streaming` repeats it).
   `alert-fastpath` runs in Spark's real-time mode either way (long-running: a commit every
   `real_time_checkpoint_interval`; available-now: 5-second batches until it has caught
   up); it needs a task slot per partition of device-alerts.
   Or `start_pipeline` (shape `one application`): one spark-submit of `sigflow pipeline` with
   the chosen micro-batch jobs as queries of one driver (a failed query starts again alone);
   `alert-fastpath` keeps its own application.

By hand: `sigflow topics create`, then `sigflow run <job> [--processing-time 10s]`.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

from spark_jobs.airflow.operators import (
    SigflowPipelineSubmitOperator,
    SigflowSubmitOperator,
)
from spark_jobs.airflow.shapes import SHAPES
from spark_jobs.jobs import ALL_JOB_NAMES

RUN_MODE = (
    "{{ '--available-now' if params.mode == 'available-now' "
    "else '--processing-time=' ~ params.trigger_interval }}"
)
PIPELINE_MODE = "{{ '' if params.mode == 'available-now' else '--processing-time=' ~ params.trigger_interval }}"


@task(show_return_value_in_logs=False)  # its lines are in the log once already
def validate_config() -> list[str]:
    from spark_jobs.airflow import tasks

    return tasks.describe_settings()


@task(show_return_value_in_logs=False)
def ensure_topics() -> list[str]:
    from spark_jobs.airflow import tasks

    return tasks.ensure_topics()


@task(show_return_value_in_logs=False)
def ensure_tables() -> list[str]:
    from spark_jobs.airflow import tasks

    return tasks.ensure_tables()


@task(show_return_value_in_logs=False)
def register_tables() -> list[str]:
    from spark_jobs.airflow import tasks

    return tasks.register_tables()


@task.branch
def choose_jobs(params=None) -> list[str]:
    from spark_jobs.airflow.shapes import start_tasks

    return start_tasks(params["jobs"], params["shape"])


with DAG(
    dag_id="sigflow_deploy",
    description="Topics, Delta tables, then the streaming jobs (spark-submit)",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "sigflow"},
    tags=["sigflow", "deploy"],
    params={
        "mode": Param("available-now", enum=["available-now", "long-running"],
                      description="long-running: a processing-time trigger until stopped; "
                      "available-now: process what is there and stop"),
        "trigger_interval": Param("10 seconds", type="string",
                                  description="long-running mode: the processing-time trigger"),
        "jobs": Param(list(ALL_JOB_NAMES), type="array", items={"type": "string", "enum": list(ALL_JOB_NAMES)},
                      description="which jobs to start"),
        "shape": Param(SHAPES[0], enum=list(SHAPES),
                       description="one application per job: isolation, for a cluster with room for six drivers; "
                       "one application: the micro-batch jobs as queries of one driver, for one machine or a "
                       "small cluster (docs/deploy.md)"),
    },
) as dag:
    chosen = choose_jobs()
    validate_config() >> ensure_topics() >> ensure_tables() >> register_tables() >> chosen
    for name in ALL_JOB_NAMES:
        chosen >> SigflowSubmitOperator(task_id=f"start_{name.replace('-', '_')}", job=name, mode=RUN_MODE)
    chosen >> SigflowPipelineSubmitOperator(task_id="start_pipeline", mode=PIPELINE_MODE)
