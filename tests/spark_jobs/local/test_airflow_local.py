"""`make airflow`: a real Airflow standalone serving the sigflow DAGs, driven over its REST API."""

import os
import signal
import subprocess
import sys
import time

import pytest
from deltalake import DeltaTable

from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.errors import SigflowError
from spark_jobs.local import airflow_local
from spark_jobs.local.broker import free_port
from tests.dags.chromium import screenshot
from tests.dags.conftest import settings_env
from tests.helpers import REPO, cli_env, processes_with_env

pytestmark = pytest.mark.slow  # Airflow standalone

ARTIFACTS = REPO / ".test-artifacts"  # kept by CI, ignored by git


@pytest.fixture
def standalone(settings, monkeypatch):
    # other test modules configure Airflow for dag.test() in this process; the standalone
    # gets its own home and settings (airflow_local.environment), not theirs
    monkeypatch.delenv("AIRFLOW__CORE__UNIT_TEST_MODE", raising=False)
    airflow = airflow_local.start(settings, port=free_port(), extra_env=settings_env(settings))
    try:
        airflow.wait_ready(progress=lambda line: None)
        yield airflow
    finally:
        airflow.stop()


def test_a_dag_triggered_over_rest_runs_to_success_and_the_ui_lists_every_dag(standalone, settings):
    # the DAG's set-up tasks only: its spark-submit is proven by tests/dags/test_sigflow_deploy.py
    run_id = standalone.trigger("sigflow_deploy", {"mode": "available-now", "jobs": []})
    state, tasks = standalone.wait_for_run("sigflow_deploy", run_id)

    assert state == "success", tasks
    assert tasks["ensure_tables"] == "success" and tasks["start_ingest"] == "skipped"
    assert all(DeltaTable.is_deltatable(settings.table_uri(name)) for name in ALL_TABLES)

    ARTIFACTS.mkdir(exist_ok=True)
    picture = ARTIFACTS / "airflow-dag-list.png"
    text = screenshot(f"{standalone.url}/dags", standalone.token(), picture, wait_for_text="sigflow_streaming")
    assert all(dag in text for dag in ("sigflow_deploy", "sigflow_streaming", "sigflow_restart",
                                       "sigflow_quality", "sigflow_maintenance"))
    assert picture.read_bytes().startswith(b"\x89PNG")

    standalone.stop()  # the whole process group: api-server, scheduler, dag-processor, triggerer
    with pytest.raises(ProcessLookupError):
        os.killpg(standalone.process.pid, 0)


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
    deadline = time.monotonic() + 60
    while not processes_with_env("AIRFLOW_HOME", home) or not (home / "standalone.log").exists():
        assert time.monotonic() < deadline and command.poll() is None, command.communicate()[0]
        time.sleep(0.5)
    time.sleep(5)  # well inside the wait for the api-server (it takes 30 s or more here)

    command.send_signal(signum)
    output, _ = command.communicate(timeout=90)
    assert command.returncode == 130, output
    assert "Airflow stopped" in output and output.splitlines()[-1] == "sigflow: interrupted", output
    assert processes_with_env("AIRFLOW_HOME", home) == []
