"""What each sigflow Airflow task runs: an ops function with the settings of the task's
environment. Its lines go to the task log and are returned (the task's XCom), so a DAG
task is one call and the CLI and the DAGs cannot drift apart.

Imported inside the task functions, never at DAG parse time.
"""

from __future__ import annotations

from typing import Any, Mapping

from spark_jobs.config import Settings
from spark_jobs.config import load_settings as _load_from_environment

# The Airflow connection that may hold Kafka's credentials (docs/security.md).
KAFKA_CONNECTION = "sigflow_kafka"


def load_settings() -> Settings:
    """The task environment's settings, with Kafka's credentials from the Airflow connection
    ``sigflow_kafka`` when one is defined: Airflow then masks its password in task logs."""
    return _load_from_environment(overrides=_kafka_connection())


def _kafka_connection() -> dict[str, Any]:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(KAFKA_CONNECTION)
    except AirflowNotFoundException:
        return {}
    overrides: dict[str, Any] = {}
    if conn.login:
        overrides["kafka_username"] = conn.login
    if conn.password:  # it replaces a password file the environment may name
        overrides.update(kafka_password=conn.password, kafka_password_file="")
    for key in ("security_protocol", "sasl_mechanism", "ca_file"):
        if key in conn.extra_dejson:
            overrides[f"kafka_{key}"] = conn.extra_dejson[key]
    return overrides


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


def run_job(job: str) -> str:
    """One available-now run of the job from its checkpoint: its summary line."""
    from spark_jobs.runtime import runner

    return _logged([runner.run(job, load_settings()).line()])[0]


def check_table(table: str) -> str:
    from spark_jobs.ops import quality

    return _logged(quality.check(load_settings(), [table]))[-1]


def maintain() -> list[str]:
    from spark_jobs.ops import maintenance

    return _logged(maintenance.run(load_settings()))


def restart_plan(params: Mapping[str, Any], settings: Settings | None = None):
    """The sigflow_restart form's request as a plan (see spark_jobs.ops.restart.plan)."""
    from spark_jobs.ops import restart

    return restart.plan(
        settings or load_settings(), params["job"], params["action"], to_batch=params["to_batch"],
        to_time=params["to_time"], source=params["recover_from"], force=params["force"],
        accept_state_loss=params["accept_state_loss"],
    )


def restart_approvers() -> list[dict[str, str]]:
    """The Airflow users who may answer a sigflow_restart approval (``restart_approvers``)."""
    return [{"id": user, "name": user} for user in load_settings().operations.approvers]


def apply_approved_restart(params: Mapping[str, Any], approval: Mapping[str, Any] | None,
                           requester: str | None, shown: list[str] | None) -> list[str]:
    """Apply the sigflow_restart request only if ``approval`` (what the approval task
    recorded) is an Approve of exactly the plan that planning it now gives
    (spark_jobs.ops.restart.approval); ``shown``, the plan task's commitments, only says
    what moved."""
    from spark_jobs.errors import SigflowError
    from spark_jobs.ops.restart import approval as approvals

    settings = load_settings()
    plan = restart_plan(params, settings)
    why = approvals.refusal(approval, plan.digest(), requester, settings.operations.approvers)
    if why:
        raise SigflowError(
            f"{plan.action} {plan.job} not applied: {why}; nothing was changed",
            "trigger sigflow_restart again and approve the plan it shows",
            details=plan.changes_since(shown) if shown is not None else [],
        )
    lines = _logged([plan.describe()])
    plan.apply()
    return lines
