from spark_jobs.runtime.checkpoint import Checkpoint


def test_reads_offset_log_entries_and_keeps_one_app_id(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    (tmp_path / "offsets" / "0").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1000,"conf":{}}\n{"events":{"0":5}}'
    )
    (tmp_path / "offsets" / "1").write_text(
        'v1\n{"batchWatermarkMs":720000,"batchTimestampMs":2000,"conf":{}}\n{"events":{"0":9}}'
    )
    (tmp_path / "commits" / "0").write_text("v1\n{}")
    ck = Checkpoint(str(tmp_path))
    assert ck.offset_batches() == [0, 1]
    assert ck.last_committed() == 0
    batch = ck.offsets(1)
    assert (batch.watermark_ms, batch.batch_timestamp_ms, batch.sources) == (720000, 2000, [{"events": {"0": 9}}])
    assert ck.offsets(7) is None
    app_id = ck.app_id("ingest")
    assert app_id.startswith("sigflow-ingest-") and Checkpoint(str(tmp_path)).app_id("ingest") == app_id
    assert Checkpoint(str(tmp_path / "fresh")).app_id("ingest") != app_id
