"""sigflow_restart: on-call restarts of one job from its checkpoint.

Trigger with the form. `plan` works out every change the request makes and refuses an
unsafe one (the job still running, a batch no longer in the checkpoint, Kafka data already
deleted, another restart half applied, ...) with the reason. `approve_and_apply` then plans
again itself and waits in Required Actions, showing that plan and its digest, for Approve or
Reject (at most `approve_within_minutes`; with `restart_approvers` set, only those users may
answer; unless `restart_self_approval` is on, not the user who triggered the run). Once
answered it reads the answer from Airflow's own record of it and applies only an Approve of
the plan as it stands then, holding the job's lease: if the state moved meanwhile, or the
task was marked success by hand (no answer recorded), it fails or ends saying why, and
nothing is touched. Reject skips the rest; no answer in time fails the task; both leave
everything as it was. `run_job` then runs the job once from its checkpoint.

* `resume`: stop the running query gracefully, check the checkpoint, run the job again.
* `rewind`: re-run every batch after `to_batch` (or after the last batch started before
  `to_time`): the checkpoint is cut back and the job's Delta tables restored to the
  versions that batch left, so those batches are reprocessed exactly once.
* `recover`: a lost or corrupt checkpoint is rebuilt from the Kafka offsets in the Delta
  commit metadata (`recover_from=delta`), or the job's tables are rebuilt from the
  earliest Kafka offsets (`recover_from=earliest`; required for stateful jobs unless
  `accept_state_loss`), or from device_events_raw, every record ingest kept, then Kafka
  from where raw ends (`recover_from=raw`: beyond Kafka's retention).

By hand: `sigflow stop JOB`, `sigflow checkpoint resume|rewind|recover JOB ... [--yes]`,
then `sigflow run JOB`. Runbooks: docs/runbooks/.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

from spark_jobs.airflow.operators import PlanApprovalOperator
from spark_jobs.jobs import JOB_NAMES


@task
def plan(params=None) -> None:
    """What the request would change, in the log, or why it is refused: fails early, before
    anyone is asked."""
    from airflow.sdk.exceptions import AirflowFailException

    from spark_jobs.airflow import tasks

    planned = tasks.restart_plan(params)
    print(planned.describe(), flush=True)
    if planned.refusals:
        raise AirflowFailException(f"refused: {'; '.join(planned.refusals)} (see {planned.runbook})")


@task
def run_job(params=None) -> str:
    from spark_jobs.airflow import tasks

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
        "recover_from": Param("delta", enum=["delta", "earliest", "raw"],
                              description="recover: Delta commit metadata, or rebuild from Kafka's earliest, "
                                          "or from device_events_raw (beyond Kafka's retention)"),
        "accept_state_loss": Param(False, type="boolean",
                                   description="recover from delta of a stateful job: accept the gap"),
        "force": Param(False, type="boolean", description="recover: replace a checkpoint that looks sound"),
        "approve_within_minutes": Param(60, type="number", exclusiveMinimum=0, maximum=7 * 24 * 60,
                                        description="no answer by then fails the approval; nothing changes"),
    },
) as dag:
    approve_and_apply = PlanApprovalOperator(task_id="approve_and_apply",
                                     subject="{{ params.action }} {{ params.job }}: apply this plan?")
    plan() >> approve_and_apply >> run_job()
