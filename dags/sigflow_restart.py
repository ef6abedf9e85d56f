"""sigflow_restart: on-call restarts of one job from its checkpoint.

Trigger with the form. `plan` works out every change the request makes and refuses an
unsafe one (the job still running, a batch no longer in the checkpoint, Kafka data already
deleted, ...) with the reason. `approve` then waits in Required Actions, showing the plan,
for Approve or Reject (at most `approve_within_minutes`). Only an approved plan is applied,
and only if planning it again gives the same changes: if the state moved meanwhile,
`apply_plan` fails saying what changed, and nothing is touched. Reject skips the rest;
no answer in time fails `approve`; both leave everything as it was.

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

from datetime import datetime, timedelta

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG, Param, task

from spark_jobs.jobs import JOB_NAMES


@task
def plan(params=None) -> dict:
    from airflow.sdk.exceptions import AirflowFailException

    from spark_jobs.ops import tasks

    planned = tasks.restart_plan(params)
    print(planned.describe(), flush=True)
    if planned.refusals:
        raise AirflowFailException(f"refused: {'; '.join(planned.refusals)} (see {planned.runbook})")
    return {"markdown": planned.markdown(), "commitments": planned.commitments()}


class PlanApproval(ApprovalOperator):
    """Approve or Reject, answered within the form's ``approve_within_minutes``."""

    def execute(self, context):
        self.response_timeout = timedelta(minutes=context["params"]["approve_within_minutes"])
        return super().execute(context)


@task
def apply_plan(params=None, ti=None) -> list[str]:
    from spark_jobs.ops import tasks

    return tasks.apply_approved_restart(params, ti.xcom_pull(task_ids="plan")["commitments"])


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
        "approve_within_minutes": Param(60, type="number", exclusiveMinimum=0,
                                        description="no answer by then fails the approval; nothing changes"),
    },
) as dag:
    approve = PlanApproval(
        task_id="approve",
        subject="{{ params.action }} {{ params.job }}: apply this plan?",
        body="{{ ti.xcom_pull(task_ids='plan')['markdown'] }}",
    )
    plan() >> approve >> apply_plan() >> run_job()
