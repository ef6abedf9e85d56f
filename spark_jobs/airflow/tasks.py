"""What each sigflow Airflow task runs: an ops function with the settings of the task's
environment (``hooks.load_settings``). Its lines go to the task log and are returned (the
task's XCom), so a DAG task is one call and the CLI and the DAGs cannot drift apart.

Imported inside the task functions, never at DAG parse time.
"""

from __future__ import annotations

from typing import Any, Mapping

from spark_jobs.airflow.hooks import load_settings
from spark_jobs.config import Settings


def _logged(lines: list[str]) -> list[str]:
    # flushed now: a buffered print reaches the task log after the XCom push, inside the
    # collapsed "Post Execute" group, where on-call does not look
    print("\n".join(lines), flush=True)
    return lines


def describe_settings() -> list[str]:
    from spark_jobs.ops.deploy import describe_settings

    return _logged(describe_settings(load_settings()))


def ensure_topics() -> list[str]:
    from spark_jobs.ops.deploy import ensure_topics

    return _logged(ensure_topics(load_settings()))


def ensure_tables() -> list[str]:
    from spark_jobs.ops.deploy import ensure_tables

    return _logged(ensure_tables(load_settings()))


def register_tables() -> list[str]:
    from spark_jobs.ops.catalog import register_tables

    return _logged(register_tables(load_settings()))


def run_job(job: str) -> str:
    """One available-now run of the job from its checkpoint: its summary line. A refusal only
    a restart mends fails the task without its retries: each would start a driver to be
    refused alike."""
    from airflow.sdk.exceptions import AirflowFailException

    from spark_jobs.errors import NeedsRestart
    from spark_jobs.runtime import launch

    try:
        return _logged([launch.run(job, load_settings()).line()])[0]
    except NeedsRestart as refused:
        raise AirflowFailException(f"{refused} (no retry: a restart of {job} mends it, "
                                   "the sigflow_restart DAG applies one)") from refused


def check_table(table: str) -> str:
    from spark_jobs.ops import quality

    return _logged(quality.check(load_settings(), [table]))[-1]


def reconcile(jobs: list[str] | None = None) -> list[str]:
    """Late events counted in the results they belong to: a line per job."""
    from spark_jobs.ops import reconcile as late_reconcile
    from spark_jobs.runtime.spark import get_spark

    settings = load_settings()
    return _logged(late_reconcile.run(get_spark(settings, "sigflow-reconcile"), settings, jobs).lines())


def maintain() -> list[str]:
    from spark_jobs.ops import maintenance

    return _logged(maintenance.run(load_settings()))


def restart_plan(params: Mapping[str, Any], settings: Settings | None = None):
    """The sigflow_restart form's request as a plan (see spark_jobs.ops.restart.plan)."""
    from spark_jobs.ops import restart

    return restart.plan(
        settings or load_settings(), params["job"], params["action"], to_batch=params["to_batch"],
        to_time=params["to_time"], recover_from=params["recover_from"], force=params["force"],
        accept_state_loss=params["accept_state_loss"],
    )


def restart_approvers() -> list[dict[str, str]]:
    """The Airflow users who may answer a sigflow_restart approval (``restart_approvers``)."""
    return [{"id": user, "name": user} for user in load_settings().operations.approvers]


def approval_page(params: Mapping[str, Any]) -> tuple[str, str, list[str]]:
    """The sigflow_restart request planned now: its approval page, that page's digest
    (spark_jobs.ops.restart.approval) and the plan's commitments; a refused plan raises,
    naming why."""
    from spark_jobs.errors import SigflowError
    from spark_jobs.ops.restart import approval as approvals

    planned = restart_plan(params)
    if planned.refusals:
        raise SigflowError(f"{planned.action} {planned.job} refused: {'; '.join(planned.refusals)}",
                           f"see {planned.runbook}")
    text = approvals.page(planned)
    return text, approvals.page_digest(text), planned.commitments()


def apply_approved_restart(params: Mapping[str, Any], answer, approved_digest: str | None,
                           requester: str | None, approved_steps: list[str] | None = None) -> list[str]:
    """Apply the sigflow_restart request only if ``answer`` (Airflow's record of the human
    response) is an Approve, from someone allowed to give it, of exactly the page that
    planning the request now gives (spark_jobs.ops.restart.approval); ``approved_steps``,
    the commitments of the plan approved, only say what moved."""
    from spark_jobs.errors import SigflowError
    from spark_jobs.ops.restart import approval as approvals
    from spark_jobs.ops.restart import audit
    from spark_jobs.ops.restart.audit import Approval

    settings = load_settings()
    plan = restart_plan(params, settings)
    operations = settings.operations
    why = approvals.refusal(answer, approved_digest, approvals.page_digest(approvals.page(plan)), requester,
                            operations.approvers, operations.restart_self_approval)
    approval = Approval(requester, answer.who() if answer else "nobody")
    if why:
        audit.record(plan.audit_uri, plan, approval, audit.REFUSED, why)
        raise SigflowError(f"{plan.action} {plan.job} not applied: {why}; nothing was changed",
                           "trigger sigflow_restart again and approve the plan it shows",
                           details=plan.changes_since(approved_steps) if approved_steps is not None else [])
    lines = _logged([f"approved by {answer.who()} (requested by {requester or 'unknown'})", plan.describe()])
    plan.apply(approval)
    return lines
