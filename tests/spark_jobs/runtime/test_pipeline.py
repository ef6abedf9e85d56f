"""`sigflow pipeline` runs its jobs at once, as queries side by side in one session: each
job writes what it writes run alone, and the tables they share (late_events,
pipeline_metrics) get every job's rows once. Three jobs: a stateless one and two stateful
ones that both list late rows (all six took three minutes beside the suite)."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_jobs.contracts.tables import LATE_EVENTS, PIPELINE_METRICS
from spark_jobs.errors import NeedsRestart
from spark_jobs.jobs import writers_of
from spark_jobs.jobs.registry import get_job
from spark_jobs.local.simulate import MALFORMED_KINDS, generate_events
from spark_jobs.ops import restart, status
from spark_jobs.runtime import launch
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.lease import Lease
from spark_jobs.runtime.lineage_events import events_file, table_dataset
from tests.helpers import (
    REPO,
    cli_env,
    contents,
    produce,
    run_job,
    sigflow,
    table,
    wait_for,
)

# what says when or under which checkpoint a row was written, not what it holds
WHEN_WRITTEN = frozenset({"ingest_time", "checkpoint_id"})
JOBS_AT_ONCE = ("ingest", "dedup", "windowed-averages")
METRIC_FIGURES = ["job", "batch_id", "input_rows", "output_rows", "late_events", "duplicates_dropped"]


def test_the_pipeline_runs_its_jobs_at_once_and_writes_what_each_writes_alone(spark, settings, tmp_path, caplog):
    s = settings.replace(max_offsets_per_trigger=100)  # three batches a job: watermarks move, late rows show
    events = generate_events(300, devices=5, seed=21, late_ratio=0.05, duplicate_ratio=0.05, malformed_ratio=0.05)
    produce(s, events)
    alone = s.replace(data_dir=str(tmp_path / "alone"))
    for job in JOBS_AT_ONCE:
        run_job(spark, alone, job)

    ended = []
    with caplog.at_level(logging.INFO, logger="sigflow.delta"):
        summaries = launch.run_pipeline(s, list(JOBS_AT_ONCE), on_job_done=lambda summary: ended.append(summary.job))

    # its tables were new: made whole once, none of them then "migrated" by a job that lost the race to create it
    assert [r.getMessage() for r in caplog.records if r.name == "sigflow.delta" and r.levelno >= logging.INFO] == []

    assert sorted(ended) == sorted(JOBS_AT_ONCE) and [summary.job for summary in summaries] == list(JOBS_AT_ONCE)
    for name in {spec.name for job in JOBS_AT_ONCE for spec in get_job(job).tables} | {LATE_EVENTS.name}:
        assert contents(s, name, WHEN_WRITTEN) == contents(alone, name, WHEN_WRITTEN), name
    assert len(table(s, LATE_EVENTS.name)) > 0  # the shared table had rows of several jobs to lose
    figures = {label: table(run, PIPELINE_METRICS.name)[METRIC_FIGURES].sort_values(["job", "batch_id"])
               for label, run in (("at once", s), ("alone", alone))}
    assert figures["at once"].values.tolist() == figures["alone"].values.tolist()
    for job in JOBS_AT_ONCE:  # one progress line per batch: the session's listener registered once
        lines = [json.loads(line) for line in s.progress_file(job).read_text().splitlines()]
        assert [line["batch_id"] for line in lines] == Checkpoint(s.checkpoint_uri(job)).committed_batches(), job
    for job in JOBS_AT_ONCE:  # each run reported its lineage: its topics in, its tables out at their versions
        done = json.loads(events_file(s, job).read_text().splitlines()[-1])
        assert done["eventType"] == "COMPLETE", job
        assert sorted(i["name"] for i in done["inputs"]) == sorted(get_job(job).topics(s.streaming)), job
        versions = {o["name"]: o["facets"]["version"]["datasetVersion"] for o in done["outputs"]}
        for spec in get_job(job).tables:
            reported, now = int(versions[table_dataset(s.table_uri(spec.name))[1]]), DeltaTable(s.table_uri(spec.name)).version()
            if writers_of(spec.name) == (job,):
                assert reported == now, (job, spec.name)
            else:  # shared (device_status, late_events): another job may have written it since
                assert reported <= now, (job, spec.name)


def test_a_second_application_of_running_jobs_is_refused_before_it_starts_a_driver(settings):
    """A second `sigflow pipeline --processing-time` of jobs one of which another run holds
    (a deploy run twice, a job started by hand): refused in one line naming the holder,
    where it used to start a driver and wait, silent and idle, as long as the other ran."""
    held = Lease(Checkpoint(settings.checkpoint_uri("dedup")), "dedup", 60)
    held.acquire()
    try:
        second = sigflow(settings, "pipeline", "--processing-time", "2 seconds", "ingest", "dedup", timeout=120)
    finally:
        held.release()
    assert second.returncode != 0
    refusal = [line for line in second.stderr.splitlines() if line.startswith("sigflow:")]
    assert "dedup is already running on this host" in refusal[0] and f"pid {os.getpid()}" in refusal[0], second.stderr
    assert "Traceback" not in second.stderr and "one application" not in second.stdout
    assert status.running_holder(settings, "ingest") is None  # nothing of it was started


def test_a_job_only_a_restart_can_mend_says_so_once_and_starts_once_it_is_applied(spark, settings, caplog):
    """In one application, a job whose checkpoint is damaged fails alike at every start:
    it was reported as "failed ...; starting it again from its checkpoint" at every try,
    once a minute for ever, as if it would mend by itself; the recover's plan told the
    operator to run it, and once recovered it waited out its backoff."""
    s = settings.replace(max_offsets_per_trigger=100)
    records = generate_events(150, devices=3, seed=51, late_ratio=0.0, duplicate_ratio=0.0, malformed_ratio=0.0)
    produce(s, records)
    ids = {json.loads(r.value)["event_id"] for r in records}
    damaged = Path(s.checkpoint_uri("dedup"))
    damaged.mkdir(parents=True)
    (damaged / "sigflow.json").write_text("{not json")
    stop = threading.Event()
    with caplog.at_level(logging.DEBUG, logger="sigflow.pipeline"):
        app = threading.Thread(target=launch.keep_pipeline, args=(s, ["ingest", "dedup"], stop), daemon=True)
        app.start()
        try:
            wait_for(lambda: len(table(s, "device_events")) == len(records), timeout_s=180,
                     what="ingest to hold every record beside the damaged dedup")
            time.sleep(3 * launch.LEASE_LOOK_S)
            # it looks at its lease, and is not started again while no restart has taken it
            assert not [r for r in caplog.records if "still waits for a restart" in r.getMessage()]
            assert status.job_status(s, "dedup").verdict.word == "DAMAGED"
            recover = restart.plan_recover(s, "dedup", "earliest", force=True)
            assert "dedup starts again in its application, which waits for this restart" in recover.describe()
            # `sigflow stop` of the waiting job: its application would have started it again
            assert restart.stop_running(s, "dedup") == os.getpid()
            assert Lease(Checkpoint(s.checkpoint_uri("dedup")), "dedup", 60).stop_requested()
            recover.apply()  # and the restart applied lets it go on
            wait_for(lambda: _deduplicated_ids(s) == ids, timeout_s=180, what="dedup to run once recovered")
        finally:
            stop.set()
            app.join(timeout=120)
    said = [r.getMessage() for r in caplog.records if r.name == "sigflow.pipeline" and r.levelno >= logging.WARNING]
    assert len(said) == 1 and said[0].startswith("dedup cannot go on until a restart of it is applied: "), said
    assert "sigflow.json is damaged" in said[0] and "sigflow checkpoint recover dedup" in said[0], said
    assert not app.is_alive()


def test_a_refused_job_is_run_again_once_a_restart_took_its_lease_or_a_minute_after_even_so(tmp_path, monkeypatch):
    """What the wait above stands on, without a driver: the refusal is raised again, with no
    run, while nothing has taken the job's lease since; a restart's taking lets the next run
    go, and so does a minute (a table restored by hand takes no lease)."""
    checkpoint = Checkpoint(str(tmp_path / "dedup"))
    lease = Lease(checkpoint, "dedup", 60, shared=True)
    waited = launch._RestartAwaited(lease)  # noqa: SLF001

    def refused_run() -> NeedsRestart:
        waited.before_a_run()
        with lease:  # the run takes the lease, and is refused holding it
            return NeedsRestart("dedup: its sigflow.json is damaged", "recover it")

    first = refused_run()
    assert waited.anew(first)  # said
    for _ in range(3):  # looked at the lease again and again: no run, nothing said
        with pytest.raises(NeedsRestart) as again:
            waited.before_a_run()
        assert again.value is first and not waited.anew(again.value)
    with Lease(checkpoint, "dedup", 60, purpose="recover"):  # a restart applied
        pass
    assert not waited.anew(refused_run())  # run again at once; refused in the same words: not said again

    later = time.monotonic() + launch.RESTART_MAX_S + 1
    with pytest.raises(NeedsRestart):
        waited.before_a_run()
    monkeypatch.setattr(launch.time, "monotonic", lambda: later)
    waited.before_a_run()  # a minute on: run again even so


def _deduplicated_ids(s) -> set[str]:
    rows = table(s, "device_events_deduplicated")
    return set(rows.event_id) if len(rows.columns) else set()  # no table yet: no columns


@pytest.mark.slow  # a driver of its own, run as operators run it
def test_one_application_keeps_its_jobs_going_through_a_failure_and_a_rewind_of_one_and_stops_on_sigterm(settings):
    """`sigflow pipeline --processing-time`: dedup's query fails once (a failpoint) and is
    started again alone while ingest goes on; `sigflow stop dedup` stops dedup alone, a rewind
    of it is applied while ingest runs, and dedup then goes on by itself; SIGTERM stops both
    after their batches in flight. Every valid record is in device_events once, every event id in
    device_events_deduplicated once, as a run without any of it would leave them."""
    s = settings.replace(max_offsets_per_trigger=150)
    first = generate_events(400, devices=5, seed=31, late_ratio=0.0, duplicate_ratio=0.05, malformed_ratio=0.05)
    produce(s, first)
    with _one_application(s, "ingest", "dedup", failpoints="dedup/before_delta_commit:1@raise") as app:
        wait_for(lambda: _all_in(s, first), timeout_s=240, watched=(app,), what="both jobs to hold the first records")
        stopped = sigflow(s, "stop", "dedup", timeout=240)  # the runbook's first step; ingest goes on
        assert stopped.returncode == 0 and "the other jobs of its application" in stopped.stdout, stopped.stderr
        assert status.running_holder(s, "dedup") is None and status.running_holder(s, "ingest") is not None
        rewind = sigflow(s, "checkpoint", "rewind", "dedup", "--to-batch", "0", "--yes", timeout=240)
        assert rewind.returncode == 0, rewind.stdout + rewind.stderr
        assert "  then: dedup starts again in its application, which waits for this restart: it re-reads" \
            in rewind.stdout, rewind.stdout  # not "run dedup": its application does
        second = generate_events(200, devices=5, seed=32, late_ratio=0.0, duplicate_ratio=0.0, malformed_ratio=0.0)
        produce(s, second)
        wait_for(lambda: _all_in(s, first + second), timeout_s=240, watched=(app,),
                 what="both jobs to hold every record after the rewind")
        output = _stopped_by_sigterm(app)
    assert app.returncode == 0, output[-3000:]
    assert re.search(r"dedup failed \(.*failpoint before_delta_commit: dedup batch 1 failed.*\); starting it again",
                     output), [line for line in output.splitlines() if "starting it again" in line]
    assert "dedup: asked to stop" in output and "ingest: asked to stop" not in output
    assert status.running_holder(s, "ingest") is None and status.running_holder(s, "dedup") is None
    assert _all_in(s, first + second)


@pytest.mark.slow  # a driver of its own, run as operators run it
def test_a_job_stopped_in_one_application_stays_stopped_in_the_next_saying_so_until_resumed(settings):
    """`sigflow stop dedup` in one application, which is then stopped and started again: dedup
    stayed stopped in the new application without a word, and `sigflow status` said "not
    running" with nothing to do; a resume's plan said "run dedup", which its application does."""
    s = settings.replace(max_offsets_per_trigger=150)
    records = generate_events(300, devices=5, seed=41, late_ratio=0.0, duplicate_ratio=0.0, malformed_ratio=0.0)
    produce(s, records)
    # what `sigflow stop dedup` leaves when it stops dedup in an application of several jobs:
    # the lease its run held, released, and the request
    lease = Lease(Checkpoint(s.checkpoint_uri("dedup")), "dedup", s.operations.lease_ttl.seconds, shared=True)
    with lease:
        pass
    lease.request_stop()
    shown = sigflow(s, "status").stdout.splitlines()
    at = shown.index(next(line for line in shown if line.startswith("dedup: ")))
    assert shown[at + 1] == "  stopped by `sigflow stop` until a restart of it is applied; 300 records waiting in Kafka"
    assert "  next: `sigflow checkpoint resume dedup --yes`" in shown[at:at + 5], shown[at:at + 5]

    with _one_application(s, "ingest", "dedup") as app:
        wait_for(lambda: len(table(s, "device_events")) == len(records), timeout_s=240, watched=(app,),
                 what="ingest to hold every record")
        assert status.running_holder(s, "dedup") is None  # the request holds in the new application
        resume = sigflow(s, "checkpoint", "resume", "dedup", "--yes", timeout=240)
        assert resume.returncode == 0, resume.stdout + resume.stderr
        assert ("  then: dedup starts again in its application, which waits for this restart, from its "
                "checkpoint, from the start (no checkpoint yet)") in resume.stdout.splitlines(), resume.stdout
        wait_for(lambda: len(table(s, "device_events_deduplicated")) == len(records), timeout_s=240,
                 watched=(app,), what="dedup to run once resumed")
        output = _stopped_by_sigterm(app)
    assert app.returncode == 0, output[-3000:]
    said = [line for line in output.splitlines() if "dedup: stays stopped" in line]
    assert len(said) == 1 and "`sigflow checkpoint resume dedup --yes` starts it again" in said[0], output[-3000:]


@contextmanager
def _one_application(s, *jobs: str, failpoints: str = ""):
    """`sigflow pipeline --processing-time "2 seconds" JOBS`, as operators start it, its output
    on one pipe; killed if the test ends with it still running."""
    env = cli_env(s, {"SIGFLOW_FAILPOINTS": failpoints} if failpoints else None)
    app = subprocess.Popen([sys.executable, "-m", "spark_jobs.cli", "pipeline", "--processing-time", "2 seconds",
                            *jobs], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield app
    finally:
        if app.poll() is None:
            app.kill()
            app.communicate()


def _stopped_by_sigterm(app: subprocess.Popen) -> str:
    app.send_signal(signal.SIGTERM)
    output, _ = app.communicate(timeout=120)
    return output


def _all_in(s, records) -> bool:
    """device_events holds each valid record once, device_events_deduplicated each event id once."""
    valid = [r for r in records if r.kind not in MALFORMED_KINDS]
    events, deduplicated = table(s, "device_events"), table(s, "device_events_deduplicated")
    if events.empty or deduplicated.empty:  # not written yet (or not created: no columns)
        return False
    ids = {json.loads(r.value)["event_id"] for r in valid}
    return (sorted(events.event_id) == sorted(json.loads(r.value)["event_id"] for r in valid)
            and deduplicated.event_id.is_unique and set(deduplicated.event_id) == ids)
