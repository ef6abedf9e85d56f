"""A job rebuilt from device_events_raw once Kafka's retention has removed its records: the
tables equal what the rules give for every record, each row once, and the job goes on from
Kafka exactly where raw ends (docs/runbooks/recompute-beyond-retention.md)."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timezone

import pytest

from spark_jobs.errors import SigflowError
from spark_jobs.ops import maintenance, reconcile, restart
from spark_jobs.ops.restart.plan import PlanRefused
from tests.helpers import delete_from_kafka, run_job, send, sigflow, table
from tests.spark_jobs.ops.test_reconcile import (
    ADVANCE,
    FINAL_MS,
    HORIZON,
    LATE,
    ON_TIME,
    expected_sessions,
    expected_windows,
    session_table,
    window_table,
)

REBUILT = ("dedup", "windowed-averages", "sessions")
# every late reading within the horizon of the watermark it meets, however the batches fall
LATE_WITHIN = [event for event in LATE if event.event_id != "old"]


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def every_record_counted():
    first = {}
    for event in ON_TIME + LATE_WITHIN + ADVANCE:
        first.setdefault((event.device_id, event.event_id), event)
    return list(first.values())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_recover_from_raw_beyond_retention_gives_every_table_as_the_rules_do_and_goes_on_from_kafka(spark, settings):
    # batches of 70 records: the replay runs two, and events late in it are reconciled
    s = settings.replace(late_horizon=HORIZON, max_offsets_per_trigger=70, vacuum_retention="0 seconds",
                         vacuum_retention_floor="0 seconds")
    for events in (ON_TIME, LATE_WITHIN):
        send(s, events)
        for job in ("ingest", *REBUILT):
            run_job(spark, s, job)
    delete_from_kafka(s, s.streaming.events_topic)
    # maintenance keeps every raw row (raw_retention: forever) and compacts it: the replay reads that
    lines = maintenance.run(s)
    assert any(line.startswith("device_events_raw: ") and " -> 1 data files," in line and "deleted" not in line
               for line in lines), lines

    refused = restart.plan(s, "windowed-averages", "recover", recover_from="earliest", force=True)
    assert any("Kafka retention removed" in reason for reason in refused.refusals)
    with pytest.raises(PlanRefused):
        refused.apply()
    ingest = restart.plan(s, "ingest", "recover", recover_from="raw", force=True)
    assert any("ingest writes device_events_raw itself" in reason for reason in ingest.refusals)

    time.sleep(1)
    before_advance = time.time()
    time.sleep(1)
    send(s, ADVANCE)  # waiting in Kafka, after where raw ends
    raw_rows = len(table(s, "device_events_raw").query(f"topic == '{s.streaming.events_topic}'"))
    for job in REBUILT:
        plan = restart.plan(s, job, "recover", recover_from="raw", force=True)
        assert not plan.refusals, plan.describe()
        # what it reads: the records, their offsets, when they were sent and the events' times
        assert f"{raw_rows:,} records" in plan.describe()
        first, last = (min(e.t_ms for e in ON_TIME + LATE_WITHIN), max(e.t_ms for e in ON_TIME + LATE_WITHIN))
        assert f"events timed {utc(first)} to {utc(last)} UTC" in plan.describe(), plan.describe()
        plan.apply()
        run_job(spark, s, job)
    run_job(spark, s, "ingest")
    reconcile.run(spark, s, ["windowed-averages", "sessions"])

    counted = every_record_counted()
    assert window_table(s) == expected_windows(counted, FINAL_MS)
    assert session_table(s) == expected_sessions(counted, FINAL_MS)
    windows = table(s, "device_signal_averages")
    assert not windows.duplicated(["device_id", "window_kind", "window_start"]).any()
    kept = assert_each_reading_once(s, counted)
    # the replay read raw in batches of its own (70 records at most), then Kafka
    metrics = table(s, "pipeline_metrics").query("job == 'dedup'")
    rebuilt = metrics[metrics.checkpoint_id == kept.checkpoint_id.iloc[0]]
    assert rebuilt.input_rows.sum() == raw_rows + len(ADVANCE) and rebuilt.input_rows.max() <= 70

    # a rewind into the replayed batches: Kafka no longer has them, raw does
    rewind = restart.plan(s, "dedup", "rewind", to_batch=0)
    assert not rewind.refusals and "re-run from device_events_raw" in rewind.describe(), rewind.describe()
    rewind.apply()
    # raw_retention set: maintenance deletes the rows sent before ADVANCE, which the re-run and
    # a rebuild need; the re-run applied already reads raw at the version its plan read
    kept_for = s.replace(raw_retention=f"{int(time.time() - before_advance)} seconds", vacuum_retention="1 hour")
    pruned = len(table(s, "device_events_raw")) - len(ADVANCE)
    assert any(line.startswith("device_events_raw:") and f"{pruned} rows past retention deleted" in line
               for line in maintenance.run(kept_for))
    run_job(spark, s, "dedup")
    assert_each_reading_once(s, counted)
    refused = restart.plan(kept_for, "dedup", "recover", recover_from="raw", force=True)
    assert any("neither raw nor Kafka holds them" in reason for reason in refused.refusals), refused.describe()


def assert_each_reading_once(s, counted):
    """dedup: each reading once, in its table or, dropped as late, in late_events (a re-sent
    copy may be in both: the first kept, the copy late)."""
    kept = table(s, "device_events_deduplicated")
    assert not kept.duplicated(["device_id", "event_id"]).any()
    late = table(s, "late_events").query("job == 'dedup'")
    assert not late.duplicated(["topic", "partition", "offset"]).any()
    assert set(zip(kept.device_id, kept.event_id)) | set(zip(late.device_id, late.event_id)) == {
        (e.device_id, e.event_id) for e in counted}
    sent_twice = {key for key, n in Counter((e.device_id, e.event_id) for e in ON_TIME + LATE_WITHIN).items() if n > 1}
    assert set(zip(kept.device_id, kept.event_id)) & set(zip(late.device_id, late.event_id)) <= sent_twice
    return kept


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_recover_from_raw_killed_in_its_apply_and_in_its_replay_gives_every_window_once(spark, settings):
    """SIGKILL after the apply deleted the job's rows, then again in the replay's second batch
    between its table commits: the run refuses until the recover is applied again; the
    next run goes on from the replay's last committed batch; reconciled, every window is what
    the rules give for every record, once."""
    s = settings.replace(late_horizon=HORIZON, max_offsets_per_trigger=70)
    job, horizon = "windowed-averages", {"SIGFLOW_LATE_HORIZON": HORIZON}
    send(s, ON_TIME + LATE_WITHIN)
    for name in ("ingest", job):
        run_job(spark, s, name)
    delete_from_kafka(s, s.streaming.events_topic)
    send(s, ADVANCE)
    command = f"sigflow checkpoint recover {job} --from raw --force --yes"

    killed = sigflow(s, *command.split()[1:], extra_env={"SIGFLOW_FAILPOINTS": f"{job}/after_restart_step:2", **horizon})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    with pytest.raises(SigflowError, match="a recover of its checkpoint did not finish"):
        run_job(spark, s, job)
    finished = sigflow(s, *command.split()[1:], extra_env=horizon)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "device_events_raw at version" in finished.stdout

    killed = sigflow(s, "run", job, extra_env={"SIGFLOW_FAILPOINTS": f"{job}/between_tables:1", **horizon})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    run_job(spark, s, job)
    run_job(spark, s, "ingest")  # reconcile waits for ingest to have read as far as the job
    reconcile.run(spark, s, [job])
    counted = every_record_counted()
    assert window_table(s) == expected_windows(counted, FINAL_MS)
    assert not table(s, "device_signal_averages").duplicated(["device_id", "window_kind", "window_start"]).any()



def test_a_plan_says_which_offsets_raw_lacks(tmp_path):
    """Rows deleted from raw by someone who can write it (or a transactional producer's
    markers) leave offsets a replay cannot read: the plan counts them per partition."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from spark_jobs.runtime.replay.extent import RawExtent

    uri = str(tmp_path / "device_events_raw")
    sent = datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc)
    write_deltalake(uri, pa.table({
        "key": pa.array([b"k"] * 20), "value": pa.array([b"v"] * 20), "topic": ["ev"] * 20,
        "partition": pa.array([0] * 10 + [1] * 10, pa.int32()), "offset": pa.array(list(range(10)) * 2, pa.int64()),
        "kafka_timestamp": pa.array([sent] * 20, pa.timestamp("us", tz="UTC"))}))
    assert RawExtent.of(uri, ["ev"]).missing() == {}
    DeltaTable(uri).delete("`partition` = 1 AND `offset` IN (3, 4, 5)")
    extent = RawExtent.of(uri, ["ev"])
    assert (extent.rows, extent.missing()) == (17, {"ev[1]": 3})
    assert "raw lacks 3 of ev[1]'s offsets" in extent.describe()
