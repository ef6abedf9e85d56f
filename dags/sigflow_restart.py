"""sigflow_restart: on-call restarts of one job from its checkpoint.

Trigger with the form. `plan` works out every change the request makes and refuses an
unsafe one (the job still running, a batch no longer in the checkpoint, Kafka data already
deleted, ...) with the reason. `approve` then waits in Required Actions, showing the plan
and its digest, for Approve or Reject (at most `approve_within_minutes`; with
`restart_approvers` set, only those users may answer, and not the one who triggered the
run). `apply_plan` applies only when `approve` recorded an Approve and planning again gives
the plan with the digest approved: if the state moved meanwhile, or `approve` was marked
success by hand, or `plan` was cleared and made again, it fails saying why, and nothing is
touched. Reject skips the rest; no answer in time fails `approve`; both leave everything as
it was.

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
from airflow.sdk.exceptions import TaskAwaitingInput

from spark_jobs.jobs import JOB_NAMES


@task
def plan(params=None) -> dict:
    from airflow.sdk.exceptions import AirflowFailException

    from spark_jobs.ops import tasks

    planned = tasks.restart_plan(params)
    print(planned.describe(), flush=True)
    if planned.refusals:
        raise AirflowFailException(f"refused: {'; '.join(planned.refusals)} (see {planned.runbook})")
    return {"markdown": planned.markdown(), "commitments": planned.commitments(), "digest": planned.digest()}


class PlanApproval(ApprovalOperator):
    """Approve or Reject the plan shown, answered within the form's ``approve_within_minutes``.

    The digest of the plan shown travels with the waiting task itself (its resume
    arguments, which no XCom edit reaches) and is returned beside the answer, so that
    ``apply_plan`` applies only the plan that was approved."""

    def execute(self, context):
        from spark_jobs.ops import tasks

        self.response_timeout = timedelta(minutes=context["params"]["approve_within_minutes"])
        shown = context["ti"].xcom_pull(task_ids="plan")
        self.body = f"{shown['markdown']}\n\nPlan digest: `{shown['digest']}`"
        self.assigned_users = tasks.restart_approvers() or None
        try:
            return super().execute(context)
        except TaskAwaitingInput as waiting:
            waiting.kwargs = {**(waiting.kwargs or {}), "plan_digest": shown["digest"]}
            raise

    def execute_complete(self, context, event, plan_digest=None):
        return {**super().execute_complete(context, event), "plan_digest": plan_digest}


@task
def apply_plan(params=None, ti=None, dag_run=None) -> list[str]:
    from spark_jobs.ops import tasks

    shown = ti.xcom_pull(task_ids="plan")
    return tasks.apply_approved_restart(params, ti.xcom_pull(task_ids="approve"), dag_run.triggering_user_name,
                                        shown["commitments"] if shown else None)


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
    approve = PlanApproval(task_id="approve", subject="{{ params.action }} {{ params.job }}: apply this plan?")
    plan() >> approve >> apply_plan() >> run_job()
