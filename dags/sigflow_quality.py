"""sigflow_quality: Great Expectations checks of each Delta table after it changes.

Scheduled on the tables' Airflow Assets (emitted by `sigflow_streaming`), so it runs
after new data lands. One task per table; a failed critical expectation fails that task,
and its log names the expectation and shows a sample of the bad rows. Every result is
appended to the `dq_results` Delta table; the Data Docs HTML sits under `quality_dir`.

By hand: `sigflow quality run [TABLE ...]`. Runbook: docs/runbooks/dq-failure.md.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Asset, AssetAny, task

from spark_jobs.ops.quality import CHECKED_TABLES


@task
def check_table(table: str) -> str:
    from spark_jobs.airflow import tasks

    return tasks.check_table(table)


with DAG(
    dag_id="sigflow_quality",
    description="Great Expectations suites per Delta table, after the tables update",
    doc_md=__doc__,
    schedule=AssetAny(*(Asset(name=f"sigflow.{table}") for table in CHECKED_TABLES)),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "sigflow"},
    tags=["sigflow", "quality"],
) as dag:
    for name in CHECKED_TABLES:
        check_table.override(task_id=f"check_{name}")(name)
