"""sigflow_maintenance: daily compaction, vacuum and pruning; table contents stay the same.

Compacts the small files micro-batches leave, vacuums files older than
`vacuum_retention` (rewinds reach back that far), deletes quarantined records past
`quarantine_retention` and checkpoint log entries beyond `checkpoint_batches_retained`.

By hand: `sigflow maintenance [--dry-run]`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task


@task
def maintain_tables_and_checkpoints() -> list[str]:
    from spark_jobs.airflow import tasks

    return tasks.maintain()


with DAG(
    dag_id="sigflow_maintenance",
    description="Compact, vacuum, prune quarantine and checkpoint logs",
    doc_md=__doc__,
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "sigflow", "retries": 1, "retry_delay": timedelta(minutes=10)},
    tags=["sigflow", "maintenance"],
) as dag:
    maintain_tables_and_checkpoints()
