"""Each batch's progress: one JSON log line from the listener, one pipeline_metrics row."""

import json
import logging

import pandas as pd
import pytest

from spark_jobs.jobs.late_rows import OBSERVATION_PREFIX
from spark_jobs.local.simulate import generate_alerts, generate_events
from spark_jobs.runtime.metrics.progress import progress_line, progress_sentence
from spark_jobs.runtime.metrics.summary import RunSummary
from spark_jobs.runtime.waiting import wait_until
from tests.helpers import produce, run_job, table


class ProgressLines(logging.Handler):
    """Collects the listener's lines (the CLI may have stopped them propagating to root)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: dict[tuple[str, int], dict] = {}

    def emit(self, record):
        line = json.loads(record.getMessage())
        self.lines[(line["job"], line["batch_id"])] = line

    def of(self, job: str, batches: int, timeout: float = 20.0) -> list[dict]:
        """A job's lines in batch order; the listener bus is asynchronous, so wait for them."""
        wait_until(lambda: sum(j == job for j, _ in self.lines) >= batches, timeout_s=timeout, every_s=0.2)
        return [line for (j, _), line in sorted(self.lines.items()) if j == job]


@pytest.fixture
def progress_lines():
    logger = logging.getLogger("sigflow.progress")
    handler, level = ProgressLines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_every_batch_is_logged_as_json_with_the_offsets_and_counts_of_its_checkpoint(
    spark, settings, progress_lines
):
    """The JSON lines against the checkpoint's offset log (what Spark committed to read):
    one line per committed batch, its end offsets, and its records = the offsets it covers."""
    from spark_jobs.runtime.checkpoint.directory import Checkpoint

    s = settings.replace(max_offsets_per_trigger=100)
    produce(s, generate_events(250, seed=11, malformed_ratio=0.0))
    run_job(spark, s, "dedup")

    checkpoint = Checkpoint(s.checkpoint_uri("dedup"))
    committed = checkpoint.committed_batches()
    lines = progress_lines.of("dedup", len(committed))
    assert [line["batch_id"] for line in lines] == committed and len(committed) >= 3
    ends = {b: checkpoint.offsets(b).sources[0][s.streaming.events_topic] for b in committed}
    for line in lines:
        batch = line["batch_id"]
        start = ends.get(batch - 1) or {p: 0 for p in ends[batch]}
        assert line["sources"][0]["end_offsets"] == {s.streaming.events_topic: ends[batch]}
        assert line["input_rows"] == sum(ends[batch][p] - start[p] for p in ends[batch])
    assert sum(line["input_rows"] for line in lines) == 250
    assert all(line["state_operators"] for line in lines) and lines[-1]["watermark"] is not None
    filed = [json.loads(text) for text in s.progress_file("dedup").read_text().splitlines()]
    assert filed == lines  # the job's progress file holds the same lines, one per batch


@pytest.mark.parametrize("job", ["windowed-averages", "alert-join"])
def test_rows_in_counts_each_kafka_record_once_when_a_job_reads_its_topics_in_two_branches(
    spark, settings, progress_lines, job
):
    """Spark's numInputRows counts every scan of the source: alert-join scans its own twice,
    windowed-averages once (its sliding windows merged from panes), and each counts once."""
    events = generate_events(120, seed=12, malformed_ratio=0.0)
    produce(settings, events)
    alerts = generate_alerts(events, every=10, seed=12)
    produce(settings, alerts, settings.streaming.alerts_topic)
    records = len(events) + (len(alerts) if job == "alert-join" else 0)

    summary = run_job(spark, settings, job)

    metrics = table(settings, "pipeline_metrics")
    assert summary.rows_in == records
    assert metrics[metrics.job == job].input_rows.sum() == records
    assert sum(line["input_rows"] for line in progress_lines.of(job, len(metrics))) == records


def test_a_real_run_reports_the_records_still_behind_after_each_batch(spark, settings, progress_lines):
    """Spark's Kafka source reports the latest offsets it saw; all 250 records were in Kafka
    before the run, so after each batch the lag is what the batches so far had not read."""
    s = settings.replace(max_offsets_per_trigger=100)
    produce(s, generate_events(250, seed=13, malformed_ratio=0.0))
    run_job(spark, s, "ingest")
    lines = [line for line in progress_lines.of("ingest", 3) if line["input_rows"]]
    read = 0
    for line in lines:
        read += line["input_rows"]
        assert sum(line["sources"][0]["lag"].values()) == 250 - read
    assert read == 250 and len(lines) >= 3


def test_lag_per_partition_is_what_the_source_had_not_yet_read():
    progress = {
        "batchId": 4, "numInputRows": 10, "durationMs": {"addBatch": 5, "triggerExecution": 9},
        "sources": [{"description": "kafka", "endOffset": '{"t": {"0": 40, "1": 7}}',
                     "latestOffset": '{"t": {"0": 100, "1": 7}}'}],
    }
    line = progress_line("ingest", progress)
    assert line["sources"][0]["lag"] == {"t[0]": 60, "t[1]": 0}
    assert line["batch_id"] == 4 and line["input_rows"] == 10 and line["duration_ms"] == 9


def test_the_sentence_for_people_says_counts_rate_state_and_lag():
    progress = {
        "batchId": 7, "numInputRows": 3000, "durationMs": {"addBatch": 1400, "triggerExecution": 1500},
        "eventTime": {"watermark": "2026-11-22T12:00:00.000Z"},
        "stateOperators": [{"numRowsTotal": 1200, "numRowsDroppedByWatermark": 4}],
        "sources": [{"description": "kafka", "endOffset": '{"t": {"0": 40}}', "latestOffset": '{"t": {"0": 540}}'}],
    }
    assert progress_sentence(progress_line("dedup", progress)) == (
        "dedup batch 7: 3,000 records in 1.5 s (2,000/s), watermark 2026-11-22T12:00:00.000Z, "
        "1,200 state rows, 4 dropped late, 500 records behind in Kafka"
    )


SENT_WHOLE = ("event", "duplicate", "late", "out_of_order")  # the simulator's kinds of valid events


# windowed-averages' sliding windows not made of its tumbling panes: a dedup per window kind
NOT_PANES = {"tumbling_window": "4 minutes", "sliding_window": "6 minutes", "sliding_step": "3 minutes"}


@pytest.mark.parametrize(("job", "windows"), [("dedup", {}), ("windowed-averages", {}), ("windowed-averages", NOT_PANES),
                                              ("fleet-rollup", {}), ("sessions", {})])
def test_job_counts_duplicates_and_late_rows_once_whatever_its_operators(spark, settings, job, windows,
                                                                        late_events_found):
    """The simulator knows which records are re-sent duplicates: every job that deduplicates
    counts each exactly once (windowed-averages has one dedup, its sliding windows merged from
    panes; with other window settings one per window kind), and the rows
    Spark reports dropped by the watermark are exactly the job's late_events rows, each with
    the values its record was sent with, whether the batch's plan observed them or its
    records were read again."""
    records = generate_events(900, devices=5, seed=31, malformed_ratio=0.0, late_ratio=0.05, duplicate_ratio=0.05)
    produce(settings, records)
    s = settings.replace(max_offsets_per_trigger=300, **windows)  # three batches: the later two see late records

    summary = run_job(spark, s, job)

    metrics = table(s, "pipeline_metrics")
    late = table(s, "late_events")
    duplicates_sent = sum(r.kind == "duplicate" for r in records)
    assert duplicates_sent > 20 and len(late) > 10
    assert metrics.duplicates_dropped.sum() == summary.duplicates_dropped == duplicates_sent
    assert metrics.rows_dropped_by_watermark.sum() == summary.rows_dropped_by_watermark == len(late)
    sent = {(e["device_id"], e["event_id"]): e for e in (json.loads(r.value) for r in records if r.kind in SENT_WHOLE)}
    assert all(sent[row.device_id, row.event_id]["signal"] == row.signal
               and pd.Timestamp(sent[row.device_id, row.event_id]["event_time"]) == row.event_time
               for row in late.itertuples())
    # a metrics row keeps the number of rows the plan observed as late, not the rows
    observed = [json.loads(p).get("observedMetrics") or {} for p in metrics.progress_json]
    counted = [v["rows"] for o in observed for name, v in o.items() if name.startswith(OBSERVATION_PREFIX)]
    assert all(isinstance(n, int) for n in counted)
    assert sum(counted) == (len(late) if late_events_found == "observed by the batch's plan" else 0)
    per_batch_late = late.groupby("batch_id").size()
    by_batch = metrics.set_index("batch_id")
    assert all(by_batch.rows_dropped_by_watermark[b] == n for b, n in per_batch_late.items())


def test_every_batch_has_its_metrics_row_even_past_sparks_progress_memory(spark, settings):
    """Spark keeps the progress of the last few batches only (numRecentProgressUpdates, 100
    by default, 2 here): each batch's row is written as the next batch starts, so a run of
    more batches than that still has one row per batch."""
    produce(settings, generate_events(100, seed=32, malformed_ratio=0.0))
    key = "spark.sql.streaming.numRecentProgressUpdates"
    spark.conf.set(key, "2")
    try:
        run_job(spark, settings.replace(max_offsets_per_trigger=20), "ingest")
    finally:
        spark.conf.unset(key)
    metrics = table(settings, "pipeline_metrics")
    assert len(metrics) >= 5 and sorted(metrics.batch_id) == list(range(len(metrics)))
    assert metrics.input_rows.sum() == 100


def test_a_runs_summary_line_writes_its_numbers_as_people_read_them():
    """`sigflow run`'s last line showed "249998 rows in; written: device_events_raw=249998", where
    every other line of the console groups thousands."""
    summary = RunSummary("dedup", counts_late=True, batches=1_204, rows_in=249_998, duplicates_dropped=7_503,
                         rows_dropped_by_watermark=5_000, state_rows=1_380_743,
                         rows_written={"device_events_deduplicated": 237_495})
    assert summary.line() == ("dedup: 1,204 batch(es), 249,998 rows in; written: device_events_deduplicated=237,495; "
                              "7,503 duplicates removed, 5,000 dropped late, 1,380,743 state rows")


def test_the_summary_table_has_one_row_per_job_adding_up_its_runs():
    """A job of one application run three times (failed once, stopped for a rewind) had a
    row per run, three rows named dedup, none of them its total."""
    from spark_jobs.runtime.metrics.summary import summary_table

    runs = [RunSummary("dedup", True, batches=7, rows_in=31_215, rows_written={"device_events_deduplicated": 29_332},
                       duplicates_dropped=935, rows_dropped_by_watermark=642, state_rows=29_677),
            RunSummary("ingest", batches=10, rows_in=45_780, rows_written={"device_events": 45_000}),
            RunSummary("dedup", True, batches=1, rows_in=28_523, rows_written={"device_events_deduplicated": 26_746,
                                                                              "late_events": 575},
                       duplicates_dropped=905, rows_dropped_by_watermark=575, state_rows=36_927),
            RunSummary("dedup", True, batches=3, rows_in=0, state_rows=None)]
    table = summary_table(runs)
    assert [line.split() for line in table[1:]] == [
        ["dedup", "11", "59,738", "56,653", "1,840", "1,217", "36,927"],
        ["ingest", "10", "45,780", "45,000", "-", "-", "-"]]


def test_why_a_zero_dropped_late_is_zero_is_said_once_for_every_job_it_holds_for():
    """A pipeline over records that came before any watermark printed the same note five
    times under its table, once per stateful job."""
    from spark_jobs.runtime.metrics.summary import summary_table

    unbatched = [RunSummary(job, True, batches=2, rows_in=3_000, duplicates_dropped=86, batches_behind_a_watermark=0)
                 for job in ("dedup", "sessions", "alert-join")]
    behind = RunSummary("windowed-averages", True, batches=3, rows_in=3_000, batches_behind_a_watermark=2)
    notes = summary_table([RunSummary("ingest", batches=1, rows_in=3_053), *unbatched, behind])[6:]
    assert notes == ["dedup, sessions, alert-join: all records came before a watermark was set: cut the stream "
                     "into batches with SIGFLOW_MAX_OFFSETS_PER_TRIGGER to see late data dropped",
                     "windowed-averages: none behind the watermark"]
