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
        "SIGFLOW_JVM_OPTIONS": settings.jvm_options,
    }


@pytest.fixture
def dag_env(airflow_home, monkeypatch):
    """Point DAG tasks at a test's settings: ``dag_env(settings)``."""
    def point_at(settings):
        for name, value in settings_env(settings).items():
            monkeypatch.setenv(name, value)
        return settings
    return point_at


def run_dag(dag_id: str, conf: dict | None = None):
    """A real dag.test() run; returns its state and each task's state."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS)).get_dag(dag_id)
    run = dag.test(run_conf=conf)
    tasks = {ti.task_id: str(ti.state).split(".")[-1].lower() for ti in run.get_task_instances()}
    return str(run.state).split(".")[-1].lower(), tasks
