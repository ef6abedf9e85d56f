from spark_jobs.local.simulate import generate_events
from spark_jobs.ops import status
from tests.helpers import produce, run_job, sigflow


def test_status_reports_progress_and_kafka_lag(spark, settings):
    produce(settings, generate_events(120, malformed_ratio=0))
    run_job(spark, settings, "dedup")
    produce(settings, generate_events(30, seed=2, malformed_ratio=0))  # not processed yet
    report = {s.job: s for s in status.all_status(settings)}
    dedup = report["dedup"]
    assert dedup.running_pid is None and dedup.last_batch is not None
    assert sum(dedup.lag.values()) == 30
    assert dedup.state_rows > 0 and dedup.watermark is not None
    assert report["sessions"].last_batch is None
    text = sigflow(settings, "status").stdout
    assert "dedup: not running, last batch" in text and "kafka lag:" in text


def test_checkpoint_inspect_lists_batches_and_their_offsets(spark, settings):
    produce(settings, generate_events(50, malformed_ratio=0))
    run_job(spark, settings, "ingest")
    lines = status.inspect_checkpoint(settings, "ingest")
    assert lines[0].startswith("ingest: checkpoint") and "app id sigflow-ingest-" in lines[0]
    assert any("batch 0: committed" in line for line in lines[1:])
    assert "no checkpoint" in status.inspect_checkpoint(settings, "sessions")[0]
