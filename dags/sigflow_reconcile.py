"""sigflow_reconcile: late events counted in the windows, fleet rollups, sessions and alert
contexts they belong to, every hour.

A streaming job drops an event behind its watermark into late_events. This run recounts
the rows each such event belongs to, once they are final, and corrects them in place
(`revision` + 1, `corrected_at`); an event more than `late_horizon` after its window's
end is recorded as beyond the horizon and not counted. It refuses while a restart of a job
is being applied, or another reconcile of it runs. Running it again changes nothing. docs/runbooks/late-events.md.

By hand: `sigflow reconcile [JOB...]`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task


@task
def reconcile_late_events() -> list[str]:
    from spark_jobs.airflow import tasks

    return tasks.reconcile()


with DAG(
    dag_id="sigflow_reconcile",
    description="Count late events in the results they belong to",
    doc_md=__doc__,
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "sigflow", "retries": 1, "retry_delay": timedelta(minutes=5)},
    tags=["sigflow", "reconcile"],
) as dag:
    reconcile_late_events()
