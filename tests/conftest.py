"""Shared, real test infrastructure: one Apache Kafka broker and one SparkSession per test session.

Each test gets its own topics, data directory (Delta tables, checkpoints) and settings, so
tests stay isolated while paying the JVM and broker start-up once.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import multiprocessing
import os
import secrets
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
import pytest_timeout

from spark_jobs.config import Settings, load_settings
from spark_jobs.local import broker as embedded
from spark_jobs.runtime.kafka import admin as kafka_admin
from tests.helpers import MULTI_PROCESS, QUICK_JIT, REPO

os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# for the processes tests start with this process's environment (cli_env sets it too)
os.environ.setdefault("SIGFLOW_JIT", QUICK_JIT["jit"])
# py4j logs at interpreter exit, after pytest has closed the captured streams.
logging.getLogger("py4j").setLevel(logging.WARNING)


# How long a test process's end (its session fixtures' teardown: the shared Spark session,
# the brokers) may take: past it, every thread's stack is printed and the process exits, so a
# stuck teardown shows where it stuck instead of holding the suite until CI's limit.
SESSION_END_S = 300


# pytest-timeout's alarm is a SIGALRM timer, which Airflow's DAG import takes over and
# cancels (dag_processing/importers/python_importer.py): a test that parses the DAGs in its
# own process runs without a limit from then on. pytest-timeout's other method, a thread
# that no signal handler can cancel, ends such a test's process past its limit + a grace (a
# minute, or the limit if shorter), printing every thread's stack; xdist reports the test
# as crashed, names it, and goes on with a new worker.
WATCHDOG_GRACE_S = 60


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    settings = pytest_timeout._get_item_settings(item)
    watchdog = None
    if settings.timeout:
        watchdog = threading.Timer(settings.timeout + min(WATCHDOG_GRACE_S, settings.timeout),
                                   pytest_timeout.timeout_timer, (item, settings))
        watchdog.daemon = True
        watchdog.start()
    try:
        yield
    finally:
        if watchdog is not None:
            watchdog.cancel()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    faulthandler.dump_traceback_later(SESSION_END_S, exit=True)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def embedded_broker(tmp_path_factory):
    settings = load_settings(
        env={}, overrides={"data_dir": str(tmp_path_factory.mktemp("broker")), "broker_port": 0,
                           **QUICK_JIT}
    )
    info = embedded.start(settings)
    yield info
    embedded.stop(settings)


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory):
    """A migrated SQLite Airflow home for the whole test session."""
    home = tmp_path_factory.mktemp("airflow")
    (home / "lineage").mkdir()
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        # Airflow's OpenLineage provider on, as the embedded Airflow has it; set before any
        # task runs, since the provider registers its listener only if configured by then.
        # In a thread: its default forks this process, which holds the session's JVM.
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(home / "lineage" / "airflow.jsonl"), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "airflow",
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
    })
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True, capture_output=True)
    # The provider emits a DAG run's events from a process pool, thread or not: forked, each of
    # its processes is a copy of this one, its JVM gateway, delta-rs' runtime and pytest-xdist's
    # channel included (a worker died mid-suite with one about). Spawned, they start afresh.
    multiprocessing.set_start_method("spawn", force=True)
    return home


SECURED_USER = "sigflow-pipeline"


@pytest.fixture(scope="session")
def secured_broker(tmp_path_factory):
    """A SASL_SSL broker of its own: (settings that reach it, the password, its BrokerInfo).
    The password is random, so finding it anywhere means a leak."""
    data = tmp_path_factory.mktemp("secured")
    password = "pw-" + secrets.token_urlsafe(18)
    s = load_settings(env={"SIGFLOW_KAFKA_PASSWORD": password}, overrides={
        "data_dir": str(data / "broker-home"), "broker_port": 0, "kafka_security_protocol": "SASL_SSL",
        "kafka_username": SECURED_USER, "shuffle_partitions": 2, "events_topic": "secured-events",
        "alerts_topic": "secured-alerts", "topic_partitions": 2, **QUICK_JIT})
    info = embedded.start(s)
    yield s.replace(kafka_bootstrap_servers=info.bootstrap_servers, kafka_ca_file=info.ca_file), password, info
    embedded.stop(s)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from spark_jobs.runtime.spark import get_spark

    # C1 alone and the serial collector: each test's queries bring freshly generated code, so
    # C2 kept compiling all session and never paid back, and G1's concurrent threads cost more
    # than they save on 2 cores (measured: docs/streaming-facts.md, "The test suite").
    overrides = {"shuffle_partitions": 2, "jvm_options": "-XX:+UseSerialGC", **QUICK_JIT}
    session = get_spark(load_settings(env={}, overrides=overrides), "sigflow-tests")
    yield session
    _stop_within(session, SESSION_STOP_S)


# How long the session's stop may take at the end of a worker's tests before its JVM is
# killed: a stop that waits on a query thread that never ends must not hold the suite (and
# CI's time) until it is killed from outside.
SESSION_STOP_S = 120


def _stop_within(session, seconds: float) -> None:
    import threading

    import psutil

    def stop() -> None:
        for query in session.streams.active:  # one a test left running would hold the stop
            query.stop()
        session.stop()

    stopping = threading.Thread(target=stop, name="spark-stop", daemon=True)
    stopping.start()
    stopping.join(seconds)
    if not stopping.is_alive():
        return
    drivers = [child for child in psutil.Process().children(recursive=True)
               if "org.apache.spark.deploy.SparkSubmit" in " ".join(_cmdline(child))]
    for driver in drivers:
        driver.kill()
    sys.stderr.write(f"tests: the test session's Spark stop took over {seconds:g} s; its JVM was killed "
                     f"(pids {[d.pid for d in drivers]})\n")


def _cmdline(process) -> list[str]:
    import psutil

    try:
        return process.cmdline()
    except psutil.Error:
        return []


def make_settings(data_dir, bootstrap: str, **overrides) -> Settings:
    suffix = uuid.uuid4().hex[:8]
    values = {
        "data_dir": str(data_dir),
        "kafka_bootstrap_servers": bootstrap,
        "events_topic": f"events-{suffix}",
        "alerts_topic": f"alerts-{suffix}",
        "critical_alerts_topic": f"alerts-critical-{suffix}",
        "shuffle_partitions": 2,
        "kafka_read_timeout_s": 20,
        **QUICK_JIT,
        **overrides,
    }
    return load_settings(env={}, overrides=values)


@pytest.fixture
def settings(tmp_path, embedded_broker) -> Settings:
    """Settings with this test's own topics (created) and data directory."""
    s = make_settings(tmp_path / "data", embedded_broker.bootstrap_servers)
    kafka_admin.create_topics(
        s.kafka.bootstrap_servers, [s.streaming.events_topic, s.streaming.alerts_topic], s.kafka.topic_partitions, s.kafka.topic_retention_ms
    )
    return s


@pytest.fixture(params=["observed by the batch's plan", "read again"])
def late_events_found(request, monkeypatch):
    """How a batch's late events are found: observed by the batch's own plan, which then
    never reads its records again; or, where the plan cannot judge its rows (its tasks carry
    no watermark), by reading them again."""
    from spark_jobs.jobs.late_rows import LATE_WATERMARK_PROPERTY
    from spark_jobs.runtime.commit import BatchCommit
    from spark_jobs.runtime.kafka.source import KafkaRecords
    from spark_jobs.runtime.replay.source import RawRecords

    if request.param == "read again":
        monkeypatch.setattr(BatchCommit, "_late_watermark_for_tasks",
                            lambda self, watermark_ms: self.spark.sparkContext.setLocalProperty(LATE_WATERMARK_PROPERTY, None))
        yield request.param
        return

    def read_again(*_):
        raise AssertionError("a batch's records were read again to find its late events")

    monkeypatch.setattr(KafkaRecords, "range", read_again)
    monkeypatch.setattr(RawRecords, "range", read_again)
    yield request.param

# The other files that take minutes, longest first (measured: docs/testing.md, "Where the
# suite's time goes"). Groups go to the two workers in collection order; starting the long
# ones first lets both workers end together instead of one running a long file alone.
LONG_FILES = (  # seconds of test time each in a clean-clone run of 543 tests
    "tests/spark_jobs/ops/test_reconcile.py",  # 242
    "tests/spark_jobs/runtime/test_runner.py",  # 175
    "tests/spark_jobs/ops/restart/test_recover_from_raw.py",  # 171
    "tests/dags/test_sigflow_deploy.py",  # 162
    "tests/spark_jobs/ops/test_sql_endpoint.py",  # 144
    "tests/spark_jobs/ops/restart/test_restart.py",  # 134
    "tests/spark_jobs/local/test_airflow_local.py",  # 125
    "tests/spark_jobs/runtime/test_pipeline.py",  # 98
    "tests/spark_jobs/ops/test_reconcile_alerts.py",  # 94
    "tests/dags/test_sigflow_restart.py",  # 91
    "tests/spark_jobs/runtime/kafka/test_failover.py",  # 86
    "tests/test_runbooks.py",  # 74
    "tests/spark_jobs/test_cli.py",  # 74
    "tests/spark_jobs/jobs/test_windowed_averages.py",  # 62
    "tests/spark_jobs/runtime/checkpoint/test_lease.py",  # 61
    "tests/spark_jobs/runtime/test_metrics.py",  # 59
    "tests/spark_jobs/jobs/test_ingest.py",  # 54
    "tests/spark_jobs/local/test_broker_security.py",  # 54
    "tests/spark_jobs/jobs/test_alert_join.py",  # 53
    "tests/spark_jobs/contracts/test_contract_fuzz.py",  # 44
    "tests/spark_jobs/jobs/test_device_status.py",  # 41
    "tests/spark_jobs/jobs/test_sessions.py",  # 38
    "tests/spark_jobs/contracts/test_flat_records.py",  # 38
    "tests/spark_jobs/ops/test_quality.py",  # 37
    "tests/spark_jobs/ops/test_table_status.py",  # 36
    "tests/spark_jobs/contracts/test_json_schema.py",  # 35
    "tests/dags/test_sigflow_streaming.py",  # 34
    "tests/spark_jobs/test_cli_signals.py",  # 33
    "tests/spark_jobs/jobs/test_dedup.py",  # 31
    "tests/spark_jobs/ops/test_consumer_reads.py",  # 30
)


@pytest.hookimpl(tryfirst=True)  # before xdist files each test under its group
def pytest_collection_modifyitems(config, items):
    """Every file is one xdist group unless it names its own (its tests share their module
    fixtures on one worker), the multi-process group first, then the long files."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))

    def rank(item) -> int:
        if item.get_closest_marker("xdist_group").args == MULTI_PROCESS.args:
            return -1
        path = item.nodeid.split("::")[0]
        return LONG_FILES.index(path) if path in LONG_FILES else len(LONG_FILES)

    items.sort(key=rank)  # stable: collection order within a rank



@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """xdist's loadgroup names each test's group in its node id; a pytest whose node ids no
    longer take that (9.2 with xdist 3.8) spreads a file's tests over both workers, and each
    worker then builds the module fixtures again. Stop at once rather than run slowly."""
    if node.config.getvalue("dist") == "loadgroup" and any("@" not in nodeid for nodeid in ids):
        pytest.exit("pytest-xdist's --dist loadgroup did not group the tests by file: install "
                    "the pytest pyproject.toml pins (make install)", returncode=4)
