import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"


def settings_env(settings) -> dict[str, str]:
    """The environment under which DAG tasks load these settings."""
    return {
        "SIGFLOW_DATA_DIR": settings.data_dir,
        "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
        "SIGFLOW_EVENTS_TOPIC": settings.events_topic,
        "SIGFLOW_ALERTS_TOPIC": settings.alerts_topic,
        "SIGFLOW_TOPIC_PARTITIONS": str(settings.topic_partitions),
        "SIGFLOW_SHUFFLE_PARTITIONS": "2",
        "SIGFLOW_MAX_OFFSETS_PER_TRIGGER": str(settings.max_offsets_per_trigger),
        "SIGFLOW_JVM_OPTIONS": settings.java_options,
    }


@pytest.fixture
def dag_env(airflow_home, monkeypatch):
    """Point DAG tasks at a test's settings: ``dag_env(settings)``."""
    def point_at(settings):
        for name, value in settings_env(settings).items():
            monkeypatch.setenv(name, value)
        return settings
    return point_at


def run_dag(dag_id: str, conf: dict | None = None, answer: Callable[[dict], str] | None = None):
    """A real dag.test() run; returns its state and each task's state. ``answer`` is asked
    for the option to choose in each of the run's Required Actions (it gets the action as
    the REST API shows it), and its choice is sent through the REST API."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS)).get_dag(dag_id)
    if answer is None:
        run = dag.test(run_conf=conf)
    else:
        with _answering(dag_id, answer):
            run = dag.test(run_conf=conf)
    tasks = {ti.task_id: str(ti.state).split(".")[-1].lower() for ti in run.get_task_instances()}
    return str(run.state).split(".")[-1].lower(), tasks


@contextmanager
def _answering(dag_id: str, answer: Callable[[dict], str]) -> Iterator[None]:
    """Answer the DAG's pending Required Actions while the block runs, as a person would in
    the UI: through Airflow's own REST API app, served in this process on the test's
    metadata database (dag.test() has no api-server)."""
    from airflow.api_fastapi.app import create_app
    from airflow.configuration import conf
    from fastapi.testclient import TestClient

    conf.set("core", "simple_auth_manager_all_admins", "True")  # this process only: no login
    api = TestClient(create_app(apps="core"))
    done, failures = threading.Event(), []

    def respond() -> None:
        try:
            while not done.wait(0.5):
                pending = api.get(f"/api/v2/dags/{dag_id}/dagRuns/~/hitlDetails",
                                  params={"response_received": False})
                pending.raise_for_status()
                for action in pending.json()["hitl_details"]:
                    ti = action["task_instance"]
                    api.patch(
                        f"/api/v2/dags/{dag_id}/dagRuns/{ti['dag_run_id']}/taskInstances/{ti['task_id']}/-1/hitlDetails",
                        json={"chosen_options": [answer(action)]},
                    ).raise_for_status()
        except Exception as failure:  # re-raised in the test below
            failures.append(failure)

    responder = threading.Thread(target=respond, daemon=True)
    responder.start()
    try:
        yield
    finally:
        done.set()
        responder.join()
    if failures:
        raise failures[0]
