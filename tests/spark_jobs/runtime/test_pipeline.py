"""`sigflow pipeline` runs its jobs at once, as queries side by side in one session: each
job writes what it writes run alone, and the tables they share (late_events,
pipeline_metrics) get every job's rows once. Three jobs: a stateless one and two stateful
ones that both list late rows (all six took three minutes beside the suite)."""

from __future__ import annotations

import json

from deltalake import DeltaTable

from spark_jobs.contracts.tables import LATE_EVENTS, PIPELINE_METRICS
from spark_jobs.jobs import writers_of
from spark_jobs.jobs.registry import get_job
from spark_jobs.local.simulate import generate_events
from spark_jobs.runtime import launch
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.lineage_events import events_file, table_dataset
from tests.helpers import contents, produce, run_job, table

# what says when or under which checkpoint a row was written, not what it holds
WHEN_WRITTEN = frozenset({"ingest_time", "checkpoint_id"})
JOBS_AT_ONCE = ("ingest", "dedup", "windowed-averages")
METRIC_FIGURES = ["job", "batch_id", "input_rows", "output_rows", "late_events", "duplicates_dropped"]


def test_the_pipeline_runs_its_jobs_at_once_and_writes_what_each_writes_alone(spark, settings, tmp_path):
    s = settings.replace(max_offsets_per_trigger=100)  # three batches a job: watermarks move, late rows show
    events = generate_events(300, devices=5, seed=21, late_ratio=0.05, duplicate_ratio=0.05, malformed_ratio=0.05)
    produce(s, events)
    alone = s.replace(data_dir=str(tmp_path / "alone"))
    for job in JOBS_AT_ONCE:
        run_job(spark, alone, job)

    ended = []
    summaries = launch.run_pipeline(s, list(JOBS_AT_ONCE), on_job_done=lambda summary: ended.append(summary.job))

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
