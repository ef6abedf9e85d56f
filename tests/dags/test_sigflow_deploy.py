"""sigflow_deploy creates topics and tables and starts jobs with spark-submit; twice is a no-op."""

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.local.simulate import generate_alerts, generate_events
from spark_jobs.ops.table_lineage import table_lineage
from spark_jobs.runtime.kafka import address as kafka_address
from spark_jobs.runtime.kafka import admin as kafka_admin
from tests.conftest import SECURED_USER
from tests.dags.conftest import last_run_id, run_dag
from tests.helpers import jars_with, json_lines, produce, table, topic_records

pytestmark = pytest.mark.slow  # real DAG runs (dag.test), each task its jobs


@pytest.mark.timeout(600)  # 117 s in the suite here, three times that in a slow CI: two deploys, each with six jobs' first runs
def test_deploying_twice_sets_up_once_and_changes_nothing_the_second_time(settings, dag_env, monkeypatch, tmp_path,
                                                                         capfd, airflow_home):
    # the jobs' lineage beside Airflow's own (tests/conftest.py: airflow_home)
    lineage_dir = str(Path(airflow_home) / "lineage")
    s = dag_env(settings.replace(events_topic=settings.streaming.events_topic + "-new",
                                 alerts_topic=settings.streaming.alerts_topic + "-new", topic_partitions=2,
                                 lineage_dir=lineage_dir))
    monkeypatch.setenv("SIGFLOW_LINEAGE_DIR", lineage_dir)
    # OpenLineage's Spark listener in the submitted drivers: its JAR where the DAG is parsed
    monkeypatch.setenv("SIGFLOW_JARS_DIR", str(jars_with("openlineage", "jars-with-openlineage")))
    monkeypatch.setenv("SIGFLOW_LINEAGE_SPARK_LISTENER", "true")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # spark-submit
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    conf = {"mode": "available-now", "jobs": ["ingest"]}

    state, tasks = run_dag("sigflow_deploy", {**conf, "jobs": []})  # set-up only: no spark-submit yet
    assert state == "success", tasks
    assert tasks["ensure_tables"] == "success" and tasks["start_ingest"] == "skipped"
    topics = kafka_admin.admin(s.kafka.bootstrap_servers).list_topics(timeout=10).topics
    assert len(topics[s.streaming.events_topic].partitions) == 2
    assert all(DeltaTable.is_deltatable(s.table_uri(name)) for name in ALL_TABLES)

    records = generate_events(120, seed=2)
    alerts = generate_alerts(records, every=5, malformed_ratio=0.2)
    produce(s, records)
    produce(s, alerts, topic=s.streaming.alerts_topic)
    capfd.readouterr()
    conf["jobs"] = ["ingest", "alert-fastpath"]
    state, tasks = run_dag("sigflow_deploy", conf)  # starts both: each processes what arrived
    assert state == "success" and tasks["start_ingest"] == "success" and tasks["start_dedup"] == "skipped"
    assert tasks["start_alert_fastpath"] == "success"
    submitted = "".join(capfd.readouterr())  # spark-submit's output, as the task log has it
    assert f"{120 + len(alerts)} rows in" in submitted, submitted[-3000:]  # the submitted job's summary line
    critical = [r for r in alerts if r.kind != "bad_severity" and json.loads(r.value)["severity"] == "critical"]
    assert critical  # the seed gives some
    forwarded = [json.loads(v)["alert_id"] for _, v in topic_records(
        s.kafka.bootstrap_servers, s.streaming.critical_alerts_topic)]
    assert Counter(forwarded) == Counter(json.loads(r.value)["alert_id"] for r in critical)
    # the submitted job's lineage names the task and the DAG run that started it, and Airflow's
    # OpenLineage provider reported that DAG run
    newest = table_lineage(s, "device_events_raw").runs[0]
    assert (newest.job, newest.airflow_task) == ("ingest", "sigflow_deploy.start_ingest")
    assert newest.dag_run == last_run_id("sigflow_deploy")
    assert newest.version == str(DeltaTable(s.table_uri("device_events_raw")).version())
    assert sorted(newest.topics) == sorted(f"kafka://{s.kafka.bootstrap_servers}/{t}"
                                           for t in (s.streaming.events_topic, s.streaming.alerts_topic))
    # Spark's own lineage, from OpenLineage's listener in the submitted driver: the application's
    # run has the same Airflow task run as parent as sigflow's events; its streaming query
    # names both topics, its appends the table
    ours = json_lines(Path(lineage_dir) / "ingest.jsonl")[-1]
    spark_events = json_lines(Path(lineage_dir) / "spark" / "sigflow-ingest.jsonl")
    application = [e for e in spark_events if e["job"]["name"] == "sigflow_ingest"][-1]
    # of the Spark properties, the events carry the master and the app name only: no Kafka option
    assert {key for e in spark_events for key in e["run"]["facets"].get("spark_properties", {}).get(
        "properties", {})} == {"spark.master", "spark.app.name"}
    assert application["run"]["facets"]["parent"]["job"]["name"] == "sigflow_deploy.start_ingest"
    assert application["run"]["facets"]["parent"]["run"]["runId"] == ours["run"]["facets"]["parent"]["run"]["runId"]
    read = {(d["namespace"], d["name"]) for e in spark_events for d in e.get("inputs", [])}
    assert {(f"kafka://{s.kafka.bootstrap_servers}", t) for t in (s.streaming.events_topic, s.streaming.alerts_topic)} <= read
    written = {(d["namespace"], d["name"]) for e in spark_events if e["eventType"] == "COMPLETE"
               for d in e.get("outputs", [])}
    assert ("file", str(Path(s.table_uri("device_events_raw")).resolve())) in written, written
    # sigflow's log4j2 settings reached the submitted driver: no Spark start-up INFO chatter
    chatter = ("default log4j profile", "INFO SparkContext", "INFO SecurityManager")
    assert not [line for line in submitted.splitlines() if any(c in line for c in chatter)], submitted[-3000:]
    engines = {c.get("engineInfo", "") for c in DeltaTable(s.table_uri("device_events_raw")).history()}
    assert any("Delta-Lake/" in e for e in engines), engines  # the submitted job wrote with delta-spark
    versions = {name: DeltaTable(s.table_uri(name)).version() for name in ALL_TABLES}
    state, _ = run_dag("sigflow_deploy", conf)
    assert state == "success"
    assert {name: DeltaTable(s.table_uri(name)).version() for name in ALL_TABLES} == versions
    assert Counter(table(s, "device_events_raw")["value"]) == Counter(r.value for r in records + alerts)


def test_long_running_mode_submits_a_processing_time_trigger(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    from tests.dags.conftest import DAGS

    task = DagBag(dag_folder=str(DAGS)).get_dag("sigflow_deploy").get_task("start_sessions")
    assert task._conn_id == "spark_default" and task.application.endswith("spark_jobs/cli/__main__.py")
    rendered = task.render_template(task.application_args, {"params": {"mode": "long-running",
                                                                        "trigger_interval": "30 seconds"}})
    assert rendered == ["run", "sessions", "--processing-time=30 seconds"]


def test_deploy_over_sasl_ssl_takes_the_password_from_an_airflow_connection_and_never_logs_it(
        secured_broker, dag_env, monkeypatch, tmp_path, capfd, airflow_home):
    secured, password, _ = secured_broker
    s = dag_env(secured.replace(data_dir=str(tmp_path / "data"), events_topic="deploy-secured-events",
                                alerts_topic="deploy-secured-alerts"))
    # The environment names the protocol and the CA only; the credentials are the connection's.
    monkeypatch.setenv("SIGFLOW_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("SIGFLOW_KAFKA_CA_FILE", s.kafka.ca_file)
    monkeypatch.setenv("AIRFLOW_CONN_SIGFLOW_KAFKA", json.dumps(
        {"conn_type": "generic", "login": SECURED_USER, "password": password}))

    state, tasks = run_dag("sigflow_deploy", {"mode": "available-now", "jobs": []})

    assert state == "success", tasks
    topics = kafka_admin.admin(kafka_address.connection(s)).list_topics(timeout=10).topics
    assert {s.streaming.events_topic, s.streaming.alerts_topic} <= set(topics)
    logged = capfd.readouterr()
    assert f"kafka_username = '{SECURED_USER}'" in logged.out + logged.err  # validate_config's listing ran

    # the submitted driver authenticates with the connection's credentials too: they reach it
    # in its environment, the password as a private file, never on its command line
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # spark-submit
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    records = generate_events(40, seed=12)
    from spark_jobs.runtime.kafka.producer import produce_records

    produce_records(kafka_address.connection(s.replace(kafka_username=SECURED_USER, kafka_password=password)),
                    s.streaming.events_topic, [(r.key, r.value) for r in records])
    state, tasks = run_dag("sigflow_deploy", {"mode": "available-now", "jobs": ["ingest"]})
    assert state == "success" and tasks["start_ingest"] == "success", tasks
    assert Counter(table(s, "device_events_raw")["value"]) == Counter(r.value for r in records)

    logged = capfd.readouterr()
    assert password not in logged.out + logged.err
    assert [p for p in Path(airflow_home).rglob("*.log") if password in p.read_text(errors="replace")] == []
    assert [p for p in Path(s.data_dir).rglob("*") if p.is_file() and password.encode() in p.read_bytes()] == []

