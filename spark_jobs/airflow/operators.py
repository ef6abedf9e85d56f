"""sigflow's operators: the restart approval, and the spark-submit of a job.

Both do their work when the task runs, never when the DAG file is parsed (the scheduler
parses every DAG file every 30 s)."""

from __future__ import annotations

import os
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk.exceptions import TaskAwaitingInput

if TYPE_CHECKING:
    from spark_jobs.config import Settings

# the driver runs `sigflow run <job>`: the CLI's file, found without importing it
CLI = str(Path(__file__).resolve().parents[1] / "cli" / "__main__.py")


class PlanApprovalOperator(ApprovalOperator):
    """Waits for Approve or Reject of a restart plan it makes itself, then applies the plan
    approved (spark_jobs.ops.restart.approval).

    The page shown is made here from a fresh plan, never from another task's XCom (which
    whoever may trigger a run may also edit), and its digest travels with the waiting task
    (its resume arguments). The answer is the triggerer's reading of Airflow's record of the
    human response, which reaches this task through its own resume state; marking the task
    success by hand records no answer, so nothing is applied."""

    def execute(self, context):
        from spark_jobs.airflow import tasks

        self.response_timeout = timedelta(minutes=context["params"]["approve_within_minutes"])
        self.body, digest, commitments = tasks.approval_page(context["params"])
        self.assigned_users = tasks.restart_approvers() or None
        try:
            return super().execute(context)
        except TaskAwaitingInput as waiting:
            waiting.kwargs = {**(waiting.kwargs or {}), "plan_digest": digest, "commitments": commitments}
            raise

    def execute_complete(self, context, event, plan_digest=None, commitments=None):
        from spark_jobs.airflow import tasks
        from spark_jobs.ops.restart.approval import APPROVE, Answer

        answered = super().execute_complete(context, event)  # a Reject skips what follows here
        if answered["chosen_options"] != [APPROVE]:
            return None
        responder = answered.get("responded_by_user") or {}
        answer = Answer(list(answered["chosen_options"]), responder.get("id"), responder.get("name"),
                        answered.get("responded_at"))
        return tasks.apply_approved_restart(context["params"], answer, plan_digest,
                                            context["dag_run"].triggering_user_name, commitments)


class SigflowSubmitOperator(SparkSubmitOperator):
    """spark-submit of ``sigflow run <job> <mode>`` through the Apache Spark provider.

    When it runs, not when the DAG is parsed: the pinned JARs are hashed before the driver's
    JVM loads them (a JAR that differs from infra/jars/lock.txt fails the task, naming it),
    sigflow's JVM options and class archive join the Spark properties, and the
    ``sigflow_kafka`` connection's credentials reach the driver as settings in its
    environment, the password through a file only this user reads, removed once the driver
    has ended: never on a command line."""

    def __init__(self, *, job: str, mode: str, **kwargs) -> None:
        super().__init__(application=CLI, application_args=["run", job, mode], name=f"sigflow-{job}",
                         conn_id="spark_default", openlineage_inject_parent_job_info=True, **kwargs)

    def spark_properties(self, settings: Settings) -> dict[str, str]:
        """The driver's Spark properties, from this worker's settings: Delta's and the object
        store's, sigflow's JVM options and the drivers' class archive of this machine."""
        from spark_jobs.config import object_store
        from spark_jobs.runtime import class_archive, classpath
        from spark_jobs.runtime.jvm_options import java_options_conf

        archive = class_archive.driver_options(settings.jars_path, settings.spark.class_data_sharing,
                                               os.environ.get("JAVA_HOME"))
        return {"spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
                **classpath.submit_conf(settings.jars_path, object_store(), settings.spark.master),
                **java_options_conf(settings.spark.spark_java_options, archive)}

    def execute(self, context) -> None:
        from spark_jobs.airflow.hooks import SigflowKafkaHook
        from spark_jobs.config import load_settings
        from spark_jobs.runtime import classpath

        kafka = SigflowKafkaHook().settings_overrides()
        # the worker's settings as the driver gets them: the connection's credentials too
        settings = load_settings(overrides=kafka)
        self.jars = classpath.verified_submit_jars(settings.jars_path)
        self.conf = {**self.spark_properties(settings), **(self.conf or {})}
        with tempfile.TemporaryDirectory(prefix="sigflow-submit-") as private:  # 0700
            self.env_vars = {**(self.env_vars or {}), **_driver_env(kafka, Path(private))}
            super().execute(context)


class SigflowPipelineSubmitOperator(SigflowSubmitOperator):
    """spark-submit of ``sigflow pipeline``: the micro-batch jobs the form chose as queries of
    one application (one driver), available-now or continuously (``mode``: empty, or
    ``--processing-time=...``); the form's job list is read when the task runs."""

    def __init__(self, *, mode: str, **kwargs) -> None:
        SparkSubmitOperator.__init__(self, application=CLI, application_args=["pipeline", mode],
                                     name="sigflow-pipeline", conn_id="spark_default",
                                     openlineage_inject_parent_job_info=True, **kwargs)

    def command(self, chosen: list[str]) -> list[str]:
        """The CLI's arguments: the rendered mode, then the micro-batch jobs of ``chosen``."""
        from spark_jobs.jobs import JOB_NAMES

        return [arg for arg in self.application_args if arg] + [job for job in chosen if job in JOB_NAMES]

    def execute(self, context) -> None:
        self.application_args = self.command(context["params"]["jobs"])
        super().execute(context)


def _driver_env(kafka: dict, private: Path) -> dict[str, str]:
    """The connection's settings as the driver's environment; its password as a 0600 file
    in ``private`` named by kafka_password_file."""
    env = {f"SIGFLOW_{key.upper()}": str(value) for key, value in kafka.items()
           if key not in ("kafka_password", "kafka_password_file")}
    if kafka.get("kafka_password"):
        secret = private / "kafka-password"
        descriptor = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(kafka["kafka_password"])
        env["SIGFLOW_KAFKA_PASSWORD_FILE"] = str(secret)
        env["SIGFLOW_KAFKA_PASSWORD"] = ""  # the file wins over one the worker's environment may hold
    return env
