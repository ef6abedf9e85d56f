"""sigflow_quality passes on pipeline output and fails the task of a table with bad rows."""

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.local.simulate import generate_events
from spark_jobs.runtime.delta.schema import arrow_schema
from tests.dags.conftest import run_dag
from tests.helpers import produce, run_job, table

pytestmark = pytest.mark.slow  # real DAG runs, GX on every table


@pytest.mark.timeout(600)  # 107 s in a clean-clone make test with two DAG runs
def test_quality_passes_the_tables_with_good_rows_and_fails_the_one_with_bad_rows(spark, settings, dag_env):
    """One DAG run over pipeline output where one table got a duplicate row: its task fails
    with the broken expectation, every other table's task passes, the run fails. (The
    pipeline's output meeting every critical expectation: tests/spark_jobs/ops/test_quality.py.)"""
    s = dag_env(settings)
    produce(s, generate_events(300, seed=12))
    for job in ("ingest", "dedup"):
        run_job(spark, s, job)
    row = table(s, "device_events_deduplicated").iloc[:1].to_dict("records")
    schema = arrow_schema(ALL_TABLES["device_events_deduplicated"])
    write_deltalake(s.table_uri("device_events_deduplicated"), pa.Table.from_pylist(row, schema=schema), mode="append")
    state, tasks = run_dag("sigflow_quality")
    assert state == "failed"
    # the tables the jobs did not fill are empty: a warning, not a failed task
    assert {task: state for task, state in tasks.items() if state != "success"} == {
        "check_device_events_deduplicated": "failed"}
    results = table(s, "dq_results")
    failed = results[~results.success & (results.severity == "critical")]
    assert failed[["table_name", "expectation"]].values.tolist() == [
        ["device_events_deduplicated", "expect_compound_columns_to_be_unique"]
    ]
