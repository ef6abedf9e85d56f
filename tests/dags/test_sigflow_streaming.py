"""The streaming DAG loads, and a real dag.test() run writes the Delta tables."""

from collections import Counter

from tests.dags.conftest import DAGS, run_dag


def test_jobs_run_in_dependency_order_and_emit_their_tables_as_assets(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS)).get_dag("sigflow_streaming")
    assert [t.task_id for t in dag.topological_sort()][0] == "ingest"
    outlets = {a.name for a in dag.get_task("windowed_averages").outlets}
    assert outlets == {"sigflow.device_signal_averages"}


def test_a_dag_run_processes_kafka_into_every_table(spark, settings, dag_env):
    from spark_jobs.simulate import generate_events
    from tests.helpers import produce, table

    records = generate_events(200, malformed_ratio=0.05)
    produce(dag_env(settings), records)
    state, tasks = run_dag("sigflow_streaming")
    assert state == "success" and set(tasks.values()) == {"success"}
    assert Counter(table(settings, "device_events_raw")["value"]) == Counter(r.value for r in records)
    assert len(table(settings, "device_events_deduplicated")) > 0
