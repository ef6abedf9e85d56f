"""Airflow as production runs it (`sigflow airflow --production`): PostgreSQL for the
metadata, the LocalExecutor, each component its own process, people signed in by the FAB
auth manager with sigflow's roles; `sigflow_deploy` submits the jobs to the Spark standalone
cluster through the Spark provider, `sigflow_restart` rewinds one once its plan is approved,
all over the REST API, each role doing exactly its part."""

from __future__ import annotations

import shutil
import tempfile
import urllib.error
from pathlib import Path
from urllib.parse import quote

import pytest
from deltalake import DeltaTable

from spark_jobs.local import airflow_local, cluster, postgres
from spark_jobs.local.broker import free_port
from spark_jobs.local.simulate import MALFORMED_KINDS, generate_events
from tests.dags.chromium import screenshot
from tests.dags.conftest import settings_env
from tests.helpers import MULTI_PROCESS, REPO, assert_private, contents, produce

pytestmark = [MULTI_PROCESS, pytest.mark.slow]

ARTIFACTS = REPO / ".test-artifacts"  # kept by CI, ignored by git


@pytest.mark.timeout(900)  # 292 s in a clean-clone make test
def test_deploy_to_the_cluster_then_a_rewind_over_rest_on_postgres_backed_airflow(settings, spark_cluster, monkeypatch):
    monkeypatch.delenv("AIRFLOW__CORE__UNIT_TEST_MODE", raising=False)  # set for dag.test() elsewhere
    data = Path(tempfile.mkdtemp(prefix="sigflow-production-"))
    data.chmod(0o711)  # PostgreSQL runs as its own user and must enter its directory
    master = cluster.recorded(spark_cluster).master_url
    s = settings.replace(data_dir=str(data), spark_master=master, max_offsets_per_trigger=300)
    records = generate_events(900, seed=31, malformed_ratio=0.02)
    produce(s, records)
    env = {**settings_env(s), "SIGFLOW_SPARK_MASTER": master, "SIGFLOW_SPARK_DRIVER_MEMORY": "1g",
           "SIGFLOW_SPARK_AUTH_SECRET_FILE": str(cluster.auth_secret_file(spark_cluster)),
           # named by user name; FAB knows a user by a database id (spark_jobs/airflow/auth_manager.py)
           "SIGFLOW_RESTART_APPROVERS": airflow_local.REVIEWER}
    apps_before = len(cluster.master_state(cluster.recorded(spark_cluster).ui_url)["completedapps"])

    airflow = airflow_local.start_production(s, port=free_port(), extra_env=env)
    try:
        airflow.wait_ready(progress=lambda line: None)
        secrets = [airflow.password_file, s.airflow_home / "jwt_secret", data / "postgres" / "password"]
        assert_private(secrets, data)
        assert not (data / "postgres" / "initdb.pw").exists()
        # the production auth manager: users in PostgreSQL, passwords hashed there
        assert airflow.request("GET", "/auth/fab/v1/users/viewer")["roles"] == [{"name": "Viewer"}]
        stored = postgres.query(s, "SELECT password FROM ab_user WHERE username = 'reviewer'")
        assert stored.startswith(("pbkdf2:", "scrypt:")) and airflow.password(airflow_local.REVIEWER) not in stored
        viewer = airflow.token(airflow_local.VIEWER)
        assert airflow.request("GET", "/api/v2/dags?dag_id_pattern=sigflow_deploy", token=viewer)  # a viewer reads
        for who in (viewer, airflow.token(airflow_local.REVIEWER)):  # they read, and may not trigger
            refused = _status(lambda token=who: airflow.request("POST", "/api/v2/dags/sigflow_deploy/dagRuns",
                                                                {"logical_date": None, "conf": {}}, token=token))
            assert refused == 403
        sign_in = ARTIFACTS / "airflow-sign-in.png"
        ARTIFACTS.mkdir(exist_ok=True)
        assert "Sign In" in screenshot(f"{airflow.url}/auth/login/", None, sign_in, wait_for_text="Sign In")

        deploy = airflow.trigger("sigflow_deploy", {"mode": "available-now", "jobs": ["ingest"]})
        state, tasks = airflow.wait_for_run("sigflow_deploy", deploy, timeout=900)
        assert state == "success" and tasks["start_ingest"] == "success", tasks
        deployed = contents(s, "device_events")
        assert sum(deployed.values()) == sum(r.kind not in MALFORMED_KINDS for r in records)
        finished = cluster.master_state(cluster.recorded(spark_cluster).ui_url)["completedapps"][apps_before:]
        assert [app["name"] for app in finished] == ["sigflow-ingest"], finished  # it ran on the cluster

        # four eyes (restart_self_approval off): the operator triggers, the reviewer approves
        rewind = airflow.trigger("sigflow_restart", {"job": "ingest", "action": "rewind", "to_batch": 0},
                                 user=airflow_local.OPERATOR)
        action = airflow.wait_for_required_action("sigflow_restart", rewind)
        assert action["subject"] == "rewind ingest: apply this plan?"
        assert "device_events rows of batches after" in action["body"], action["body"]
        # the operator who asked may not answer (the role has no such permission)
        assert _status(lambda: airflow.answer(action, "Approve", user=airflow_local.OPERATOR)) == 403
        picture = ARTIFACTS / "airflow-restart-approval.png"
        page = f"{airflow.url}/dags/sigflow_restart/runs/{quote(rewind)}/tasks/approve_and_apply/required_actions"
        text = screenshot(page, airflow.token(airflow_local.REVIEWER), picture, wait_for_text="apply this plan?")
        assert "device_events rows of batches after" in text and picture.read_bytes().startswith(b"\x89PNG")
        airflow.answer(action, "Approve", user=airflow_local.REVIEWER)
        state, tasks = airflow.wait_for_run("sigflow_restart", rewind, timeout=900)
        assert state == "success" and set(tasks.values()) == {"success"}, tasks
        applied = airflow.request("GET", f"/api/v2/dags/sigflow_restart/dagRuns/{quote(rewind)}/taskInstances/"
                                  "approve_and_apply/xcomEntries/return_value")["value"]
        assert applied[0] == "approved by reviewer (requested by operator)", applied
        assert contents(s, "device_events") == deployed  # batches after 0 re-run, written once
        operations = [entry["operation"] for entry in DeltaTable(s.table_uri("device_events")).history()]
        assert "DELETE" in operations and "RESTORE" not in operations  # a delete readers of the feed see
        finished = cluster.master_state(cluster.recorded(spark_cluster).ui_url)["completedapps"][apps_before:]
        assert [app["name"] for app in finished] == ["sigflow-ingest"] * 2, finished  # the re-run too

        runs = postgres.query(s, "SELECT dag_id || ' ' || state FROM dag_run ORDER BY id").split()
        assert runs == ["sigflow_deploy", "success", "sigflow_restart", "success"]  # the metadata is in PostgreSQL

        # a person removed: the token they hold stops working
        airflow.request("DELETE", "/auth/fab/v1/users/viewer")
        assert _status(lambda: airflow.request("GET", "/api/v2/dags", token=viewer)) in (401, 403)
    finally:
        airflow.stop()
        shutil.rmtree(data, ignore_errors=True)
    assert postgres.status(s) is None


def _status(call) -> int | None:
    """The HTTP status a REST call was refused with (None: it was not)."""
    try:
        call()
    except urllib.error.HTTPError as refused:
        return refused.code
    return None
