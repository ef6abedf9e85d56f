"""Exactly-once under crashes: jobs SIGKILLed at a commit point and batch drawn from a
fixed seed, then restarted, compared with an uninterrupted run (the random-failure restarts
of PySpark's stateful streaming tests). Its own file: it starts a JVM per kill, so the
test scheduler can run it beside the rest."""

import json
import random
from pathlib import Path

import pytest

from spark_jobs.jobs.registry import JOBS
from spark_jobs.local.simulate import MALFORMED_KINDS, generate_alerts, generate_events
from spark_jobs.runtime.failpoints import POINTS
from tests.helpers import MULTI_PROCESS, contents, produce, run_job, sigflow, table

pytestmark = [MULTI_PROCESS, pytest.mark.slow]

# columns that say when a row was written, not what it holds
WRITE_TIME_COLUMNS = frozenset({"ingest_time", "batch_id", "checkpoint_id"})


def _contents(settings, name):
    return contents(settings, name, WRITE_TIME_COLUMNS)


# The jobs whose crash recovery differs most: ingest commits to three tables per batch (a
# kill between them leaves a batch half-written), sessions restores arbitrary state
# (flatMapGroupsWithState) and alert-join the state of a stream-stream join. The other jobs'
# state (deduplication, windowed aggregation) is restored by the same mechanism and is
# restarted mid-stream against an oracle in their own tests (tests/spark_jobs/jobs/).
VICTIMS = ("ingest", "sessions", "alert-join")
SEED = 25  # fixed, so a failure names a schedule that replays; this one draws every commit point and both batches


@pytest.mark.timeout(900)  # 182 s in a clean-clone make test
def test_sigkill_of_a_job_at_a_random_commit_point_loses_and_duplicates_nothing(spark, settings, tmp_path):
    """Each victim SIGKILLed at a commit point and batch drawn from a fixed seed, inside a
    `sigflow pipeline` process of its own, then restarted until it finishes: its tables
    equal an uninterrupted run, and pipeline_metrics has one row for every batch each job
    committed."""
    rng = random.Random(SEED)
    events = generate_events(400, devices=6, seed=SEED, malformed_ratio=0.05, duplicate_ratio=0.05)
    produce(settings, events)
    produce(settings, generate_alerts(events, every=20, seed=SEED), settings.streaming.alerts_topic)
    s = settings.replace(max_offsets_per_trigger=250)  # two batches with data per job

    uninterrupted = s.replace(data_dir=str(tmp_path / "uninterrupted"))
    for job in VICTIMS:
        run_job(spark, uninterrupted, job)

    schedule = {job: f"{job}/{rng.choice(POINTS)}:{rng.randint(0, 1)}" for job in VICTIMS}
    for job, failpoint in schedule.items():
        # Only the victim runs in the killed process. Generous timeout: beside the suite's
        # heaviest files one run measured over 300 s.
        killed = sigflow(s, "pipeline", job, extra_env={"SIGFLOW_FAILPOINTS": failpoint}, timeout=900)
        assert killed.returncode == -9, f"{failpoint}: " + killed.stderr[-2000:]
    for job in VICTIMS:  # the restart from what the kills left, in this session's warm JVM
        run_job(spark, s, job)

    written = {spec.name for job in VICTIMS for spec in JOBS[job].tables}
    written |= {"late_events"} if any(JOBS[job].late_rule for job in VICTIMS) else set()
    for name in sorted(written):
        assert _contents(s, name) == _contents(uninterrupted, name), f"kills {schedule}: {name}"
    metrics = table(s, "pipeline_metrics")
    for job in VICTIMS:
        commits = Path(s.checkpoint_uri(job), "commits")
        committed = sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())
        assert sorted(metrics[metrics.job == job].batch_id) == committed, f"kills {schedule}: {job}"



def test_a_replay_its_tables_already_hold_still_commits_every_state_partition(spark, settings):
    """dedup SIGKILLed after batch 1 reached its tables, before Spark's commit log: the
    rerun replays batch 1 and writes nothing, yet the batch's plan must still run to its
    end, where each partition of the deduplication's state commits (Spark fails a query
    whose batch left one uncommitted). Then every valid event is in the table once."""
    events = generate_events(600, devices=8, seed=7, late_ratio=0.0, malformed_ratio=0.02, duplicate_ratio=0.05)
    produce(settings, events)
    s = settings.replace(max_offsets_per_trigger=200)  # three batches
    assert s.spark.shuffle_partitions >= 2  # a state partition that one row's read leaves alone

    killed = sigflow(s, "run", "dedup", extra_env={"SIGFLOW_FAILPOINTS": "dedup/after_delta_commit:1"}, timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    run_job(spark, s, "dedup")

    deduplicated = table(s, "device_events_deduplicated").event_id
    valid_ids = {json.loads(e.value)["event_id"] for e in events if e.kind not in MALFORMED_KINDS}
    assert deduplicated.is_unique and set(deduplicated) == valid_ids
