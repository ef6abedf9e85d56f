"""`make airflow`: a real Airflow (its components on SQLite) serving the sigflow DAGs, driven
over its REST API."""

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from ipaddress import ip_address
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest
from deltalake import DeltaTable

from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.errors import SigflowError
from spark_jobs.local import airflow_local
from spark_jobs.local.broker import free_port
from spark_jobs.local.simulate import generate_events
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from tests.dags.chromium import screenshot
from tests.dags.conftest import settings_env
from tests.helpers import (
    REPO,
    assert_private,
    cli_env,
    processes_with_env,
    produce,
    wait_for,
)

pytestmark = pytest.mark.slow  # Airflow's components, and a spark-submit

ARTIFACTS = REPO / ".test-artifacts"  # kept by CI, ignored by git


@pytest.fixture
def standalone(settings, monkeypatch):
    # other test modules configure Airflow for dag.test() in this process; the standalone
    # gets its own home and settings (airflow_local.environment), not theirs
    monkeypatch.delenv("AIRFLOW__CORE__UNIT_TEST_MODE", raising=False)
    # the scheduler looks for unanswered approvals past their time every second, not every 15
    sweep = {"AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "1"}
    airflow = airflow_local.start(settings, port=free_port(), extra_env={**settings_env(settings), **sweep})
    try:
        airflow.wait_ready(progress=lambda line: None)
        yield airflow
    finally:
        airflow.stop()


def _listening(pids: list[int]) -> set[tuple[str, str, int]]:
    """(process name, address, port) of every socket these processes listen on."""
    found = set()
    for connection in psutil.net_connections("inet"):
        if connection.status == psutil.CONN_LISTEN and connection.pid in pids:
            try:
                found.add((psutil.Process(connection.pid).name(), connection.laddr.ip, connection.laddr.port))
            except psutil.NoSuchProcess:
                pass
    return found


def _loopback(ip: str) -> bool:
    address = ip_address(ip)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback  # a JVM's ::ffff:127.0.0.1 too


def _started_by(airflow) -> list[int]:
    """The components and every process they started (task runners, spark-submit's driver).
    Not found by their environment: setproctitle overwrites it in the api-server."""
    pids = []
    for component in (airflow.process, *airflow.others):
        try:
            root = psutil.Process(component.pid)
            pids += [root.pid, *(child.pid for child in root.children(recursive=True))]
        except psutil.NoSuchProcess:
            pass
    return pids


@contextmanager
def _listeners_while(airflow) -> Iterator[set[tuple[str, str, int]]]:
    """Every listener of Airflow's processes, sampled every half second until the block ends."""
    seen: set[tuple[str, str, int]] = set()
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            seen.update(_listening(_started_by(airflow)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield seen
    finally:
        done.set()
        sampler.join()


def test_dag_runs_over_rest_listen_on_loopback_only_log_the_result_first_and_a_restart_waits_for_approval(
        standalone, settings, tmp_path):
    """One instance as on-call uses it, while a second with other settings runs beside it."""
    assert_private([standalone.password_file], Path(settings.data_dir))
    with _listeners_while(standalone) as listeners:
        run_id = standalone.trigger("sigflow_deploy", {"mode": "available-now", "jobs": ["ingest"]})
        # a second instance with settings of its own, beside the first: nothing may clash
        second = airflow_local.start(settings.replace(data_dir=str(tmp_path / "second")), port=free_port())
        try:
            state, tasks = standalone.wait_for_run("sigflow_deploy", run_id)
            second.wait_ready(progress=lambda line: None)
            assert standalone.health()["metadatabase"]["status"] == second.health()["metadatabase"]["status"] == "healthy"
            theirs = _listening(_started_by(second))
        finally:
            second.stop()
    assert theirs and not {(ip, port) for _, ip, port in theirs if not _loopback(ip)}, theirs
    assert not {port for _, _, port in theirs} & {port for _, _, port in listeners}, (theirs, listeners)

    assert state == "success", tasks
    assert tasks["ensure_tables"] == "success" and tasks["start_ingest"] == "success"
    assert all(DeltaTable.is_deltatable(settings.table_uri(name)) for name in ALL_TABLES)
    assert {"python", "java"} <= {name.split(".")[0] for name, _, _ in listeners}, listeners  # api-server, driver
    assert not {(name, ip, port) for name, ip, port in listeners if not _loopback(ip)}
    assert standalone.port in {port for _, _, port in listeners}, listeners

    # read as the UI reads it, from the api-server: the scheduler serves no logs of its own
    log = standalone.request("GET", f"/api/v2/dags/sigflow_deploy/dagRuns/{quote(run_id)}/taskInstances/"
                                    "start_ingest/logs/1?full_content=true")
    lines = [entry.get("event", "") if isinstance(entry, dict) else str(entry) for entry in log["content"]]
    assert len(lines) <= 40, "\n".join(lines)
    assert any(line.startswith("ingest: ") and " rows in; written: " in line for line in lines), "\n".join(lines)

    # the UI shows that log too, beside the run's grid
    ARTIFACTS.mkdir(exist_ok=True)
    picture = ARTIFACTS / "airflow-grid-task-log.png"
    page = f"{standalone.url}/dags/sigflow_deploy/runs/{quote(run_id)}/tasks/start_ingest"
    text = screenshot(page, standalone.token(), picture, wait_for_text=" rows in; written: ")
    assert "ensure_tables" in text and picture.read_bytes().startswith(b"\x89PNG")

    # a restart waits for a person, showing its plan; no answer in time changes nothing
    # (Approve and Reject: tests/dags/test_sigflow_restart.py, test_airflow_production.py)
    produce(settings, generate_events(40, seed=5))
    committed = Checkpoint(settings.checkpoint_uri("ingest")).last_committed()
    unanswered = standalone.trigger("sigflow_restart", {"job": "ingest", "action": "resume",
                                                        "approve_within_minutes": 0.1})
    action = standalone.wait_for_required_action("sigflow_restart", unanswered)
    assert "run ingest, from its checkpoint" in action["body"], action
    state, tasks = standalone.wait_for_run("sigflow_restart", unanswered)
    assert state == "failed" and tasks["approve_and_apply"] == "failed" and tasks["run_job"] == "upstream_failed", tasks
    assert Checkpoint(settings.checkpoint_uri("ingest")).last_committed() == committed  # the 40 wait in Kafka

    picture = ARTIFACTS / "airflow-dag-list.png"
    text = screenshot(f"{standalone.url}/dags", standalone.token(), picture, wait_for_text="sigflow_streaming")
    assert all(dag in text for dag in ("sigflow_deploy", "sigflow_streaming", "sigflow_restart",
                                       "sigflow_quality", "sigflow_maintenance"))
    assert picture.read_bytes().startswith(b"\x89PNG")

    standalone.stop()  # every component's process group: api-server, scheduler, dag-processor, triggerer
    for process in (standalone.process, *standalone.others):
        with pytest.raises(ProcessLookupError):
            os.killpg(process.pid, 0)


def test_a_busy_port_is_refused_with_what_to_do(settings):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(SigflowError, match="already in use") as refused:
            airflow_local.start(settings, port=taken.getsockname()[1])
    assert "SIGFLOW_AIRFLOW_PORT" in refused.value.hint


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_airflow_is_starting_stops_every_component(settings, monkeypatch, signum):
    """Ctrl-C (or a service manager's SIGTERM) while `sigflow airflow` waits for the api-server.
    Started as a shell's background job would be: with SIGINT ignored, which Python inherits."""
    monkeypatch.delenv("AIRFLOW__CORE__UNIT_TEST_MODE", raising=False)
    home = settings.airflow_home.resolve()
    command = subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.cli", "airflow", "--port", str(free_port())],
        env=cli_env(settings), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    wait_for(lambda: processes_with_env("AIRFLOW_HOME", home) and (home / "api-server.log").exists(),
             timeout_s=60, watched=(command,), what="Airflow's processes and the api-server's log")
    time.sleep(5)  # well inside the wait for the api-server (it takes 30 s or more here)

    command.send_signal(signum)
    output, _ = command.communicate(timeout=90)
    assert command.returncode == 130, output
    assert "Airflow stopped" in output and output.splitlines()[-1] == "sigflow: interrupted", output
    assert processes_with_env("AIRFLOW_HOME", home) == []
