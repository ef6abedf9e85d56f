"""sigflow_maintenance leaves every table's contents as they were."""

import pytest

from spark_jobs.local.simulate import generate_events
from tests.dags.conftest import run_dag
from tests.helpers import produce, run_job, table

pytestmark = pytest.mark.slow  # a real DAG run


def test_maintenance_run_keeps_table_contents(spark, settings, dag_env, monkeypatch):
    s = dag_env(settings)
    monkeypatch.setenv("SIGFLOW_VACUUM_RETENTION", "0 seconds")
    monkeypatch.setenv("SIGFLOW_VACUUM_RETENTION_FLOOR", "0 seconds")  # vacuum what compaction replaced
    records = generate_events(200, seed=13)
    for start in (0, 100):
        produce(s, records[start:start + 100])
        run_job(spark, s, "ingest")
    before = sorted(map(repr, table(s, "device_events").to_dict("records")))
    state, tasks = run_dag("sigflow_maintenance")
    assert state == "success", tasks
    assert sorted(map(repr, table(s, "device_events").to_dict("records"))) == before
