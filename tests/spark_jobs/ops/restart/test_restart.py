"""On-call operations: rewind and recover give the tables an uninterrupted run gives."""

import getpass
import shutil
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from spark_jobs.errors import SigflowError
from spark_jobs.local.simulate import generate_events
from spark_jobs.ops import maintenance, restart, status
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.lease import Lease
from spark_jobs.runtime.delta.table_access import commit_metadata
from tests.helpers import at, produce, run_job, send, sigflow, single_partition, table
from tests.oracle import Event


def _chunks():
    """Three chunks of ten minutes; the second and third repeat ids of the one before."""
    first = [Event(f"a{n}", f"d{n % 3}", at(10, 0) + n * 15_000, float(n)) for n in range(20)]
    second = [Event(f"b{n}", f"d{n % 3}", at(10, 5) + n * 15_000, float(n)) for n in range(20)] + first[:5]
    third = [Event(f"c{n}", f"d{n % 3}", at(10, 10) + n * 15_000, float(n)) for n in range(20)] + second[:5]
    return [first, second, third]


def _dedup_rows(s):
    rows = table(s, "device_events_deduplicated")
    return Counter(map(tuple, rows[["event_id", "device_id", "signal"]].values.tolist()))


def _run_chunks(spark, s, chunks, job="dedup") -> list[int]:
    """Send and run each chunk; the last committed batch after each run."""
    ends = []
    for chunk in chunks:
        send(s, chunk)
        run_job(spark, s, job)
        ends.append(Checkpoint(s.checkpoint_uri(job)).last_committed())
    return ends


def _metrics_batches(s, job, checkpoint_id=None) -> list[int]:
    """The batch ids of the job's pipeline_metrics rows (of one checkpoint), repeats kept."""
    rows = table(s, "pipeline_metrics")
    rows = rows[rows.job == job]
    if checkpoint_id:
        rows = rows[rows.checkpoint_id == checkpoint_id]
    return sorted(rows.batch_id)


def test_rewind_reprocesses_the_later_batches_exactly_once(spark, settings):
    s = single_partition(settings)
    ends = _run_chunks(spark, s, _chunks())
    uninterrupted = _dedup_rows(s)
    assert sorted(e for e, _, _ in uninterrupted) == sorted(f"{c}{n}" for c in "abc" for n in range(20))

    plan = restart.plan_rewind(s, "dedup", to_batch=ends[0])
    assert not plan.refusals, plan.describe()
    plan.apply()
    checkpoint = Checkpoint(s.checkpoint_uri("dedup"))
    assert checkpoint.last_committed() == ends[0]
    assert sorted(_dedup_rows(s)) == sorted(k for k in uninterrupted if k[0].startswith("a"))
    assert _metrics_batches(s, "dedup") == list(range(ends[0] + 1))  # the later batches' rows deleted

    run_job(spark, s, "dedup")
    assert _dedup_rows(s) == uninterrupted  # the ids of the first chunk are still remembered
    assert checkpoint.identity()["rewinds"][0]["to_batch"] == ends[0]
    assert _metrics_batches(s, "dedup") == checkpoint.committed_batches()  # one row per batch, re-run ones too


def test_a_rewind_cut_short_blocks_the_job_until_it_is_run_again(spark, settings):
    s = single_partition(settings)
    ends = _run_chunks(spark, s, _chunks()[:2])
    uninterrupted = _dedup_rows(s)
    half = restart.plan_rewind(s, "dedup", to_batch=ends[0])
    half.command = restart.RestartRequest("dedup", "rewind", to_batch=ends[0]).command()

    def dies() -> None:
        raise RuntimeError("the apply's process died here")

    half.changes.insert(1, dies)  # intent recorded, one table's rows deleted, then a crash
    with pytest.raises(RuntimeError):
        half.apply()
    with pytest.raises(SigflowError, match="did not finish") as refused:
        run_job(spark, s, "dedup")
    assert "did not finish" in restart.plan(s, "dedup", "resume").describe()
    # status says what the run says, where it said OK with nothing to do
    shown = status.job_status(s, "dedup").verdict
    assert (shown.word, shown.next_step) == ("RESTART UNFINISHED", refused.value.hint), shown
    assert half.command in shown.next_step
    restart.plan(s, "dedup", "rewind", to_batch=ends[0]).apply()
    assert status.job_status(s, "dedup").verdict.word != "RESTART UNFINISHED"
    run_job(spark, s, "dedup")
    assert _dedup_rows(s) == uninterrupted


def test_rewind_to_a_time_picks_the_last_batch_started_before_it(spark, settings):

    s = single_partition(settings)
    ends = _run_chunks(spark, s, _chunks()[:2])
    checkpoint = Checkpoint(s.checkpoint_uri("dedup"))
    started = checkpoint.offsets(ends[0]).batch_timestamp_ms
    plan = restart.plan_rewind(s, "dedup", to_time=datetime.fromtimestamp(started / 1000, timezone.utc))
    assert f"batches {ends[0] + 1}..{ends[1]}" in plan.describe()


def test_rewind_refuses_unsafe_requests_with_a_reason(spark, settings):
    s = single_partition(settings)
    ends = _run_chunks(spark, s, _chunks()[:2])
    assert "nothing after it" in restart.plan_rewind(s, "dedup", to_batch=ends[1]).describe()
    assert "no longer in the checkpoint" in restart.plan_rewind(s, "dedup", to_batch=-5).describe()
    assert "which batch" in restart.plan_rewind(s, "dedup").describe()
    live = Lease(Checkpoint(s.checkpoint_uri("dedup")), "dedup", 60)
    live.acquire()  # this test process holds the lease, as a live run does
    try:
        refused = restart.plan_rewind(s, "dedup", to_batch=ends[0])
        assert "is running" in refused.describe() and "sigflow stop dedup" in refused.describe()
        with pytest.raises(SigflowError, match="refusing to rewind"):
            refused.apply()
    finally:
        live.release()


def _older_sigflow_row(s) -> None:
    """A row as a sigflow from before rows named their batch wrote it (no batch_id)."""
    import pyarrow as pa

    from spark_jobs.contracts.tables import DEVICE_EVENTS_DEDUPLICATED
    from spark_jobs.runtime.delta import table_access
    from spark_jobs.runtime.delta.schema import arrow_schema, create_table

    uri = s.table_uri(DEVICE_EVENTS_DEDUPLICATED.name)
    create_table(uri, DEVICE_EVENTS_DEDUPLICATED)
    row = {"event_id": "old-0", "device_id": "d-old", "event_time": datetime(2026, 1, 1, tzinfo=timezone.utc),
           "signal": 1.0}
    table_access.append(uri, pa.Table.from_pylist([row], schema=arrow_schema(DEVICE_EVENTS_DEDUPLICATED)))


def test_a_rewind_past_a_vacuum_deletes_the_later_rows_and_re_runs_them(spark, settings):
    """Rows name their batch, so a rewind needs no old table files: vacuum does not limit it."""
    s = single_partition(settings)
    first, second, third = _chunks()
    before = _run_chunks(spark, s, [first, second])
    maintenance.run(s.replace(vacuum_retention="0 seconds", vacuum_retention_floor="0 seconds"))
    _run_chunks(spark, s, [third])
    uninterrupted = _dedup_rows(s)

    plan = restart.plan_rewind(s, "dedup", to_batch=before[0])
    assert not plan.refusals, plan.describe()
    plan.apply()
    assert sorted(e for e, _, _ in _dedup_rows(s)) == sorted(f"a{n}" for n in range(20))
    run_job(spark, s, "dedup")
    assert _dedup_rows(s) == uninterrupted


def test_a_rewind_that_must_restore_files_vacuum_removed_is_refused_naming_the_oldest_it_can_reach(spark, settings):
    """A table holding an older sigflow's rows (no batch_id) is restored by a rewind, which
    needs the files of the version the batch left."""
    s = single_partition(settings)
    _older_sigflow_row(s)
    first, second, third = _chunks()
    fourth = [Event(f"e{n}", f"d{n % 3}", at(10, 15) + n * 15_000, float(n)) for n in range(20)]
    before = _run_chunks(spark, s, [first, second])
    maintenance.run(s.replace(vacuum_retention="0 seconds", vacuum_retention_floor="0 seconds"))
    after = _run_chunks(spark, s, [third, fourth])

    refused = restart.plan_rewind(s, "dedup", to_batch=before[-1])
    assert f"vacuumed the table files of batch {before[-1]}" in refused.describe()
    first_after_vacuum = before[-1] + 1  # its versions hold the compacted files, which are kept
    assert f"the oldest batch a rewind can reach is {first_after_vacuum}" in refused.describe()
    restart.plan_rewind(s, "dedup", to_batch=first_after_vacuum).apply()
    assert first_after_vacuum < after[-1]
    assert sorted(e for e, _, _ in _dedup_rows(s)) == sorted(["old-0"] + [f"{c}{n}" for c in "abc" for n in range(20)])


def test_the_cli_prints_the_plan_and_changes_nothing_without_yes(spark, settings):
    s = single_partition(settings)
    first = _chunks()[0]
    second = [Event(f"b{n}", f"d{n % 3}", at(10, 5) + n * 250, float(n)) for n in range(1_200)] + first[:5]
    ends = _run_chunks(spark, s, [first, second])
    dry = sigflow(s, "checkpoint", "rewind", "dedup", "--to-batch", str(ends[0]))
    assert dry.returncode == 0, dry.stderr
    # the second chunk's new events, counted as every count is printed; its 5 repeats of the
    # first were never written
    assert f"delete the 1,200 device_events_deduplicated rows of batches after {ends[0]}" in dry.stdout
    assert "dry run: nothing changed" in dry.stdout
    assert Checkpoint(s.checkpoint_uri("dedup")).last_committed() == ends[1]
    refused = sigflow(s, "checkpoint", "rewind", "dedup", "--to-batch", str(ends[1]), "--yes")
    assert refused.returncode == 3 and "REFUSED" in refused.stdout


def test_recover_a_lost_checkpoint_from_delta_metadata_and_a_rewind_after_it_keeps_the_lost_ones_rows(
        spark, settings):
    records = generate_events(300, seed=3, malformed_ratio=0.05)
    checkpoint = Checkpoint(settings.checkpoint_uri("ingest"))
    for start in (0, 75):  # batches 0 and 1 of the checkpoint about to be lost
        produce(settings, records[start:start + 75])
        run_job(spark, settings, "ingest")
    lost = checkpoint.checkpoint_id("ingest")
    shutil.rmtree(checkpoint.path)
    produce(settings, records[150:225])

    plan = restart.plan_recover(settings, "ingest").describe()
    # device_alerts never had a row, so no commit: where it stood comes from pipeline_metrics,
    # and no table is ahead of another
    assert "looks sound" not in plan and "restore" not in plan and not commit_metadata(
        settings.table_uri("device_alerts"))
    restart.plan_recover(settings, "ingest").apply()
    run_job(spark, settings, "ingest")
    assert Counter(table(settings, "device_events_raw")["value"]) == Counter(r.value for r in records[:225])

    produce(settings, records[225:])
    run_job(spark, settings, "ingest")  # batch ids restarted: this checkpoint has its own 0 and 1 too
    recovered = checkpoint.checkpoint_id("ingest")
    assert recovered != lost and checkpoint.committed_batches() == [0, 1]
    restart.plan_rewind(settings, "ingest", to_batch=0).apply()
    assert _metrics_batches(settings, "ingest", lost) == [0, 1]  # the lost checkpoint's rows are history
    assert _metrics_batches(settings, "ingest", recovered) == [0]
    run_job(spark, settings, "ingest")
    assert Counter(table(settings, "device_events_raw")["value"]) == Counter(r.value for r in records)
    assert _metrics_batches(settings, "ingest", recovered) == [0, 1]


def test_recover_a_corrupt_checkpoint_and_keep_it_aside(spark, settings):
    records = generate_events(200, seed=4)
    produce(settings, records[:100])
    run_job(spark, settings, "ingest")
    produce(settings, records[100:])
    checkpoint = Checkpoint(settings.checkpoint_uri("ingest"))
    last = checkpoint.offset_batches()[-1]
    Path(checkpoint.path, "offsets", str(last)).write_text("v1\n{trunc")
    assert any("truncated" in p for p in checkpoint.problems())

    restart.plan_recover(settings, "ingest").apply()
    run_job(spark, settings, "ingest")
    assert Counter(table(settings, "device_events_raw")["value"]) == Counter(r.value for r in records)
    kept = list(Path(checkpoint.path).parent.glob("ingest.lost-*"))
    assert len(kept) == 1 and (kept[0] / "offsets").exists()


def test_recover_a_stateful_job_refuses_a_gap_and_rebuilds_from_earliest(spark, settings):
    s = single_partition(settings)
    _run_chunks(spark, s, _chunks())
    uninterrupted = _dedup_rows(s)
    shutil.rmtree(s.checkpoint_uri("dedup"))

    refused = restart.plan_recover(s, "dedup").describe()
    assert "stateful" in refused and "--from earliest" in refused
    assert "duplicates" not in restart.plan_recover(s, "dedup", accept_state_loss=True).refusals
    restart.plan_recover(s, "dedup", recover_from="earliest").apply()
    run_job(spark, s, "dedup")
    assert _dedup_rows(s) == uninterrupted


def test_recover_refuses_to_replace_a_sound_checkpoint(spark, settings):
    send(settings, [Event("a", "d1", at(9, 0), 1.0)])
    run_job(spark, settings, "ingest")
    assert "looks sound" in restart.plan_recover(settings, "ingest").describe()
    assert not restart.plan_recover(settings, "ingest", force=True).refusals


@pytest.mark.slow  # a driver JVM of its own
def test_a_changed_window_setting_is_refused_with_the_runbook_not_a_stack_trace(spark, settings):
    send(settings, [Event("a", "d1", at(9, 0), 1.0)])
    run_job(spark, settings, "windowed-averages")
    out = sigflow(settings, "run", "windowed-averages", extra_env={"SIGFLOW_TUMBLING_WINDOW": "10 minutes"})
    assert out.returncode == 2
    assert "tumbling_window was '5 minutes', now '10 minutes'" in out.stderr
    assert "docs/runbooks/incompatible-change.md" in out.stderr and "Traceback" not in out.stderr
    # status with those settings says so, where it said OK
    shown = status.job_status(settings.replace(tumbling_window="10 minutes"), "windowed-averages").verdict
    assert shown.word == "SETTINGS CHANGED" and "tumbling_window was '5 minutes', now '10 minutes'" in shown.reason
    assert "docs/runbooks/incompatible-change.md" in shown.next_step
    run_job(spark, settings.replace(trigger_interval="1 second"), "windowed-averages")  # compatible change
    assert status.job_status(settings.replace(trigger_interval="1 second"), "windowed-averages").verdict.word == "OK"


def test_a_changed_watermark_policy_is_refused_because_spark_would_ignore_it(spark, settings):
    """Spark keeps multipleWatermarkPolicy in the offset log and silently uses the old one on
    restart; so sigflow refuses the change, also for a checkpoint recorded before it knew."""
    from spark_jobs.jobs.registry import get_job
    from spark_jobs.runtime.runner import JobRun

    send(settings, [Event("a", "d1", at(9, 0), 1.0)])
    run_job(spark, settings.replace(multiple_watermark_policy="min"), "alert-join")
    checkpoint = Checkpoint(settings.checkpoint_uri("alert-join"))
    assert checkpoint.latest_offsets().conf["spark.sql.streaming.multipleWatermarkPolicy"] == "min"

    with pytest.raises(SigflowError, match="multiple_watermark_policy was 'min', now 'max'"):
        JobRun(get_job("alert-join"), settings.replace(multiple_watermark_policy="max"), spark)
    identity = checkpoint.identity()
    del identity["settings"]["multiple_watermark_policy"]  # as an older sigflow recorded it
    checkpoint.save_identity(identity)
    with pytest.raises(SigflowError, match="multiple_watermark_policy was 'min', now 'max'"):
        JobRun(get_job("alert-join"), settings.replace(multiple_watermark_policy="max"), spark)


def test_a_sessions_checkpoint_with_the_old_state_layout_is_refused_with_the_runbook(spark, settings):
    """Sessions keep every open session of a bucket of devices since state format 4; a
    checkpoint built before state formats were recorded is refused by sigflow, not failed
    in the JVM."""
    from spark_jobs.jobs.registry import get_job
    from spark_jobs.jobs.sessions import STATE_FORMAT
    from spark_jobs.runtime.runner import JobRun

    send(settings, [Event("a", "d1", at(9, 0), 1.0)])
    run_job(spark, settings, "sessions")
    checkpoint = Checkpoint(settings.checkpoint_uri("sessions"))
    identity = checkpoint.identity()
    assert identity["settings"]["state_format"] == str(STATE_FORMAT) == "4"
    del identity["settings"]["state_format"]  # as a sigflow before state formats recorded it
    checkpoint.save_identity(identity)
    with pytest.raises(SigflowError, match="state_format was '1', now '4'") as err:
        JobRun(get_job("sessions"), settings, spark)
    assert "incompatible-change.md" in err.value.hint


def test_a_run_started_while_a_rewind_is_applied_is_refused_and_the_rewound_batches_run_once(spark, settings):
    """The apply holds the job's lease: a run (the scheduler's, a CLI's) that starts while
    the checkpoint is being cut back is refused, naming the rewind; the run after it
    re-runs the rewound batches exactly once."""
    import threading

    from spark_jobs.errors import JobAlreadyRunning

    s = single_partition(settings)
    first, second, third = _chunks()
    ends = _run_chunks(spark, s, [first, second, third])
    uninterrupted = _dedup_rows(s)
    plan = restart.plan_rewind(s, "dedup", to_batch=ends[0])
    halfway, go_on = threading.Event(), threading.Event()

    def pause() -> None:  # the apply, between two of its steps
        halfway.set()
        assert go_on.wait(120)

    plan.changes.insert(len(plan.changes) // 2, pause)
    applying = threading.Thread(target=plan.apply)
    applying.start()
    try:
        assert halfway.wait(120)
        with pytest.raises(JobAlreadyRunning, match="a rewind is being applied to its checkpoint") as refused:
            run_job(spark, s, "dedup")
        assert "once the restart is applied" in refused.value.hint
    finally:
        go_on.set()
        applying.join()
    run_job(spark, s, "dedup")
    assert _dedup_rows(s) == uninterrupted


def test_a_recover_that_dies_half_way_keeps_the_job_from_starting_until_it_is_applied_again(spark, settings):
    """The checkpoint is moved aside before any row is deleted, and the apply says what it is
    doing beside the checkpoint first: a recover that stops half way leaves a job that
    refuses to start (it would otherwise start a fresh checkpoint past the deleted rows)
    until the recover is applied again, which finishes it."""
    s = single_partition(settings)
    _run_chunks(spark, s, _chunks())
    uninterrupted = _dedup_rows(s)
    plan = restart.plan_recover(s, "dedup", recover_from="earliest", force=True)
    assert plan.steps[0].startswith("move the old checkpoint aside")  # before any delete
    assert any(step.startswith("delete every row") for step in plan.steps[1:])

    def dies() -> None:
        raise RuntimeError("the apply's process died here")

    plan.changes.insert(2, dies)  # after the move and the first delete
    with pytest.raises(RuntimeError):
        plan.apply()
    with pytest.raises(SigflowError, match="a recover of its checkpoint did not finish") as refused:
        run_job(spark, s, "dedup")
    assert "sigflow checkpoint recover dedup" in refused.value.hint

    again = restart.plan_recover(s, "dedup", recover_from="earliest")
    assert not again.refusals and not again.steps[0].startswith("move")  # moved already
    again.apply()
    run_job(spark, s, "dedup")
    assert _dedup_rows(s) == uninterrupted


def test_a_recover_killed_after_moving_the_checkpoint_aside_blocks_resume_and_run_until_it_is_finished(
        spark, settings):
    """The on-call sequence that once wrote every record twice: a recover from earliest is
    SIGKILLed right after it moved the checkpoint aside; resume (no checkpoint, so nothing to
    change) and run must not go on from the earliest offsets on top of the full tables. Both
    refuse, naming the recover and its command; that command finishes it, and then every
    record is in device_events_raw once."""
    records = generate_events(300, seed=59)
    produce(settings, records)
    run_job(spark, settings, "ingest")
    command = "sigflow checkpoint recover ingest --from earliest --force --yes"

    killed = sigflow(settings, *command.split()[1:], extra_env={"SIGFLOW_FAILPOINTS": "ingest/after_restart_step:1"})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert not Checkpoint(settings.checkpoint_uri("ingest")).exists()  # moved aside, nothing else

    resumed = sigflow(settings, "checkpoint", "resume", "ingest", "--yes")
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    assert "a recover of ingest did not finish" in resumed.stdout and command in resumed.stdout
    with pytest.raises(SigflowError, match="a recover of its checkpoint did not finish") as refused:
        run_job(spark, settings, "ingest")
    assert command in refused.value.hint

    finished = sigflow(settings, *command.split()[1:])
    assert finished.returncode == 0, finished.stdout + finished.stderr
    run_job(spark, settings, "ingest")
    assert Counter(table(settings, "device_events_raw")["value"]) == Counter(r.value for r in records)
    # the killed apply left no row (its intent said it instead); the one that finished it did
    audited = table(settings, "restart_audit")
    assert audited[["action", "approved_by", "outcome", "command"]].values.tolist() == [
        ["recover", "CLI --yes", "applied", command]]
    assert audited.requested_by[0] == getpass.getuser()


@pytest.mark.parametrize("content", ['{"action": "recover", "job": "ing', "null", "[]", '{"steps": 5}', "\xff"])
def test_an_unreadable_intent_refuses_the_run_and_every_plan_in_one_line(spark, settings, content):
    """An intent file that is there but is not one (truncated, null, the wrong shape) says
    a restart may be half applied: it is never taken as "none"."""
    from spark_jobs.runtime.checkpoint import intent

    checkpoint = Checkpoint(settings.checkpoint_uri("ingest"))
    Path(checkpoint.beside).mkdir(parents=True, exist_ok=True)
    Path(intent.path(checkpoint.beside)).write_bytes(content.encode("latin-1"))

    with pytest.raises(intent.UnreadableIntent, match="intent file .* is there but") as refused:
        run_job(spark, settings, "ingest")
    assert "\n" not in str(refused.value) and "delete that file" in refused.value.hint
    for action in ("resume", "rewind", "recover"):
        planned = restart.plan(settings, "ingest", action, to_batch=0, recover_from="earliest", force=True)
        assert any("intent file" in reason for reason in planned.refusals), planned.describe()


def test_a_batch_committed_between_plan_and_apply_makes_the_apply_refuse_and_change_nothing(spark, settings):
    """A plan is made before its lease is taken; a scheduled run that commits in between
    would be rewound by a plan that never listed its batch. Holding the lease, the apply
    plans again and refuses on any difference, changing nothing."""
    s = single_partition(settings)
    first, second, third = _chunks()
    ends = _run_chunks(spark, s, [first, second])
    plan = restart.plan(s, "dedup", "rewind", to_batch=ends[0])
    assert not plan.refusals, plan.describe()
    _run_chunks(spark, s, [third])  # the scheduled run, between the plan and its apply
    checkpoint = Checkpoint(s.checkpoint_uri("dedup"))
    before = (checkpoint.committed_batches(), _dedup_rows(s))
    with pytest.raises(SigflowError, match="state moved between planning and taking its lease") as refused:
        plan.apply()
    assert any("planned now, not approved" in line for line in refused.value.details)
    assert (checkpoint.committed_batches(), _dedup_rows(s)) == before
    assert checkpoint.restart_intent() is None


def test_a_rewind_that_can_no_longer_finish_is_given_up_by_a_recover_from_earliest(spark, settings):
    """A rewind SIGKILLed half way leaves its intent, and only that rewind finishes it; once
    maintenance vacuumed its target's files it cannot. The way out is a recover from
    earliest, which rebuilds every row the rewind touched: planned over the intent (saying
    so first), applied, and every record is then in the tables once."""
    s = settings.replace(max_offsets_per_trigger=100)
    records = generate_events(300, seed=61)
    produce(s, records)
    run_job(spark, s, "ingest")
    rewind = "sigflow checkpoint rewind ingest --to-batch 0 --yes"
    killed = sigflow(s, *rewind.split()[1:], extra_env={"SIGFLOW_FAILPOINTS": "ingest/after_restart_step:1"})
    assert killed.returncode == -9, killed.stdout + killed.stderr

    other = restart.plan(s, "ingest", "recover", recover_from="delta", force=True)
    assert any("a rewind of ingest did not finish" in r and "--from earliest --force" in r for r in other.refusals)
    recover = restart.plan(s, "ingest", "recover", recover_from="earliest", force=True)
    assert not recover.refusals, recover.describe()
    assert recover.steps[0].startswith("give up the unfinished rewind of ingest") and rewind in recover.steps[0]
    recover.apply()
    assert Checkpoint(s.checkpoint_uri("ingest")).restart_intent() is None
    run_job(spark, s, "ingest")
    assert Counter(table(s, "device_events_raw")["value"]) == Counter(r.value for r in records)
