"""sigflow_restart: on-call restarts of one job from its checkpoint.

Trigger with the form. It always prints its plan first; with `dry_run` on (the default)
it stops there, so trigger once to read the plan and again with `dry_run` off to act.
It refuses unsafe requests (the job still running, a batch no longer in the checkpoint,
Kafka data already deleted, ...) with the reason.

* `resume`: stop the running query gracefully, check the checkpoint, run the job again.
* `rewind`: re-run every batch after `to_batch` (or after the last batch started before
  `to_time`): the checkpoint is cut back and the job's Delta tables restored to the
  versions that batch left, so those batches are reprocessed exactly once.
* `recover`: a lost or corrupt checkpoint is rebuilt from the Kafka offsets in the Delta
  commit metadata (`recover_from=delta`), or the job's tables are rebuilt from the
  earliest Kafka offsets (`recover_from=earliest`; required for stateful jobs unless
  `accept_state_loss`).

By hand: `sigflow stop JOB`, `sigflow checkpoint resume|rewind|recover JOB ... [--yes]`,
then `sigflow run JOB`. Runbooks: docs/runbooks/.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

from spark_jobs.jobs import JOB_NAMES


@task
def show_plan(params=None) -> str:
    from airflow.sdk.exceptions import AirflowFailException

    from spark_jobs.ops import tasks

    plan = tasks.restart_plan(params)
    print(plan.describe())
    if plan.refusals:
        raise AirflowFailException(f"refused: {'; '.join(plan.refusals)} (see {plan.runbook})")
    return plan.describe()


@task
def apply_plan(params=None) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    from spark_jobs.ops import tasks

    if params["dry_run"]:
        raise AirflowSkipException("dry run: the plan above was not applied")
    plan = tasks.restart_plan(params)  # planned again: the state may have moved since show_plan
    print(plan.describe())
    plan.apply()


@task
def run_job(params=None) -> str:
    from spark_jobs.ops import tasks

    return tasks.run_job(params["job"])


with DAG(
    dag_id="sigflow_restart",
    description="On-call: resume, rewind or recover one job from its checkpoint",
    doc_md=__doc__,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "sigflow"},
    tags=["sigflow", "on-call"],
    params={
        "job": Param("ingest", enum=list(JOB_NAMES)),
        "action": Param("resume", enum=["resume", "rewind", "recover"]),
        "to_batch": Param(None, type=["null", "integer"], description="rewind: re-run the batches after this one"),
        "to_time": Param(None, type=["null", "string"],
                         description="rewind: or re-run batches started after this UTC time (ISO 8601)"),
        "recover_from": Param("delta", enum=["delta", "earliest"],
                              description="recover: Delta commit metadata, or rebuild from earliest"),
        "accept_state_loss": Param(False, type="boolean",
                                   description="recover from delta of a stateful job: accept the gap"),
        "force": Param(False, type="boolean", description="recover: replace a checkpoint that looks sound"),
        "dry_run": Param(True, type="boolean", description="print the plan only"),
    },
) as dag:
    show_plan() >> apply_plan() >> run_job()
