"""sigflow_quality passes on pipeline output and fails the task of a table with bad rows."""

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.local.simulate import generate_events
from spark_jobs.runtime.delta_sink import arrow_schema
from tests.dags.conftest import run_dag
from tests.helpers import produce, run_job, table

pytestmark = pytest.mark.slow  # real DAG runs, GX on every table


@pytest.mark.timeout(600)  # 122 s in a clean-clone make test
def test_quality_passes_on_good_data_and_fails_the_table_with_bad_rows(spark, settings, dag_env):
    s = dag_env(settings)
    produce(s, generate_events(300, seed=12))
    for job in ("ingest", "dedup"):
        run_job(spark, s, job)
    state, tasks = run_dag("sigflow_quality")
    assert state == "success" and tasks["check_device_events_deduplicated"] == "success"

    row = table(s, "device_events_deduplicated").iloc[:1].to_dict("records")
    schema = arrow_schema(ALL_TABLES["device_events_deduplicated"])
    write_deltalake(s.table_uri("device_events_deduplicated"), pa.Table.from_pylist(row, schema=schema), mode="append")
    state, tasks = run_dag("sigflow_quality")
    assert state == "failed"
    assert tasks["check_device_events_deduplicated"] == "failed" and tasks["check_device_events"] == "success"
    results = table(s, "dq_results")
    failed = results[~results.success & (results.severity == "critical")]
    assert failed[["table_name", "expectation"]].values.tolist() == [
        ["device_events_deduplicated", "expect_column_values_to_be_unique"]
    ]
