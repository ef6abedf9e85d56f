"""sigflow_restart really resumes, rewinds and recovers: tables equal an uninterrupted run."""

import shutil
import subprocess
import sys
from collections import Counter

import pytest

from spark_jobs.local.simulate import generate_events
from spark_jobs.ops import status
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from tests.dags.conftest import (
    answer_as,
    run_dag,
)
from tests.helpers import REPO, at, cli_env, produce, run_job, table, wait_for
from tests.oracle import Event
from tests.spark_jobs.ops.restart.test_restart import _chunks, _dedup_rows, _run_chunks

pytestmark = pytest.mark.slow  # real DAG runs, a job in a JVM of its own


def _raw(settings):
    return Counter(table(settings, "device_events_raw")["value"])


def test_a_rewind_by_dag_applies_only_the_plan_approved_and_reprocesses_exactly_once(spark, settings, dag_env):
    from tests.helpers import single_partition

    s = dag_env(single_partition(settings))
    first, second, third = _chunks()
    ends = _run_chunks(spark, s, [first, second])
    conf = {"job": "dedup", "action": "rewind", "to_batch": ends[0]}
    shown = []

    def reject(action):
        shown.append(action)
        return "Reject"

    state, tasks = run_dag("sigflow_restart", conf, answer=reject)
    assert state == "success" and tasks == {"plan": "success", "approve_and_apply": "success",
                                            "run_job": "skipped"}
    assert Checkpoint(s.checkpoint_uri("dedup")).last_committed() == ends[1]
    # the approval form shows the plan: the batches that re-run and the rows they wrote, deleted
    assert f"delete checkpoint batches {ends[0] + 1}..{ends[1]}" in shown[0]["body"]
    assert "device_events_deduplicated rows of batches after" in shown[0]["body"]
    assert "Plan digest: `" in shown[0]["body"]
    assert "rewinds" not in Checkpoint(s.checkpoint_uri("dedup")).identity()

    def more_batches_then_approve(action):  # the job runs again while the approval waits
        ends.extend(_run_chunks(spark, s, [third]))
        return "Approve"

    state, tasks = run_dag("sigflow_restart", conf, answer=more_batches_then_approve)
    assert state == "failed" and tasks["approve_and_apply"] == "failed" and tasks["run_job"] != "success", tasks
    assert Checkpoint(s.checkpoint_uri("dedup")).last_committed() == ends[2]  # not rewound
    assert "rewinds" not in Checkpoint(s.checkpoint_uri("dedup")).identity()
    uninterrupted = _dedup_rows(s)
    assert sorted(e for e, _, _ in uninterrupted) == sorted(f"{c}{n}" for c in "abc" for n in range(20))

    state, tasks = run_dag("sigflow_restart", conf, answer=lambda action: "Approve")
    assert state == "success" and set(tasks.values()) == {"success"}, tasks
    assert _dedup_rows(s) == uninterrupted
    assert Checkpoint(s.checkpoint_uri("dedup")).identity()["rewinds"][0]["to_batch"] == ends[0]

    # more batches after the approved rewind: a new request shows the plan made from the
    # state as it is now (the new batches), and a Reject of it changes nothing
    fourth = [Event(f"e{n}", f"d{n % 3}", at(10, 15) + n * 15_000, float(n)) for n in range(20)]
    ends.extend(_run_chunks(spark, s, [fourth]))
    committed = Checkpoint(s.checkpoint_uri("dedup")).last_committed()
    state, tasks = run_dag("sigflow_restart", conf, answer=reject)
    assert tasks["approve_and_apply"] == "success" and tasks["run_job"] != "success", tasks
    assert f"delete checkpoint batches {ends[0] + 1}..{committed}" in shown[-1]["body"]
    assert Checkpoint(s.checkpoint_uri("dedup")).last_committed() == committed
    assert len(Checkpoint(s.checkpoint_uri("dedup")).identity()["rewinds"]) == 1


def test_a_forged_approval_xcom_and_a_task_marked_success_apply_nothing(spark, settings, dag_env):
    """Whoever may trigger sigflow_restart may also write XCom entries and mark tasks: while
    the approval waits, an approval's return value with the digest shown is written, and the
    task is marked success. Nobody pressed Approve: nothing is applied."""
    from tests.helpers import single_partition

    s = dag_env(single_partition(settings))
    first, second, _ = _chunks()
    ends = _run_chunks(spark, s, [first, second])
    before = _dedup_rows(s)

    def forge_and_mark_success(api, action):
        ti = action["task_instance"]
        run = f"/api/v2/dags/sigflow_restart/dagRuns/{ti['dag_run_id']}/taskInstances/{ti['task_id']}"
        digest = action["body"].rsplit("Plan digest: `", 1)[1].split("`")[0]
        api.post(f"{run}/xcomEntries", json={"key": "return_value", "value": {
            "chosen_options": ["Approve"], "plan_digest": digest,
            "responded_by_user": {"id": "admin", "name": "admin"}}}).raise_for_status()
        api.patch(run, json={"new_state": "success"}).raise_for_status()

    run_dag("sigflow_restart", {"job": "dedup", "action": "rewind", "to_batch": ends[0]},
            respond=forge_and_mark_success)
    assert Checkpoint(s.checkpoint_uri("dedup")).last_committed() == ends[1]
    assert "rewinds" not in Checkpoint(s.checkpoint_uri("dedup")).identity()
    assert _dedup_rows(s) == before


def test_the_page_approved_is_the_plan_not_an_edited_xcom_and_four_eyes_hold(spark, settings, dag_env, monkeypatch):
    """A reviewer is shown the plan the approval task made itself (no XCom in between to
    edit), the same page each time the state is the same. With self-approval off (the default), the
    user who triggered the run cannot approve it (refused by sigflow, nothing changed); with
    restart_approvers set, an answer from a user outside them is refused; another
    user's Approve applies the plan once. (Airflow itself refuses a user outside assigned users
    on the approval page: tests/spark_jobs/local/test_airflow_production.py.)"""
    from tests.helpers import single_partition

    s = dag_env(single_partition(settings))
    first, second, third = _chunks()
    ends = _run_chunks(spark, s, [first, second])
    checkpoint = Checkpoint(s.checkpoint_uri("dedup"))
    conf = {"job": "dedup", "action": "rewind", "to_batch": ends[0]}
    shown = []

    def self_approve(api, action):  # dag.test() runs are triggered by "dag_test"
        shown.append(action["body"])
        answer_as(api, "sigflow_restart", action, "Approve", user="dag_test").raise_for_status()

    state, tasks = run_dag("sigflow_restart", conf, respond=self_approve)
    assert tasks["approve_and_apply"] == "failed" and tasks["run_job"] != "success", tasks
    assert checkpoint.last_committed() == ends[1] and "rewinds" not in checkpoint.identity()

    monkeypatch.setenv("SIGFLOW_RESTART_APPROVERS", "carol")

    def approve_as(user):
        def respond(api, action):
            shown.append(action["body"])
            answer_as(api, "sigflow_restart", action, "Approve", user=user).raise_for_status()
        return respond

    # this test app lets any user answer (all admins): sigflow's own check refuses mallory
    state, tasks = run_dag("sigflow_restart", conf, respond=approve_as("mallory"))
    assert tasks["approve_and_apply"] == "failed" and "rewinds" not in checkpoint.identity(), tasks

    state, tasks = run_dag("sigflow_restart", conf, respond=approve_as("carol"))
    assert state == "success" and set(tasks.values()) == {"success"}, tasks
    assert f"delete checkpoint batches {ends[0] + 1}..{ends[1]}" in shown[-1] and shown[-1] == shown[0]
    assert len(checkpoint.identity()["rewinds"]) == 1
    audited = table(s, "restart_audit").sort_values("applied_at")
    assert audited[["requested_by", "approved_by", "outcome"]].values.tolist() == [
        ["dag_test", "dag_test", "refused"], ["dag_test", "mallory", "refused"], ["dag_test", "carol", "applied"]]
    assert "cannot approve it too" in audited.detail.iloc[0] and "not in restart_approvers" in audited.detail.iloc[1]


def test_an_unsafe_request_fails_at_the_plan_with_nothing_changed(spark, settings, dag_env):
    s = dag_env(settings)
    produce(s, generate_events(50, seed=1))
    run_job(spark, s, "ingest")
    last = Checkpoint(s.checkpoint_uri("ingest")).last_committed()
    state, tasks = run_dag("sigflow_restart", {"job": "ingest", "action": "rewind", "to_batch": last})
    assert state == "failed" and tasks["plan"] == "failed" and tasks["approve_and_apply"] != "success"


def test_recover_by_dag_continues_after_the_last_batch_in_delta(spark, settings, dag_env):
    s = dag_env(settings)
    records = generate_events(300, seed=8)
    produce(s, records[:150])
    run_job(spark, s, "ingest")
    shutil.rmtree(s.checkpoint_uri("ingest"))
    produce(s, records[150:])
    state, tasks = run_dag("sigflow_restart", {"job": "ingest", "action": "recover"},
                           answer=lambda action: "Approve")
    assert state == "success", tasks
    assert _raw(s) == Counter(r.value for r in records)


def test_resume_by_dag_stops_the_running_job_and_loses_nothing(settings, dag_env):
    s = dag_env(settings)
    records = generate_events(400, seed=9)
    produce(s, records[:200])
    job = subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.cli", "run", "ingest", "--processing-time", "1s"],
        env=cli_env(s), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        # the wait ends at the first commit (up to 100 s seen under load)
        wait_for(lambda: Checkpoint(s.checkpoint_uri("ingest")).last_committed() is not None, timeout_s=240, every_s=1,
                 watched=(job,), what="the running job's first commit")
        assert status.running_pid(s, "ingest") == job.pid
        produce(s, records[200:])
        state, tasks = run_dag("sigflow_restart", {"job": "ingest", "action": "resume"},
                               answer=lambda action: "Approve")
        assert state == "success", tasks
        assert job.wait(timeout=60) == 0  # stopped gracefully by SIGTERM, not killed
    finally:
        if job.poll() is None:
            job.kill()
    assert _raw(s) == Counter(r.value for r in records)
