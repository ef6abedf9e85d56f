"""sigflow reconcile counts late events in the windows, fleet rollups and sessions they belong
to: after the stream and a reconcile, every table equals what the rules give from every
event, on time or late within late_horizon, counted once (docs/semantics.md, late events
counted). The expectation is computed here from the events alone, in plain Python."""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest
from deltalake import DeltaTable

from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.jobs import RECONCILED_JOBS
from spark_jobs.ops import late_backlog, prometheus, reconcile, report, restart
from spark_jobs.ops.table_overview import overview
from tests.helpers import (
    at,
    committed_checkpoint,
    run_job,
    send,
    sigflow,
    single_partition,
    table,
)
from tests.oracle import MINUTE_MS, Event

JOBS = ("ingest", "windowed-averages", "fleet-rollup", "sessions")
DELAY_MS, GAP_MS, TUMBLING_MS, SLIDING_MS, STEP_MS, FLEET_MS = (
    10 * MINUTE_MS, 30 * MINUTE_MS, 5 * MINUTE_MS, 10 * MINUTE_MS, 5 * MINUTE_MS, 15 * MINUTE_MS)
HORIZON = "4 hours"
CORRECTED = {"device_signal_averages": "window_end", "fleet_signal_rollups": "window_end",
             "device_sessions": "session_end"}  # each table's final column


def every(device: str, start_ms: int, end_ms: int, step_ms: int, signal: float, prefix: str = "e") -> list[Event]:
    return [Event(f"{prefix}{t}", device, t, signal + (t // MINUTE_MS) % 7) for t in range(start_ms, end_ms + 1, step_ms)]


# A and B report every 5 minutes; A is silent from 11:00 to 12:00 (two sessions); C goes
# offline at 10:30 for three hours; E is a device whose one reading is a day old.
ON_TIME = (every("A", at(10, 0), at(11, 0), 5 * MINUTE_MS, 1.0) + every("B", at(10, 0), at(14, 0), 5 * MINUTE_MS, 2.0)
           + every("C", at(10, 0), at(10, 30), 5 * MINUTE_MS, 3.0) + every("A", at(12, 0), at(14, 0), 5 * MINUTE_MS, 1.0))
# sent once every job's watermark is 13:50: all behind it
LATE = (every("C", at(10, 33), at(13, 3), 5 * MINUTE_MS, 30.0, "buffered")  # C's buffer, three hours
        + [Event("bridge1", "A", at(11, 20), 50.0), Event("bridge2", "A", at(11, 40), 60.0)]  # joins A's sessions
        + [Event("late-b", "B", at(12, 2, 30), 70.0)]  # into a window B already has
        + [Event(f"e{at(10, 0)}", "A", at(10, 0), 1.0)]  # a copy re-sent of A's first reading
        + [Event("old", "E", at(6, 0), 9.0)])  # lateness 13:50 - 06:05 > late_horizon
BEYOND = {("E", "old")}
ADVANCE = [Event("adv-a", "A", at(16, 0), 1.0), Event("adv-b", "B", at(16, 0), 2.0)]  # watermark -> 15:50
FINAL_MS = at(16, 0) - DELAY_MS


def counted_events() -> list[Event]:
    first: dict[tuple[str, str], Event] = {}
    for event in ON_TIME + LATE + ADVANCE:
        if (event.device_id, event.event_id) not in BEYOND:
            first.setdefault((event.device_id, event.event_id), event)
    return list(first.values())


def expected_windows(events: list[Event], final_ms: int) -> dict[tuple, tuple]:
    signals = defaultdict(list)
    for e in events:
        start = e.t_ms - e.t_ms % TUMBLING_MS
        signals[(e.device_id, "tumbling", start, start + TUMBLING_MS)].append(e.signal)
        last = e.t_ms - e.t_ms % STEP_MS
        for begin in range(last - SLIDING_MS + STEP_MS, last + 1, STEP_MS):
            signals[(e.device_id, "sliding", begin, begin + SLIDING_MS)].append(e.signal)
    return {k: (len(v), round(sum(v) / len(v), 6), min(v), max(v)) for k, v in signals.items() if k[3] <= final_ms}


def expected_fleet(events: list[Event], final_ms: int) -> dict[int, tuple]:
    tumbling = defaultdict(list)
    for e in events:
        tumbling[(e.device_id, e.t_ms - e.t_ms % TUMBLING_MS)].append(e.signal)
    fleet = defaultdict(list)
    for (device, start), v in tumbling.items():
        end_ms = start + TUMBLING_MS - 1  # the tumbling window's time, just before its end
        fleet[end_ms - end_ms % FLEET_MS].append((device, sum(v) / len(v), max(v)))
    return {start: (len({d for d, _, _ in rows}), round(sum(a for _, a, _ in rows) / len(rows), 6),
                    max(m for _, _, m in rows), len(rows))
            for start, rows in fleet.items() if start + FLEET_MS <= final_ms}


def expected_sessions(events: list[Event], final_ms: int) -> dict[tuple, tuple]:
    by_device = defaultdict(list)
    for e in events:
        by_device[e.device_id].append((e.t_ms, e.signal))
    found = {}
    for device, points in by_device.items():
        points.sort()
        runs = [[points[0]]]
        for point in points[1:]:
            if point[0] - runs[-1][-1][0] > GAP_MS:
                runs.append([])
            runs[-1].append(point)
        for run in runs:
            if run[-1][0] + GAP_MS <= final_ms:
                found[(device, run[0][0])] = (run[-1][0], len(run), round(sum(s for _, s in run) / len(run), 6))
    return found


def ms(value) -> int:
    return int(pd.Timestamp(value).timestamp() * 1000)


def window_table(s) -> dict[tuple, tuple]:
    return {(r.device_id, r.window_kind, ms(r.window_start), ms(r.window_end)):
            (r.event_count, round(r.avg_signal, 6), r.min_signal, r.max_signal)
            for r in table(s, "device_signal_averages").itertuples()}


def fleet_table(s) -> dict[int, tuple]:
    return {ms(r.window_start): (r.device_count, round(r.mean_device_avg_signal, 6), r.max_signal,
                                 r.device_window_count)
            for r in table(s, "fleet_signal_rollups").itertuples()}


def session_table(s) -> dict[tuple, tuple]:
    rows = table(s, "device_sessions")
    assert not rows.duplicated(["device_id", "session_start"]).any()
    return {(r.device_id, ms(r.session_start)): (ms(r.session_end), r.event_count, round(r.avg_signal, 6))
            for r in rows.itertuples()}


def play(spark, s, events) -> None:
    send(s, events)
    for job in JOBS:
        run_job(spark, s, job)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # six reconciles (one a CLI process), 13 job runs: 195 s in the suite here, past 600 in a slow CI
def test_late_events_are_counted_once_when_their_rows_are_final_and_again_changes_nothing(spark, settings):
    s = single_partition(settings).replace(late_horizon=HORIZON)
    play(spark, s, ON_TIME)
    play(spark, s, LATE)
    events = counted_events()
    assert window_table(s) != expected_windows(events, at(13, 50))  # the stream alone misses them

    # A's 12:00 session and B's are still open (their last reading 14:00 + gap is past the
    # watermark 13:50): the late readings that belong to them wait; the rest are counted
    late = table(s, "late_events")
    assert {job: entry.waiting for job, entry in late_backlog.backlog(s).items()} == {
        job: job_late(late, job) for job in RECONCILED_JOBS}
    streamed = table(s, "device_signal_averages")
    streamed_tables = {name: table(s, name) for name in CORRECTED}
    promised = {t.name: t.writers[0].corrections_from for t in overview(s) if t.name in CORRECTED}
    first = {job.job: job for job in reconcile.run(spark, s).jobs}
    # windows no late event belongs to are what the stream wrote, stamps and all
    after = table(s, "device_signal_averages")
    kept = streamed.merge(after, how="inner")
    assert len(kept) + (after.revision > 0).sum() == len(after) and (after.revision > 0).sum() > 0
    assert after[after.revision > 0].corrected_at.notna().all() and after[after.revision == 0].corrected_at.isna().all()
    so_far = [e for e in events if e not in ADVANCE]
    closed = expected_sessions(so_far, at(13, 50))
    in_closed = [e for e in LATE if (e.device_id, e.event_id) not in BEYOND and any(
        device == e.device_id and start <= e.t_ms <= end for (device, start), (end, _, _) in closed.items())]
    assert first["sessions"].still_waiting == len(LATE) - len(BEYOND) - len(in_closed) > 0
    assert first["windowed-averages"].still_waiting == first["fleet-rollup"].still_waiting == 0
    assert window_table(s) == expected_windows(so_far, at(13, 50))

    # the jobs' next batches run while a reconcile of the windows does: its merges meet their appends
    send(s, ADVANCE)
    run_job(spark, s, "ingest")
    with ThreadPoolExecutor(1) as beside:
        streaming = beside.submit(lambda: [run_job(spark, s, job) for job in JOBS[1:]])
        reconcile.run(spark, s, ["windowed-averages", "fleet-rollup"])
        streaming.result()
    # a reconcile of the sessions SIGKILLed after its corrections, before it recorded them
    killed = sigflow(s, "reconcile", "sessions", extra_env={"SIGFLOW_FAILPOINTS": "reconcile_after_corrections:0",
                                                                "SIGFLOW_LATE_HORIZON": HORIZON})
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert session_table(s) == expected_sessions(events, FINAL_MS)  # corrected, and the events still wait
    assert late_backlog.backlog(s)["sessions"].waiting == first["sessions"].still_waiting
    versions = {name: _version(s, name) for name in ("device_signal_averages", "fleet_signal_rollups", "device_sessions")}
    second = {job.job: job for job in reconcile.run(spark, s).jobs}
    assert all(job.still_waiting == 0 for job in second.values())
    # the run after the kill decided on them and changed no row: no table got a commit
    assert second["sessions"].counted == first["sessions"].still_waiting
    assert {name: _version(s, name) for name in versions} == versions
    assert window_table(s) == expected_windows(events, FINAL_MS)
    assert fleet_table(s) == expected_fleet(events, FINAL_MS)
    assert session_table(s) == expected_sessions(events, FINAL_MS)
    late = table(s, "late_events")
    decided = table(s, "late_events_reconciled")
    for job in ("windowed-averages", "fleet-rollup", "sessions"):  # each late event decided on once
        mine = decided[decided.job == job]
        assert sorted(mine.offset) == sorted(late[late.job == job].offset)
        assert (mine.outcome == "beyond_horizon").sum() == len(BEYOND)
    # C's three offline hours: every reading counted, in one session from 10:00 to 13:03
    readings_of_c = [e for e in ON_TIME + LATE if e.device_id == "C"]
    assert session_table(s)[("C", at(10, 0))][:2] == (at(13, 3), len(readings_of_c))
    # A's two sessions are replaced by the one the bridging readings make
    sessions = table(s, "device_sessions")
    a = sessions[sessions.device_id == "A"].sort_values("session_start")
    assert [ms(t) for t in a.session_start] == [at(10, 0)] and a.revision.tolist() == [1]
    assert all(job.waiting == 0 for job in reconcile.run(spark, s).jobs)
    assert {name: _version(s, name) for name in versions} == versions  # again: nothing to do
    # sigflow tables said from where rows could still be corrected: no correction reached before it
    for name, column in CORRECTED.items():
        corrected_rows = table(s, name)
        corrected_rows = corrected_rows[corrected_rows.revision > 0]
        key = list(ALL_TABLES[name].key)
        before = streamed_tables[name].merge(table(s, name)[key], on=key, how="left", indicator=True)
        touched = pd.concat([corrected_rows[column],  # as corrected, and as the stream had them
                             streamed_tables[name].merge(corrected_rows[key], on=key)[column],
                             before[before._merge == "left_only"][column]])  # taken back
        assert len(touched) and (touched >= promised[name]).all(), (name, promised[name], touched.min())
    backlog = late_backlog.backlog(s)
    assert all(backlog[job].waiting == 0 and backlog[job].last_reconciled for job in JOBS[1:])
    scrape = prometheus.exposition(s)
    assert 'sigflow_late_events_waiting{sigflow_job="sessions"} 0.0' in scrape
    assert 'sigflow_last_reconcile_timestamp_seconds{sigflow_job="windowed-averages"}' in scrape
    page = report.build(s)
    drawn = page.split("<h2>Late events counted by reconcile</h2>", 1)[1].split("<h2>", 1)[0]
    assert "data:image/png;base64," in drawn

    # a rewind of sessions to its batch before the late readings takes back their decisions
    # with the rows: its re-run drops them as late again, and the next reconcile counts them
    rewind = restart.plan_rewind(s, "sessions", to_batch=1)
    assert any("sigflow reconcile sessions" in step for step in rewind.afterwards)
    rewind.apply()
    run_job(spark, s, "sessions")
    assert late_backlog.backlog(s)["sessions"].waiting == job_late(table(s, "late_events"), "sessions")
    reconcile.run(spark, s, ["sessions"])
    assert session_table(s) == expected_sessions(events, FINAL_MS)


def _version(s, name: str) -> int:
    return DeltaTable(s.table_uri(name)).version()


def job_late(late: pd.DataFrame, job: str) -> int:
    return int((late.job == job).sum())


def test_reconcile_refuses_a_job_whose_results_it_does_not_correct_in_one_line(settings):
    printed = sigflow(settings, "reconcile", "ingest")
    assert printed.returncode == 2 and "Traceback" not in printed.stderr
    assert printed.stderr.splitlines()[0] == "sigflow: error: reconcile corrects no table of ingest"


def test_reconcile_waits_while_ingest_has_read_less_than_the_job(settings):
    from spark_jobs.runtime.checkpoint.directory import Checkpoint

    committed_checkpoint(settings, "sessions", read_to=120)
    committed_checkpoint(settings, "fleet-rollup", read_to=100)
    committed_checkpoint(settings, "ingest", read_to=100)
    held = reconcile._ingest_behind(settings, Checkpoint(settings.checkpoint_uri("sessions")))
    assert held.startswith(f"ingest has not read {settings.streaming.events_topic} partition(s) 0 as far as the job")
    assert reconcile._ingest_behind(settings, Checkpoint(settings.checkpoint_uri("fleet-rollup"))) == ""


def test_reconcile_refuses_a_job_whose_restart_is_being_applied_or_half_applied(settings):
    from spark_jobs.errors import SigflowError
    from spark_jobs.runtime.checkpoint.directory import Checkpoint
    from spark_jobs.runtime.checkpoint.lease import Lease

    committed_checkpoint(settings, "sessions", read_to=120)
    job = reconcile._Job(None, settings, "sessions", "c", 0, None)
    job.check_no_restart()  # a run's lease, or none: reconcile goes on
    checkpoint = Checkpoint(settings.checkpoint_uri("sessions"))
    with Lease(checkpoint, "sessions", settings.operations.lease_ttl.seconds, purpose="rewind"):
        with pytest.raises(SigflowError, match="a rewind is being applied to its checkpoint"):
            job.check_no_restart()
    checkpoint.save_identity({**checkpoint.identity(), "pending_rewind": 3})
    with pytest.raises(SigflowError, match="a rewind to batch 3 did not finish"):
        job.check_no_restart()


def test_one_reconcile_of_a_job_at_a_time(spark, settings):
    """Two reconciles of one job at once (the hourly DAG's and one by hand) would both record
    the same decisions: the second is refused, naming the first, until it ends."""
    from spark_jobs.contracts.tables import LATE_EVENTS
    from spark_jobs.errors import JobAlreadyRunning
    from spark_jobs.runtime.checkpoint.directory import Checkpoint
    from spark_jobs.runtime.checkpoint.lease import RECONCILE, Lease
    from spark_jobs.runtime.delta import schema

    committed_checkpoint(settings, "sessions", read_to=0)
    schema.ensure_with_spark(spark, settings.table_uri(LATE_EVENTS.name), LATE_EVENTS)
    running = Lease(Checkpoint(settings.checkpoint_uri("sessions")), "sessions", settings.operations.lease_ttl.seconds,
                    purpose=RECONCILE)
    with running:
        with pytest.raises(JobAlreadyRunning, match=f"sessions: a reconcile is running on this host: reconcile of "
                                                    f"sessions {running.owner}"):
            reconcile.run(spark, settings, ["sessions"])
    assert reconcile.run(spark, settings, ["sessions"]).jobs[0].line() == "sessions: no late events waiting"


def test_a_rewind_refuses_while_a_reconcile_of_the_job_runs_even_one_begun_after_planning(spark, settings):
    """A rewind deletes the rows a running reconcile is correcting and the decisions it is
    recording. Planned before the reconcile began and approved after, its apply looks again
    holding the job's lease, refuses, and changes nothing."""
    from spark_jobs.ops.restart.plan import PlanRefused
    from spark_jobs.runtime.checkpoint.directory import Checkpoint
    from spark_jobs.runtime.checkpoint.lease import RECONCILE, Lease

    s = single_partition(settings)
    for t in (at(10, 0), at(11, 0)):
        send(s, [Event(f"e{t}", "A", t, 1.0)])
        run_job(spark, s, "sessions")
    checkpoint = Checkpoint(s.checkpoint_uri("sessions"))
    last, versions = checkpoint.last_committed(), _version(s, "late_events")
    planned = restart.plan(s, "sessions", "rewind", to_batch=0)
    assert not planned.refusals
    with Lease(checkpoint, "sessions", s.operations.lease_ttl.seconds, purpose=RECONCILE):
        again = restart.plan(s, "sessions", "rewind", to_batch=0)
        assert any(r.startswith("a reconcile of sessions is running") for r in again.refusals)
        with pytest.raises(PlanRefused, match="(?s)REFUSED: a reconcile of sessions is running.*nothing was changed"):
            planned.apply()
    assert checkpoint.last_committed() == last and _version(s, "late_events") == versions
    assert checkpoint.restart_intent() is None
    restart.plan(s, "sessions", "rewind", to_batch=0).apply()  # once the reconcile ended
    assert checkpoint.last_committed() == 0


def test_a_reconcile_stalled_past_its_lease_while_a_rewind_went_through_does_not_write(settings):
    """Its lease lapsed, a rewind saw no reconcile, was applied and released the job's lease:
    the reconcile wakes holding the checkpoint's batch and watermark from before, and must not
    merge corrections stamped with batches the rewind took back."""
    from spark_jobs.errors import SigflowError
    from spark_jobs.runtime.checkpoint.directory import Checkpoint

    committed_checkpoint(settings, "sessions", read_to=120)
    checkpoint = Checkpoint(settings.checkpoint_uri("sessions"))
    job = reconcile._Job(None, settings, "sessions", checkpoint.checkpoint_id("sessions"), 0, None,
                         app_id=checkpoint.app_id("sessions"))
    job.check_no_restart()  # as it read it
    checkpoint.rotate_app_id("sessions", 0)  # what a rewind does, with nothing left in flight
    with pytest.raises(SigflowError, match="its checkpoint was rewound or recovered while this reconcile ran"):
        job.check_no_restart()


def test_a_reconcile_right_after_an_upgrade_reads_late_events_from_before_record_kind(spark, settings):
    """The hourly reconcile may run before any job restarted on the new code, so before the
    jobs migrated late_events: it brings the table to today's layout itself instead of failing
    on the column it selects."""
    from datetime import datetime, timedelta, timezone

    import pyarrow as pa
    from deltalake import write_deltalake

    from spark_jobs.contracts.tables import LATE_EVENTS, TableSpec
    from spark_jobs.runtime.delta.schema import arrow_schema

    committed_checkpoint(settings, "sessions", read_to=120)
    committed_checkpoint(settings, "ingest", read_to=120)
    before = TableSpec(LATE_EVENTS.name, LATE_EVENTS.ddl.replace("record_kind STRING, ", ""), "before record_kind")
    dropped = datetime(2026, 11, 1, 12, tzinfo=timezone.utc)
    write_deltalake(settings.table_uri(LATE_EVENTS.name), pa.Table.from_pylist([{
        "job": "sessions", "event_id": "e1", "device_id": "d1", "event_time": dropped, "signal": 1.0,
        "missed": "event time at or behind the watermark", "watermark": dropped + timedelta(days=30), "batch_id": 0,
        "topic": settings.streaming.events_topic, "partition": 0, "offset": 7, "checkpoint_id": "sessions-cp"}],
        schema=arrow_schema(before)))

    decided = reconcile.run(spark, settings, ["sessions"]).jobs[0]
    assert (decided.beyond_horizon, decided.counted) == (1, 0)  # 30 days late: past the horizon
    assert table(settings, "late_events_reconciled")[["event_id", "record_kind", "outcome"]].values.tolist() == [
        ["e1", "event", "beyond_horizon"]]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_late_event_of_a_batch_killed_before_its_commit_waits_until_committed_and_read_by_ingest(spark, settings):
    """A batch appends its late_events rows before Spark commits it. Killed in between, with
    ingest behind that batch, its late events are not in device_events: a reconcile that
    decided on them would recount their windows without them and record them counted, and
    the replayed batch skips its late_events append as written, so they would never be
    counted. They wait until the job committed their batch and ingest read past them."""
    from spark_jobs.runtime.checkpoint.directory import Checkpoint

    s = single_partition(settings).replace(late_horizon=HORIZON)
    send(s, ON_TIME)
    for job in ("ingest", "windowed-averages"):
        run_job(spark, s, job)
    checkpoint = Checkpoint(s.checkpoint_uri("windowed-averages"))
    batch = checkpoint.last_committed() + 1
    send(s, LATE)
    killed = sigflow(s, "run", "windowed-averages", extra_env={
        "SIGFLOW_FAILPOINTS": f"windowed-averages/after_delta_commit:{batch}", "SIGFLOW_LATE_HORIZON": HORIZON})
    assert killed.returncode == -9, killed.stderr[-2000:]
    late = table(s, "late_events")
    dropped = late[(late.job == "windowed-averages") & (late.batch_id == batch)]
    assert {e.event_id for e in LATE if e.device_id in ("C", "E")} <= set(dropped.event_id)
    assert checkpoint.last_committed() == batch - 1  # the crash point: written, not committed
    streamed = window_table(s)

    held = reconcile.run(spark, s, ["windowed-averages"]).jobs[0]
    assert (held.waiting, held.counted, held.beyond_horizon) == (len(dropped), 0, 0), held.line()
    assert held.uncommitted == len(dropped)
    assert "wait for their batch to be committed and read by ingest" in held.line()
    assert window_table(s) == streamed and late_backlog.backlog(s)["windowed-averages"].waiting == len(dropped)

    run_job(spark, s, "windowed-averages")  # the batch replayed: its late_events append skipped as written
    assert checkpoint.last_committed() >= batch
    still = reconcile.run(spark, s, ["windowed-averages"]).jobs[0]  # committed, but ingest has not read them
    assert still.counted == 0 and still.held.startswith("ingest has not read"), still.line()
    run_job(spark, s, "ingest")
    decided = reconcile.run(spark, s, ["windowed-averages"]).jobs[0]
    assert (decided.counted, decided.beyond_horizon, decided.still_waiting) == (len(dropped) - len(BEYOND), len(BEYOND), 0)
    assert window_table(s) == expected_windows([e for e in counted_events() if e not in ADVANCE], at(13, 50))
