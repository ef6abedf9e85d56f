"""The streaming DAG loads, and a real dag.test() run writes the Delta tables."""

import json
from collections import Counter
from datetime import datetime

import pytest

from tests.dags.conftest import DAGS, run_dag

pytestmark = pytest.mark.slow  # a real DAG run of every job


def test_jobs_run_in_dependency_order_and_emit_their_tables_as_assets(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS)).get_dag("sigflow_streaming")
    assert [t.task_id for t in dag.topological_sort()][0] == "ingest"
    outlets = {a.name for a in dag.get_task("windowed_averages").outlets}
    assert outlets == {"sigflow.device_signal_averages", "sigflow.device_status"}  # its part of device_status


@pytest.mark.timeout(600)  # 106 s in a clean-clone make test
def test_a_dag_run_processes_kafka_into_every_table(spark, settings, dag_env):
    """100 minutes of events with late ones, a device that falls silent and alerts (some for
    devices that send nothing), read in several batches: every job's every table, the
    late_events and pipeline_metrics get rows, and the raw table holds every record."""
    from spark_jobs.jobs.registry import JOBS
    from spark_jobs.local.simulate import (
        MALFORMED_KINDS,
        event_payload,
        generate_alerts,
        generate_events,
    )
    from tests.helpers import produce, table

    records = generate_events(400, devices=4, spacing_ms=15_000, malformed_ratio=0.05, late_ratio=0.03)
    first = json.loads(next(r.value for r in records if r.kind == "event"))["event_time"]
    first_ms = int(datetime.fromisoformat(first.replace("Z", "+00:00")).timestamp() * 1000)
    quiet = (b"quiet", event_payload("quiet-1", "quiet", first_ms, 1.0))  # its session closes
    s = dag_env(settings.replace(max_offsets_per_trigger=150))
    produce(s, [quiet] + [(r.key, r.value) for r in records])
    alerts = generate_alerts(records, every=15)
    produce(s, alerts, s.streaming.alerts_topic)
    state, tasks = run_dag("sigflow_streaming")
    assert state == "success" and set(tasks.values()) == {"success"}

    sent = [quiet[1]] + [r.value for r in records + alerts]
    assert Counter(table(s, "device_events_raw")["value"]) == Counter(sent)
    every_table = {spec.name for job in JOBS.values() for spec in job.tables} | {"late_events", "pipeline_metrics"}
    empty = sorted(name for name in every_table if len(table(s, name)) == 0)
    assert empty == []

    # what each table holds, from what was sent: every valid event typed once (re-sent ones
    # too), the malformed records quarantined, every valid alert typed
    valid = [quiet[1]] + [r.value for r in records if r.kind not in MALFORMED_KINDS]
    ids = Counter(json.loads(value)["event_id"] for value in valid)
    assert Counter(table(s, "device_events")["event_id"]) == ids
    bad_alerts = [r for r in alerts if r.kind == "bad_severity"]
    assert len(table(s, "quarantined_events")) == len(records) + 1 - len(valid) + len(bad_alerts)
    good_alerts = Counter(json.loads(r.value)["alert_id"] for r in alerts if r.kind != "bad_severity")
    assert Counter(table(s, "device_alerts")["alert_id"]) == good_alerts
    # dedup keeps each event id once; an id it lists as dropped late may still be there
    # when an earlier copy came in time
    late = table(s, "late_events")
    deduplicated = table(s, "device_events_deduplicated")["event_id"]
    assert deduplicated.is_unique
    assert set(ids) - set(late[late.job == "dedup"]["event_id"]) <= set(deduplicated) <= set(ids)


def test_a_job_only_a_restart_mends_fails_its_task_once_without_retries(settings, dag_env):
    """A damaged checkpoint failed ingest's task, then its two retries a minute apart, each
    starting a driver to be refused alike; the log said nothing of a restart."""
    from pathlib import Path

    s = dag_env(settings)
    damaged = Path(s.checkpoint_uri("ingest"))
    damaged.mkdir(parents=True)
    (damaged / "sigflow.json").write_text("{not json")
    from airflow.dag_processing.dagbag import DagBag

    run = DagBag(dag_folder=str(DAGS)).get_dag("sigflow_streaming").test()
    tries = {ti.task_id: (str(ti.state).split(".")[-1].lower(), ti.try_number) for ti in run.get_task_instances()}
    assert tries["ingest"] == ("failed", 1), tries  # its first try, of the three its retries allow
    assert tries["dedup"][0] == "upstream_failed"
