"""The streaming DAG loads, and a real dag.test() run writes the Delta tables."""

from collections import Counter

from tests.dags.conftest import DAGS


def test_dag_folder_loads_without_import_errors(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    dag = bag.get_dag("sigflow_streaming")
    assert [t.task_id for t in dag.topological_sort()][0] == "ingest"
    assert dag.owner == "sigflow" and dag.doc_md
    outlets = {a.name for a in dag.get_task("windowed_averages").outlets}
    assert outlets == {"sigflow.device_signal_averages"}


def test_a_dag_run_processes_kafka_into_every_table(airflow_home, spark, settings, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    from spark_jobs.simulate import generate_events
    from tests.helpers import produce, table

    records = generate_events(200, malformed_ratio=0.05)
    produce(settings, records)
    for name, value in {
        "SIGFLOW_DATA_DIR": settings.data_dir, "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
        "SIGFLOW_EVENTS_TOPIC": settings.events_topic, "SIGFLOW_ALERTS_TOPIC": settings.alerts_topic,
        "SIGFLOW_SHUFFLE_PARTITIONS": "2",
    }.items():
        monkeypatch.setenv(name, value)
    dag = DagBag(dag_folder=str(DAGS)).get_dag("sigflow_streaming")
    run = dag.test()
    assert str(run.state) in ("success", "DagRunState.SUCCESS")
    assert Counter(table(settings, "device_events_raw")["value"]) == Counter(r.value for r in records)
    assert len(table(settings, "device_events_deduplicated")) > 0
