"""The tables by name: the catalog (a Hive metastore) and the SQL endpoint (Spark Connect) started
from a fresh data directory, the pipeline run, and docs/consumers.md's questions asked through a
real Spark Connect client in processes of their own. Each answer is checked against the tables
read by path with delta-rs, another engine, and against what the rows must say."""

import json
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pyarrow.compute as pc
import pytest

from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.local.broker import free_port
from spark_jobs.local.simulate import generate_alerts, generate_events
from spark_jobs.runtime.delta.table_access import exists, read_arrow
from tests.conftest import make_settings
from tests.helpers import REPO, assert_private, produce, sigflow

pytestmark = pytest.mark.slow  # a metastore, a pipeline, a Spark Connect server, clients

DOC = (REPO / "docs" / "consumers.md").read_text()
QUESTIONS = re.findall(r"```sql\n(.*?)```", DOC, re.S)
(CLIENT,) = [b for b in re.findall(r"```python\n(.*?)```", DOC, re.S) if "builder.remote" in b]


def ask(token_file, port: int, *sql: str) -> subprocess.CompletedProcess:
    """docs/consumers.md's client, as written but for the token's path and the port, asking
    each statement and printing its rows as JSON lines."""
    program = (CLIENT.replace('"data/sql/token"', repr(str(token_file))).replace(":15002", f":{port}")
               .replace('spark.sql("SELECT * FROM sigflow.device_sessions").show()\n', "")
               + "import json, sys\nfor statement in sys.argv[1:]:\n"
               "    print(json.dumps([r.asDict() for r in spark.sql(statement).collect()], default=str))\n")
    return subprocess.run([sys.executable, "-c", program, *sql], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def served(tmp_path_factory, embedded_broker):
    data = tmp_path_factory.mktemp("sql") / "data"
    port = free_port()
    s = make_settings(data, embedded_broker.bootstrap_servers, catalog_port=0, sql_port=port)
    env = {"SIGFLOW_CATALOG_PORT": "0", "SIGFLOW_SQL_PORT": str(port), "SIGFLOW_MAX_OFFSETS_PER_TRIGGER": "500"}
    events = generate_events(1200, devices=8, seed=11, spacing_ms=3000)  # an hour of event time: three batches

    def step(*args: str) -> None:
        done = sigflow(s, *args, extra_env=env, timeout=600)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])

    try:
        step("topics", "create")
        produce(s, events)
        produce(s, generate_alerts(events, every=40), topic=s.streaming.alerts_topic)
        # the jobs whose tables docs/consumers.md's questions read (the alert jobs' tables
        # are asked nothing there)
        for args in (("catalog", "start"), ("pipeline", "ingest", "dedup", "windowed-averages", "sessions"),
                     ("sql", "start")):
            step(*args)
        yield s, env, events
    finally:
        sigflow(s, "sql", "stop", extra_env=env)
        sigflow(s, "catalog", "stop", extra_env=env)


def _rows(done: subprocess.CompletedProcess) -> list[list[dict]]:
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]


@pytest.mark.timeout(600)  # 96 s in the suite here, the served pipeline's set-up (63 s) included; three times that in a slow CI
def test_the_documented_questions_are_answered_by_table_name_as_the_tables_hold_them(served):
    s, _, events = served
    token = Path(s.data_dir, "sql", "token")
    tables, described, status, windows, devices, changes = _rows(ask(token, s.operations.sql_port, *QUESTIONS))

    existing = {name for name in ALL_TABLES if exists(s.table_uri(name))}
    assert {"device_signal_averages", "device_sessions", "table_status"} <= existing
    assert {row["tableName"] for row in tables} == existing

    comments = {row["col_name"]: row["comment"] for row in described if row["col_name"] and not row["col_name"].startswith("#")}
    assert comments == ALL_TABLES["device_signal_averages"].column_meanings  # the data dictionary, by name

    by_path = read_arrow(s.table_uri("table_status")).to_pylist()
    newest = {}
    for row in sorted(by_path, key=lambda r: r["recorded_at"]):
        newest[(row["table_name"], row["job"])] = row
    assert {(r["table_name"], r["job"]): (_second(r["batch_time"]), r["final_column"], _second(r["final_through"]))
            for r in status} == {
        key: (_second(r["batch_time"]), r["final_column"], _second(r["final_through"])) for key, r in newest.items()}

    final_through = newest[("device_signal_averages", "windowed-averages")]["final_through"]
    assert final_through is not None  # three batches: the watermark passed windows
    averages = read_arrow(s.table_uri("device_signal_averages"))
    final = averages.filter(pc.and_(pc.equal(averages["window_kind"], "tumbling"),
                                    pc.less_equal(averages["window_end"], final_through)))
    assert windows and len(windows) == final.num_rows
    assert {(w["device_id"], _second(w["window_start"]), round(w["avg_signal"], 9), w["batch_id"]) for w in windows} == {
        (r["device_id"], _second(r["window_start"]), round(r["avg_signal"], 9), r["batch_id"]) for r in final.to_pylist()}

    valid_devices = {json.loads(r.value)["device_id"] for r in events if r.kind == "event"}
    assert {d["device_id"] for d in devices} >= valid_devices  # every device that sent a valid event
    assert len(devices) == read_arrow(s.table_uri("device_status")).num_rows

    deduplicated = read_arrow(s.table_uri("device_events_deduplicated")).num_rows
    assert {c["_change_type"]: c["changes"] for c in changes} == {"insert": deduplicated}  # no rewind: inserts only


def _second(time) -> str | None:
    """A time as both engines print it, to the second (the client's are naive UTC, delta-rs's aware)."""
    return None if time is None else str(time)[:19]


def test_a_client_without_the_token_or_with_another_is_refused(served):
    s, _, _ = served
    wrong = Path(s.data_dir, "wrong-token")
    wrong.write_text("not-the-token-of-this-endpoint\n")
    done = ask(wrong, s.operations.sql_port, "SELECT count(*) FROM sigflow.device_events")
    assert done.returncode != 0 and "Invalid authentication token" in done.stderr
    program = ("from pyspark.sql import SparkSession\n"
               f"SparkSession.builder.remote('sc://localhost:{s.operations.sql_port}').getOrCreate()"
               ".sql('SELECT 1').collect()\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "No authentication token provided" in done.stderr


def test_the_catalog_and_the_endpoint_listen_on_loopback_only_and_the_token_stays_private(served):
    s, _, _ = served
    for record in ("catalog/catalog.json", "sql/sql.json"):
        pid = json.loads(Path(s.data_dir, record).read_text())["pid"]
        processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        listening = [c.laddr for p in processes for c in p.net_connections("inet") if c.status == psutil.CONN_LISTEN]
        assert listening, record
        # the Spark application's own ports (block manager, driver) follow SPARK_LOCAL_IP too
        assert {a.ip for a in listening} <= {"127.0.0.1", "::ffff:127.0.0.1"}, (record, listening)
    assert_private([Path(s.data_dir, "sql", "token")], Path(s.data_dir))


def test_registrations_outlive_the_metastore_and_registering_again_changes_nothing(served):
    s, env, _ = served
    assert sigflow(s, "catalog", "stop", extra_env=env).returncode == 0
    started = sigflow(s, "catalog", "start", extra_env=env)
    assert started.returncode == 0, started.stderr
    again = sigflow(s, "catalog", "register", extra_env=env)
    assert again.returncode == 0, again.stderr
    lines = [line for line in again.stdout.splitlines() if line.startswith("catalog sigflow.")]
    existing = [name for name in ALL_TABLES if exists(s.table_uri(name))]
    assert sorted(lines) == sorted(
        [f"catalog sigflow.{name}: already registered" for name in existing]
        + [f"catalog sigflow.{name}: not registered, the table does not exist yet (deploy creates it)"
           for name in ALL_TABLES if name not in existing])
