"""The move to a cluster: a Spark standalone master and two one-core workers on loopback,
the jobs submitted there by setting spark_master, their executors reading Kafka and
writing Delta. Compared with the same jobs in the tests' local session."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spark_jobs.local import cluster
from spark_jobs.local.simulate import generate_events
from tests.helpers import (
    MULTI_PROCESS,
    REPO,
    cli_env,
    contents,
    produce,
    run_job,
    wait_for,
)

pytestmark = [MULTI_PROCESS, pytest.mark.slow]

COMPARED = ("device_events", "quarantined_events", "device_signal_averages")


def _on_cluster(spark_cluster, settings, name: str):
    """These settings with their own data directory, and the environment that submits to the cluster."""
    s = settings.replace(data_dir=str(settings.data_dir) + f"-{name}")
    env = {"SIGFLOW_SPARK_MASTER": cluster.recorded(spark_cluster).master_url, "SIGFLOW_SPARK_DRIVER_MEMORY": "1g",
           "SIGFLOW_SPARK_AUTH_SECRET_FILE": str(cluster.auth_secret_file(spark_cluster))}
    return s, env


def _apps(spark_cluster) -> list[dict]:
    state = cluster.master_state(cluster.recorded(spark_cluster).ui_url)
    return state["activeapps"] + state["completedapps"]


def test_status_shows_the_master_and_both_workers(spark_cluster):
    lines = cluster.describe(spark_cluster)
    assert lines[0].startswith("master spark://127.0.0.1:")
    assert sum("ALIVE: 0/1 cores" in line or "ALIVE: 1/1 cores" in line for line in lines) == 2


@pytest.mark.timeout(900)  # 211 s in a clean-clone make test
def test_jobs_on_the_cluster_losing_a_worker_mid_run_write_the_tables_a_local_run_writes(spark, settings, spark_cluster):
    """ingest and windowed-averages submitted to the cluster, a worker SIGKILLed once ingest's
    first batch is written: the lost executor's tasks rerun on the other worker, and the
    tables equal the same jobs run in the local session (0 lost, 0 duplicated, windowed
    state carried across batches)."""
    s = settings.replace(max_offsets_per_trigger=600)
    produce(s, generate_events(1800, seed=21, late_ratio=0.03, malformed_ratio=0.02))
    on_cluster, env = _on_cluster(spark_cluster, s, "cluster")
    apps_before = len(_apps(spark_cluster))
    command = subprocess.Popen([sys.executable, "-m", "spark_jobs.cli", "pipeline", "ingest", "windowed-averages"],
                               env=cli_env(on_cluster, env), cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    progress = on_cluster.progress_file("ingest")
    wait_for(lambda: progress.exists() and progress.read_text().strip(), timeout_s=600, every_s=0.1,
             watched=(command,), what="ingest's batch 0 (batch 1 then runs)")

    cluster.kill_worker(spark_cluster, 0)
    output, _ = command.communicate(timeout=900)

    assert command.returncode == 0, output[-3000:]
    assert "Lost executor" in output, output[-3000:]  # the kill took an executor the job was using
    for job in ("ingest", "windowed-averages"):
        run_job(spark, s, job)
    for name in COMPARED:
        assert contents(on_cluster, name) == contents(s, name), name
    # the work ran on the workers: the master granted the application their cores
    apps = _apps(spark_cluster)[apps_before:]
    assert apps and all(app["cores"] >= 1 for app in apps), apps
    info = cluster.start(spark_cluster)  # the worker comes back and registers
    assert len(info.workers_alive()) == 2
    assert set(info.process_started) == {str(pid) for pid in (info.master_pid, *info.worker_pids)}


def test_a_driver_without_the_clusters_secret_is_refused(spark_cluster, tmp_path):
    """A co-tenant of the host submits an application without the cluster's shared secret:
    the master refuses its connection (the driver never registers, no executor starts as
    this user); the secret file is this user's only."""
    from pathlib import Path

    info = cluster.recorded(spark_cluster)
    secret = cluster.auth_secret_file(spark_cluster)
    assert secret.stat().st_mode & 0o077 == 0 and secret.parent.stat().st_mode & 0o077 == 0
    log = Path(cluster.cluster_dir(spark_cluster), "master.log")
    seen = log.read_text().count("Expected SaslMessage")
    code = ("from pyspark.sql import SparkSession; "
            f"SparkSession.builder.master({info.master_url!r}).appName('co-tenant').getOrCreate().range(1).count()")
    intruder = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**cli_env(None), "SPARK_LOCAL_IP": "127.0.0.1"})
    try:
        wait_for(lambda: log.read_text().count("Expected SaslMessage") > seen, timeout_s=120,
                 watched=(intruder,), what="the master refusing the unauthenticated driver")
    finally:
        intruder.kill()
        intruder.wait()
    assert "co-tenant" not in [app["name"] for app in _apps(spark_cluster)]
