"""The deploy DAG's shapes (spark_jobs/airflow/shapes.py): one application per job, or the
micro-batch jobs as one application beside the real-time job's own."""

from __future__ import annotations


def test_one_application_submits_the_chosen_micro_batch_jobs_together_and_the_real_time_job_alone(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    from spark_jobs.airflow.shapes import ONE_APPLICATION, ONE_PER_JOB, start_tasks
    from tests.dags.conftest import DAGS

    chosen = ["ingest", "sessions", "alert-fastpath"]
    assert start_tasks(chosen, ONE_APPLICATION) == ["start_pipeline", "start_alert_fastpath"]
    assert start_tasks(chosen, ONE_PER_JOB) == ["start_ingest", "start_sessions", "start_alert_fastpath"]
    assert start_tasks(["alert-fastpath"], ONE_APPLICATION) == ["start_alert_fastpath"]
    task = DagBag(dag_folder=str(DAGS)).get_dag("sigflow_deploy").get_task("start_pipeline")
    template = list(task.application_args)
    for mode, expected in (("long-running", ["pipeline", "--processing-time=30 seconds"]), ("available-now", ["pipeline"])):
        task.application_args = task.render_template(template, {"params": {"mode": mode, "trigger_interval": "30 seconds"}})
        assert task.command(chosen) == [*expected, "ingest", "sessions"]
