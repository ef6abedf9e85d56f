"""`sigflow status` and `checkpoint inspect`: one verdict per job, from the checkpoint, its
lease and Kafka, the watermark in one form, and what to run next (docs/observability.md)."""

import json
import os
import shutil
import socket
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from spark_jobs.errors import DataLossError, SigflowError
from spark_jobs.local.simulate import generate_events
from spark_jobs.ops import kafka_gaps, status
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.lease import LEASE_FILE, Lease
from spark_jobs.runtime.kafka import offsets as kafka_offsets
from tests.helpers import delete_from_kafka, produce, run_job, sigflow

QUIET = dict(running=False, last_batch=4, planned_batch=4, stale_lease=False, behind=0, age_s=30.0,
             trigger_s=10.0, batch_records=1000)


@pytest.mark.parametrize("facts, word, next_step", [
    ({}, "OK", ""),
    ({"last_batch": None, "planned_batch": None, "behind": 120}, "NEVER RUN", "`sigflow run dedup`"),
    ({"last_batch": None, "planned_batch": None, "behind": 0}, "NEVER RUN", ""),
    ({"last_batch": None, "planned_batch": 0, "running": True, "behind": 120}, "OK", ""),  # its first batch
    ({"planned_batch": 5}, "FAILED", "docs/runbooks/job-crashed.md"),  # planned, never committed
    ({"stale_lease": True}, "FAILED", "docs/runbooks/job-crashed.md"),  # killed after its last commit
    ({"planned_batch": 5, "running": True}, "OK", ""),  # a batch under way
    ({"behind": 10}, "LAGGING", "`sigflow run dedup`"),  # not running, records wait
    # stopped by `sigflow stop` in a shared application: a run of its own would leave it
    # stopped there; the restart its application waits for starts it again
    ({"behind": 10, "stop_requested": True}, "LAGGING", "`sigflow checkpoint resume dedup --yes`"),
    ({"stop_requested": True}, "OK", "`sigflow checkpoint resume dedup --yes`"),
    ({"last_batch": None, "planned_batch": None, "stop_requested": True}, "NEVER RUN",
     "`sigflow checkpoint resume dedup --yes`"),
    # its last run one of an application still running, which starts it again
    ({"behind": 10, "application_pid": 4242}, "LAGGING", "its application's log says what it waits for (pid 4242)"),
    ({"application_pid": 4242}, "OK", "its application's log says what it waits for (pid 4242)"),
    ({"planned_batch": 5, "application_pid": 4242}, "FAILED", "docs/runbooks/job-crashed.md"),
    ({"behind": 10, "running": True}, "OK", ""),  # within one batch of the end
    ({"behind": 1001, "running": True}, "LAGGING", "docs/runbooks/job-lagging.md"),
    ({"behind": 10, "running": True, "age_s": 101.0}, "OK", ""),  # 10 triggers not yet passed
    ({"behind": 10, "running": True, "age_s": 121.0}, "STALLED", "docs/runbooks/job-lagging.md"),
    ({"behind": 10, "running": True, "age_s": 121.0, "trigger_s": 60.0}, "OK", ""),  # 10 triggers are 600 s
    ({"behind": 0, "running": True, "age_s": 3600.0}, "OK", ""),  # idle: nothing to read
])
def test_the_verdict_follows_the_documented_rules(facts, word, next_step):
    found = status.verdict("dedup", **{**QUIET, **facts})
    assert (found.word, found.next_step.split(",")[0]) == (word, next_step)


@pytest.mark.parametrize("value, shown", [
    (None, "none yet"), (0, "none yet"), (float("nan"), "none yet"),
    (1_795_000_000_000, "2026-11-18T11:06:40Z"),
])
def test_a_watermark_reads_the_same_from_an_offset_log_and_from_pipeline_metrics(value, shown):
    import pandas as pd

    assert status.format_watermark(value) == shown
    if value:
        assert status.format_watermark(pd.Timestamp(value, unit="ms", tz="UTC")) == shown
    assert status.format_watermark(pd.NaT) == "none yet"


def test_a_jobs_figures_name_only_what_it_keeps_with_thousands_grouped():
    ran = dict(last_batch=3, age_s=30.0, last_batch_time="2026-11-28T15:20:17Z",
               input_rows_per_second=1612.0, processed_rows_per_second=2357.5)
    dedup = status.JobStatus("dedup", None, watermark="2026-11-28T15:09:34Z", state_rows=12_345,
                             rows_dropped_by_watermark=1_204, **ran).lines()
    assert dedup == ["dedup: ?, last batch 3, 30 s ago (2026-11-28T15:20:17Z), watermark 2026-11-28T15:09:34Z",
                     "  rates: 1,612.0 rows/s in, 2,357.5 rows/s processed; state rows 12,345; "
                     "dropped late (all batches): 1,204"]
    ingest = status.JobStatus("ingest", None, stateful=False, **ran).lines()
    assert ingest == ["ingest: ?, last batch 3, 30 s ago (2026-11-28T15:20:17Z)",
                      "  rates: 1,612.0 rows/s in, 2,357.5 rows/s processed"]


def test_status_counts_waiting_records_before_the_first_batch_and_after_the_last(spark, settings):
    first = generate_events(120, malformed_ratio=0)
    produce(settings, first)
    before = {s.job: s for s in status.all_status(settings)}["dedup"]
    assert (before.verdict.word, before.behind, before.watermark) == ("NEVER RUN", 120, "none yet")
    assert before.verdict.next_step == "`sigflow run dedup`"

    run_job(spark, settings, "dedup")
    produce(settings, generate_events(30, seed=2, malformed_ratio=0))  # not processed yet
    statuses = {s.job: s for s in status.all_status(settings)}
    dedup = statuses["dedup"]
    # the jobs of one status read the same topic's offsets, each from where it stands
    assert statuses["windowed-averages"].behind == 150 and statuses["windowed-averages"].verdict.word == "NEVER RUN"
    assert dedup.running_pid is None and dedup.last_batch is not None and dedup.age_s < 600
    assert (dedup.verdict.word, dedup.behind, sum(dedup.lag.values())) == ("LAGGING", 30, 30)
    assert dedup.state_rows > 0 and dedup.watermark.endswith("Z")
    # the rule: the newest event time the job has seen, less the watermark delay
    newest = max(datetime.fromisoformat(json.loads(r.value)["event_time"].replace("Z", "+00:00")) for r in first)
    expected = newest - timedelta(seconds=settings.streaming.watermark_delay.seconds)
    assert dedup.watermark == expected.strftime("%Y-%m-%dT%H:%M:%SZ")

    # killed after its last commit: the lease file outlives its process
    holder = {"owner": "gone", "job": "dedup", "host": socket.gethostname(), "pid": os.getpid(),
              "process_started": 0.0, "renewed": time.time(), "ttl_s": 60.0}
    leases = Path(settings.checkpoint_uri("dedup") + ".lease")  # beside the checkpoint
    leases.mkdir(exist_ok=True)
    (leases / LEASE_FILE).write_text(json.dumps(holder))
    text = sigflow(settings, "status").stdout
    assert "dedup: FAILED, last batch" in text and "next: docs/runbooks/job-crashed.md" in text, text
    assert "sessions: LAGGING" not in text and "sessions: NEVER RUN" in text
    heads = {line.split(":")[0]: line for line in text.splitlines() if not line.startswith(" ")}
    # a stateless job never has a watermark; a stateful one waits for its first
    assert "watermark" not in heads["ingest"] and "watermark" not in heads["alert-fastpath"], text
    assert heads["sessions"].endswith("watermark none yet"), text


def test_records_kafka_deleted_before_a_job_read_them_are_its_verdict_and_its_next_run_stops_on_them(spark, settings):
    """status counted only what Kafka still held and said LAGGING, `sigflow run dedup` next,
    and that run stopped on the records retention had deleted."""
    bounds = lambda: kafka_offsets.topic_bounds(settings.kafka.bootstrap_servers, settings.streaming.events_topic)  # noqa: E731
    produce(settings, generate_events(90, malformed_ratio=0))
    run_job(spark, settings, "dedup")
    read_to = {p: end for p, (_, end) in bounds().items()}
    produce(settings, generate_events(90, seed=2, malformed_ratio=0))
    run_job(spark, settings, "ingest")  # device_events_raw holds every record
    ends = {p: end for p, (_, end) in bounds().items()}
    cut = {p: max(read_to[p], ends[p] - 5) for p in ends}  # the newest 5 a partition kept
    delete_from_kafka(settings, settings.streaming.events_topic, cut)
    gone, left = sum(cut[p] - read_to[p] for p in ends), sum(ends[p] - cut[p] for p in ends)
    assert gone > 0

    shown = {s.job: s for s in status.all_status(settings)}
    dedup = shown["dedup"]
    assert (dedup.verdict.word, dedup.behind) == ("DATA LOSS", left), dedup.lines()
    assert f"Kafka no longer holds {gone:,} records it has not read" in dedup.verdict.reason
    assert "its next run stops on them" in dedup.verdict.reason and "ingest read them into device_events_raw" in dedup.verdict.reason
    assert dedup.verdict.next_step.startswith("`sigflow checkpoint recover dedup --from raw --force`")
    assert shown["ingest"].verdict.word == "OK"  # it read them before they went
    assert shown["windowed-averages"].verdict.word == "NEVER RUN"  # nothing read: it starts at the earliest
    text = sigflow(settings, "status").stdout
    assert "dedup: DATA LOSS" in text and "next: `sigflow checkpoint recover dedup --from raw --force`" in text, text

    with pytest.raises(DataLossError, match="no longer has offsets"):
        run_job(spark, settings, "dedup")
    lenient = settings.replace(fail_on_data_loss=False)
    skipping = {s.job: s for s in status.all_status(lenient)}["dedup"].verdict
    assert skipping.word == "DATA LOSS" and "its next batch skips them" in skipping.reason and not skipping.next_step
    assert run_job(spark, lenient, "dedup").rows_in == left
    assert {s.job: s for s in status.all_status(settings)}["dedup"].verdict.word == "OK"


@pytest.mark.parametrize("job, gap", [
    ("ingest", kafka_gaps.KafkaGap("events", 0, 10, 40, 50)),  # nothing before it read them
    ("dedup", kafka_gaps.KafkaGap("events", 0, 60, 0, 9)),  # a topic made again: raw holds another topic's
])
def test_records_nothing_else_holds_are_produced_again_or_the_gap_accepted(job, gap):
    reason, next_step = kafka_gaps.described(job, [gap], fail_on_data_loss=True, in_raw=False)
    assert next_step.startswith("produce them again if their source can")
    assert f"`SIGFLOW_FAIL_ON_DATA_LOSS=false sigflow run {job}` once" in next_step
    assert ("30 records" in reason) == (not gap.recreated)
    assert ("created again" in reason) == gap.recreated


def test_a_damaged_sigflow_json_is_that_jobs_verdict_and_every_other_job_still_answers(settings):
    """status failed as a whole, saying "recover JOB", when one job's sigflow.json (where its
    runs record their tables' ids) was not JSON."""
    damaged = Path(settings.checkpoint_uri("dedup"))
    damaged.mkdir(parents=True)
    (damaged / "metadata").write_text('{"id": "a-query-id"}')  # Spark's, written as its query starts
    (damaged / "sigflow.json").write_text("{not json")
    shown = {job.job: job.verdict for job in status.all_status(settings)}
    assert shown["dedup"].word == "DAMAGED" and "sigflow.json" in shown["dedup"].reason, shown["dedup"]
    assert "`sigflow checkpoint recover dedup --force`" in shown["dedup"].next_step
    assert shown["ingest"].word == "NEVER RUN" and len(shown) == len(status.ALL_JOBS)
    inspected = status.inspect_checkpoint(settings, "dedup")  # said in its place too, naming the job
    assert "sigflow.json is not a JSON object" in inspected[0] and "recover dedup --force" in inspected[0], inspected


def test_a_checkpoint_with_batches_and_no_sigflow_json_is_damaged_as_its_run_finds_it(settings):
    """status said FAILED, `sigflow run dedup` next, and that run was refused: a new id would
    write its last batch twice."""
    checkpoint = Path(settings.checkpoint_uri("dedup"))
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"t":{"0":5}}')
    shown = {job.job: job.verdict for job in status.all_status(settings)}["dedup"]
    assert shown.word == "DAMAGED" and "no sigflow.json" in shown.reason, shown
    assert shown.next_step.startswith("rebuild it: `sigflow checkpoint recover dedup`")


def test_checkpoint_inspect_lists_batches_and_their_offsets(spark, settings):
    produce(settings, generate_events(50, malformed_ratio=0))
    run_job(spark, settings, "ingest")
    lines = status.inspect_checkpoint(settings, "ingest")
    assert lines[0].startswith("ingest: checkpoint") and "app id sigflow-ingest-" in lines[0]
    assert any("batch 0: committed" in line and "watermark none yet" in line for line in lines[1:])
    # what its help says it shows besides: the lease and the tables its runs wrote
    assert lines[1] == "  lease: free"
    assert set(lines[2].removeprefix("  tables written: ").split(", ")) == {
        "device_events_raw", "device_events", "device_alerts", "quarantined_events", "device_status",
        "pipeline_metrics", "table_status"}, lines
    held = Lease(Checkpoint(settings.checkpoint_uri("ingest")), "ingest", settings.operations.lease_ttl.seconds)
    held.acquire()
    try:
        assert status.inspect_checkpoint(settings, "ingest")[1].startswith(f"  lease: held by ingest run {held.owner} ")
    finally:
        held.release()
    shutil.rmtree(settings.table_uri("device_alerts"))
    assert "device_alerts (is gone)" in status.inspect_checkpoint(settings, "ingest")[2]
    # a checkpoint whose ids are lost is shown as it is: inspecting records no new id
    identity = Path(settings.checkpoint_uri("ingest")) / "sigflow.json"
    identity.unlink()
    lines = status.inspect_checkpoint(settings, "ingest")
    assert "no app id recorded" in lines[0] and "refuses to start" in lines[0], lines
    assert any("batch 0: committed" in line for line in lines) and not identity.exists()

    with pytest.raises(SigflowError, match="sessions has no checkpoint") as err:
        status.inspect_checkpoint(settings, "sessions")
    assert "sigflow run sessions" in err.value.hint
    missing = sigflow(settings, "checkpoint", "inspect", "sessions")
    assert missing.returncode == 2 and "sessions has no checkpoint" in missing.stderr
