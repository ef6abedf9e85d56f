"""Exactly-once under crashes: each job SIGKILLed at a commit point and batch drawn from a
fixed seed, then restarted, compared with an uninterrupted run (the random-failure restarts
of PySpark's stateful streaming tests). Its own file: about a third of the suite's
fault-test time, so the test scheduler can run it beside the rest."""

import random
from pathlib import Path

import pytest

from spark_jobs.jobs.registry import JOBS
from spark_jobs.local.simulate import generate_alerts, generate_events
from spark_jobs.runtime.failpoints import POINTS
from tests.helpers import contents, produce, run_job, sigflow, table

# columns that say when a row was written, not what it holds
WRITE_TIME_COLUMNS = frozenset({"ingest_time", "batch_id"})


def _contents(settings, name):
    return contents(settings, name, WRITE_TIME_COLUMNS)


# Every job is a victim once, with a fixed seed each: a failure names a schedule that replays.
VICTIM_PAIRS = [("ingest", "dedup"), ("windowed-averages", "fleet-rollup"), ("sessions", "alert-join")]


@pytest.mark.parametrize("victims", VICTIM_PAIRS, ids="+".join)
def test_sigkill_of_a_job_at_a_random_commit_point_loses_and_duplicates_nothing(spark, settings, tmp_path, victims):
    """Each job SIGKILLed at a commit point and batch drawn from a fixed seed, inside a
    `sigflow pipeline` process of its own, then a restart of both that finishes: their tables
    equal an uninterrupted run, and pipeline_metrics has one row for every batch each job
    committed."""
    assert sorted(job for pair in VICTIM_PAIRS for job in pair) == sorted(JOBS)
    seed = VICTIM_PAIRS.index(victims) + 1
    rng = random.Random(seed)
    events = generate_events(400, devices=6, seed=seed, malformed_ratio=0.05, duplicate_ratio=0.05)
    produce(settings, events)
    produce(settings, generate_alerts(events, every=20, seed=seed), settings.alerts_topic)
    s = settings.replace(max_offsets_per_trigger=250)  # two batches with data per job

    uninterrupted = s.replace(data_dir=str(tmp_path / "uninterrupted"))
    for job in victims:
        run_job(spark, uninterrupted, job)

    for job in victims:
        failpoint = f"{job}/{rng.choice(POINTS)}:{rng.randint(0, 1)}"
        # Only the victim runs: the other job's remaining batches wait for the restart below
        # (in a cold JVM they only made the test slower). Generous timeouts: beside the
        # suite's heaviest files one run measured over 300 s.
        killed = sigflow(s, "pipeline", job, extra_env={"SIGFLOW_FAILPOINTS": failpoint}, timeout=900)
        assert killed.returncode == -9, f"seed {seed}, {failpoint}: " + killed.stderr[-2000:]
    for job in victims:  # the restart from what the kills left, in this session's warm JVM
        run_job(spark, s, job)

    written = {spec.name for job in victims for spec in JOBS[job].tables}
    written |= {"late_events"} if any(JOBS[job].late_rule for job in victims) else set()
    for name in sorted(written):
        assert _contents(s, name) == _contents(uninterrupted, name), f"seed {seed}, victims {victims}: {name}"
    metrics = table(s, "pipeline_metrics")
    for job in victims:
        commits = Path(s.checkpoint_uri(job), "commits")
        committed = sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())
        assert sorted(metrics[metrics.job == job].batch_id) == committed, f"seed {seed}: {job}"
