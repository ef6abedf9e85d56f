import functools
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
        "KAFKA_BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers,
        "SIGFLOW_EVENTS_TOPIC": settings.streaming.events_topic,
        "SIGFLOW_ALERTS_TOPIC": settings.streaming.alerts_topic,
        "SIGFLOW_CRITICAL_ALERTS_TOPIC": settings.streaming.critical_alerts_topic,
        "SIGFLOW_TOPIC_PARTITIONS": str(settings.kafka.topic_partitions),
        "SIGFLOW_SHUFFLE_PARTITIONS": "2",
        "SIGFLOW_MAX_OFFSETS_PER_TRIGGER": str(settings.kafka.max_offsets_per_trigger),
        "SIGFLOW_JVM_OPTIONS": settings.spark.java_options,
    }


@pytest.fixture
def dag_env(airflow_home, monkeypatch):
    """Point DAG tasks at a test's settings: ``dag_env(settings)``."""
    def point_at(settings):
        for name, value in settings_env(settings).items():
            monkeypatch.setenv(name, value)
        return settings
    return point_at


def run_dag(dag_id: str, conf: dict | None = None, answer: Callable[[dict], str] | None = None,
            respond: Callable[[object, dict], None] | None = None):
    """A real dag.test() run; returns its state and each task's state. ``answer`` is asked
    for the option to choose in each of the run's Required Actions (it gets the action as
    the REST API shows it), and its choice is sent through the REST API. ``respond`` does
    whatever it likes instead, through the REST client it is given with the action."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS)).get_dag(dag_id)
    if answer is not None:
        respond = _choosing(dag_id, answer)
    if respond is None:
        run = dag.test(run_conf=conf)
    else:
        with _responding(dag_id, respond):
            run = dag.test(run_conf=conf)
    return _states(run)


def _states(run):
    tasks = {ti.task_id: str(ti.state).split(".")[-1].lower() for ti in run.get_task_instances()}
    return str(run.state).split(".")[-1].lower(), tasks


@functools.cache  # building the app costs about a second of CPU; the metadata database is the session's
def rest_api():
    """Airflow's own REST API app, served in this process on the test's metadata database
    (dag.test() has no api-server), as the UI calls it."""
    from airflow.api_fastapi.app import create_app
    from airflow.configuration import conf
    from fastapi.testclient import TestClient

    conf.set("core", "simple_auth_manager_all_admins", "True")  # this process only: no login
    return TestClient(create_app(apps="core"))


def last_run_id(dag_id: str) -> str:
    runs = rest_api().get(f"/api/v2/dags/{dag_id}/dagRuns", params={"order_by": "-run_after", "limit": 1})
    runs.raise_for_status()
    return runs.json()["dag_runs"][0]["dag_run_id"]


def as_user(user: str) -> dict[str, str]:
    """The REST API's authorization header for ``user`` (a signed token of the app's own auth
    manager): sent first, it is the one the API reads, so the request is that user's."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    rest_api()  # the app, and with it the auth manager
    token = get_auth_manager().generate_jwt(user=SimpleAuthManagerUser(username=user, role="ADMIN"))
    return {"Authorization": f"Bearer {token}"}


def answer_as(api, dag_id: str, action: dict, choice: str, user: str | None = None):
    """Answer a Required Action through the REST API, as ``user`` (else the app's anonymous admin)."""
    ti = action["task_instance"]
    return api.patch(
        f"/api/v2/dags/{dag_id}/dagRuns/{ti['dag_run_id']}/taskInstances/{ti['task_id']}/-1/hitlDetails",
        json={"chosen_options": [choice]}, headers=as_user(user) if user else None)


def _choosing(dag_id: str, answer: Callable[[dict], str]) -> Callable[[object, dict], None]:
    def choose(api, action) -> None:
        answer_as(api, dag_id, action, answer(action)).raise_for_status()
    return choose


@contextmanager
def _responding(dag_id: str, respond: Callable[[object, dict], None]) -> Iterator[None]:
    """Respond to the DAG's pending Required Actions while the block runs, as a person would
    in the UI: through Airflow's own REST API."""
    api = rest_api()
    done, failures = threading.Event(), []

    def pending_actions() -> list[dict]:
        pending = api.get(f"/api/v2/dags/{dag_id}/dagRuns/~/hitlDetails", params={"response_received": False})
        pending.raise_for_status()
        return pending.json()["hitl_details"]

    # left unanswered by earlier runs (a task marked success by hand): not this block's to answer
    seen = {action["task_instance"]["id"] for action in pending_actions()}

    def poll() -> None:
        try:
            while not done.wait(0.5):
                for action in pending_actions():
                    ti = action["task_instance"]
                    if ti["id"] not in seen:  # once: marking the task done leaves it unanswered
                        seen.add(ti["id"])
                        respond(api, action)
        except Exception as failure:  # re-raised in the test below
            failures.append(failure)

    responder = threading.Thread(target=poll, daemon=True)
    responder.start()
    try:
        yield
    finally:
        done.set()
        responder.join()
    if failures:
        raise failures[0]
