"""Exactly-once and restart behaviour of the runner, with real processes killed mid-batch."""

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from contextlib import contextmanager

import pytest

from spark_jobs.errors import BrokerUnavailable, DataLossError
from spark_jobs.jobs.registry import JOBS, get_job
from spark_jobs.local import broker as embedded
from spark_jobs.local.broker import free_port
from spark_jobs.local.simulate import generate_events
from spark_jobs.ops import prometheus, status
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.lineage_events import events_file
from spark_jobs.runtime.runner import JobRun
from spark_jobs.runtime.waiting import wait_until
from tests.conftest import make_settings
from tests.helpers import (
    REPO,
    cli_env,
    json_lines,
    produce,
    run_job,
    sigflow,
    table,
    wait_for,
)

pytestmark = pytest.mark.slow  # brokers of its own killed, jobs in JVMs of their own
# A broker of a test's own starts while the rest of the suite runs: it took over the CLI's
# 60 s once under the whole suite's load (the test passed alone).
BROKER_START_S = 180


@pytest.fixture
def private_broker(tmp_path):
    """An Apache Kafka broker of this test's own, to stop, kill and restart."""
    s = make_settings(tmp_path / "broker", "", broker_port=0)
    yield s
    embedded.stop(s)


def _fresh_topic(broker_settings, settings):
    info = embedded.start(broker_settings, timeout_s=BROKER_START_S)
    s = settings.replace(kafka_bootstrap_servers=info.bootstrap_servers)
    kafka_admin.create_topics(s.kafka.bootstrap_servers, [s.streaming.events_topic, s.streaming.alerts_topic], 3, s.kafka.topic_retention_ms)
    return s


def _recreate_topic(settings, topic):
    """Delete the topic and create it anew, empty: its old offsets are gone for good."""
    admin = kafka_admin.admin(settings.kafka.bootstrap_servers)
    admin.delete_topics([topic])[topic].result(timeout=30)
    # the deletion completes asynchronously
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics and "exists" not in kafka_admin.create_topics(
        settings.kafka.bootstrap_servers, [topic], 3, 60000)[topic], timeout_s=60, what=f"{topic} deleted and created anew")


def test_lost_kafka_offsets_stop_the_job_unless_fail_on_data_loss_is_false(spark, tmp_path, private_broker, caplog):
    s = _fresh_topic(private_broker, make_settings(tmp_path / "data", ""))
    produce(s, generate_events(60, malformed_ratio=0))
    assert run_job(spark, s).rows_in == 60

    _recreate_topic(s, s.streaming.events_topic)  # offsets 0..59 are gone; the new topic starts at 0
    produce(s, generate_events(9, seed=3, malformed_ratio=0))
    # status says so before the run: each partition now ends before where ingest had read to
    shown = status.job_status(s, "ingest").verdict
    assert shown.word == "DATA LOSS" and "the topic was deleted and created again" in shown.reason, shown
    assert shown.next_step.startswith("produce them again if their source can")
    with pytest.raises(DataLossError, match="no longer has offsets") as err:
        run_job(spark, s)
    assert "runbooks" in err.value.hint
    # the failed run's lineage: START, then FAIL with the error (docs/lineage.md)
    events = json_lines(events_file(s, "ingest"))
    failed = [e for e in events if e["eventType"] == "FAIL"]
    assert len(failed) == 1 and "no longer has offsets" in failed[0]["run"]["facets"]["errorMessage"]["message"]
    assert [e["eventType"] for e in events if e["run"]["runId"] == failed[0]["run"]["runId"]] == ["START", "FAIL"]

    # The job's log must say what was skipped (the CLI prints these warnings).
    with caplog.at_level(logging.WARNING, logger="sigflow.runner"):
        lenient = run_job(spark, s.replace(fail_on_data_loss=False))
    skipped = [r.getMessage() for r in caplog.records if "data loss skipped (failOnDataLoss=false)" in r.getMessage()]
    assert skipped and all(f"{s.streaming.events_topic}[" in line and "resuming at" in line for line in skipped)
    # Spark's source resumes at the recreated partitions' ends: the 9 records already there
    # are skipped with the lost range (docs/runbooks/checkpoint-lost-or-corrupt.md)...
    assert lenient.rows_in == 0
    # ...and what comes after is read, once.
    produce(s, generate_events(5, seed=4, malformed_ratio=0))
    assert run_job(spark, s).rows_in == 5
    assert len(table(s, "device_events_raw")) == 65


class _Lines:
    """A child's output as it comes (both pipes drained, so it never blocks on a full one),
    so a test can wait for a line."""

    def __init__(self, process):
        self.process = process
        self.lines: list[str] = []  # stderr
        self.out: list[str] = []  # stdout
        for stream, into in ((process.stderr, self.lines), (process.stdout, self.out)):
            threading.Thread(target=lambda s=stream, i=into: i.extend(iter(s.readline, "")), daemon=True).start()

    def check_alive(self) -> None:
        assert self.process.poll() is None, f"the job exited early: {self.lines[-20:]}"

    def wait_for(self, text: str, timeout_s: float) -> str:
        found = wait_until(lambda: next((line for line in self.lines if text in line), None), timeout_s=timeout_s,
                           every_s=0.2, give_up=lambda: self.process.poll() is not None)
        self.check_alive()
        assert found, f"no line with {text!r} in {timeout_s:g} s; stderr tail: {self.lines[-20:]}"
        return found


@contextmanager
def _continuous_ingest(settings, extra_env=None):
    """`sigflow run ingest --processing-time 1s` as an operator starts it; killed if a test
    leaves it running."""
    job = subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.cli", "run", "ingest", "--processing-time", "1s"],
        env=cli_env(settings, extra_env), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        yield _Lines(job)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


def _stop_gracefully(output: _Lines) -> None:
    output.process.send_signal(signal.SIGTERM)
    output.process.wait(timeout=300)
    time.sleep(0.5)  # the reader threads take the last lines
    assert output.process.returncode == 0, "".join(output.lines[-30:])


def _wait_for_rows(settings, name, rows, output: _Lines, timeout_s=240):
    # A wait ends when the rows are there. Beside the suite's heaviest files CI saw a JVM
    # take 100 s to finish an empty first batch.
    if wait_until(lambda: len(table(settings, name)) >= rows, timeout_s=timeout_s, every_s=1,
                  not_yet=(Exception,),  # table not created yet
                  give_up=lambda: output.process.poll() is not None):
        return
    output.check_alive()
    progress = settings.progress_file("ingest")
    batches = progress.read_text().splitlines()[-5:] if progress.exists() else []
    raise AssertionError(f"{name} did not reach {rows} rows in {timeout_s} s; stderr tail: {output.lines[-20:]}; "
                         f"last batches (offsets): {batches}")


@pytest.mark.timeout(600)  # 74 s alone
def test_broker_killed_mid_run_is_retried_with_backoff_and_the_job_resumes_losing_nothing(tmp_path, private_broker):
    info = embedded.start(private_broker, timeout_s=BROKER_START_S)
    s = make_settings(tmp_path / "data", info.bootstrap_servers)
    kafka_admin.create_topics(s.kafka.bootstrap_servers, [s.streaming.events_topic, s.streaming.alerts_topic], 3, s.kafka.topic_retention_ms)
    before, after = generate_events(120, seed=5, malformed_ratio=0), generate_events(80, seed=6, malformed_ratio=0)
    produce(s, before)
    # A read fails after kafka_read_timeout_s (30 s by default): 5 s here finds the outage
    # sooner; the backoff, the retries and the resume are the same.
    with _continuous_ingest(s, {"SIGFLOW_KAFKA_READ_TIMEOUT_S": "5"}) as output:
        _wait_for_rows(s, "device_events_raw", len(before), output)
        embedded.kill(private_broker)  # SIGKILL, as a crash would
        retry = output.wait_for("is unreachable; retry 1 in", timeout_s=300)
        assert "sigflow broker status" in retry and "resumes from its" in retry
        output.wait_for("is unreachable; retry 2 in", timeout_s=120)  # backs off, keeps trying
        embedded.start(private_broker, timeout_s=BROKER_START_S)  # same ports, same log directory: the records are there
        output.wait_for("is back after", timeout_s=300)
        produce(s, after)
        _wait_for_rows(s, "device_events_raw", len(before) + len(after), output)
        _stop_gracefully(output)
    written = Counter(bytes(value) for value in table(s, "device_events_raw")["value"])
    assert written == Counter(r.value for r in before + after)  # each once: none lost, none twice


def test_a_job_stops_with_a_clear_message_once_the_broker_outage_budget_is_spent(spark, tmp_path, private_broker):
    # a read fails after kafka_read_timeout_s (30 s by default): 5 s finds the outage sooner
    s = _fresh_topic(private_broker, make_settings(tmp_path / "data", "", broker_outage_budget="3 seconds",
                                                   kafka_read_timeout_s=5))
    produce(s, generate_events(20, malformed_ratio=0))
    run = JobRun(get_job("ingest"), s, spark)
    embedded.stop(private_broker)
    with pytest.raises(BrokerUnavailable, match="unreachable for [0-9]+ s") as err:
        run.run_available_now()
    assert "resumes from its checkpoint" in err.value.hint


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def test_spark_s_own_available_now_trigger_ends_with_the_batch_the_moved_watermark_calls_for(spark, tmp_path):
    """docs/semantics.md: Spark 4.2's availableNow trigger, like the processing-time query a
    run drives with processAllAvailable, ends with the no-data batch that emits what the
    last data batch's watermark made final. Ten readings a minute apart, one-minute windows,
    a minute's delay: the data batch emits none (its watermark is still the start), the
    next emits the eight windows that end at or before 00:08."""
    import json

    from pyspark.sql import functions as F

    source = tmp_path / "readings"
    source.mkdir()
    (source / "part.json").write_text("\n".join(
        json.dumps({"id": str(minute), "t": f"2026-01-01T00:{minute:02d}:00Z"}) for minute in range(10)))
    windows = (spark.readStream.schema("id STRING, t TIMESTAMP").json(str(source))
               .withWatermark("t", "1 minute").groupBy(F.window("t", "1 minute")).count())
    emitted = []
    query = (windows.writeStream.outputMode("append")
             .foreachBatch(lambda frame, batch_id: emitted.append((batch_id, frame.count())))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert emitted == [(0, 0), (1, 8)]


def test_processing_time_run_keeps_going_until_sigterm_then_stops_cleanly(settings):
    """A run with a 1-second trigger takes records as they come; `sigflow maintenance`
    compacting its tables meanwhile loses and repeats no row; SIGTERM ends it cleanly."""
    from deltalake import DeltaTable

    ui_port = free_port()
    with _continuous_ingest(settings, {"SIGFLOW_SPARK_UI": "true", "SIGFLOW_SPARK_UI_PORT": str(ui_port)}) as output:
        records = generate_events(100, malformed_ratio=0)
        produce(settings, records[:60])
        _wait_for_rows(settings, "device_events_raw", 60, output)  # picks up data as it comes
        produce(settings, records[60:])
        _wait_for_rows(settings, "device_events_raw", 100, output)  # a second batch: files to compact
        upkeep = sigflow(settings, "maintenance")
        assert upkeep.returncode == 0, upkeep.stderr
        produce(settings, generate_events(50, seed=9, malformed_ratio=0))
        _wait_for_rows(settings, "device_events_raw", 150, output)

        # while it runs, Prometheus can scrape Spark's own metrics of the query from the
        # driver, and sigflow's exporter says the job is up
        spark_metrics = _get(f"http://127.0.0.1:{ui_port}/metrics/prometheus/")
        query = "metrics_sigflow_ingest_driver_spark_streaming_sigflow_ingest_"
        for gauge in ("inputRate_total", "processingRate_total", "latency", "eventTime_watermark"):
            assert f"{query}{gauge}_Value" in spark_metrics, gauge
        exporter = prometheus.serve(settings.replace(metrics_port=free_port()))
        try:
            assert 'sigflow_job_up{sigflow_job="ingest"} 1.0' in _get(exporter.url)
        finally:
            exporter.stop()
        _stop_gracefully(output)
    summary = "".join(output.out)
    assert "ingest:" in summary and "150 rows in" in summary
    assert any(" ingest batch " in line and "records in" in line for line in output.lines)  # one per batch
    assert len(table(settings, "device_events_raw")) == 150
    events = table(settings, "device_events")
    assert len(events) == 150 and not events.duplicated(["topic", "partition", "offset"]).any()
    operations = [c["operation"] for c in reversed(DeltaTable(settings.table_uri("device_events")).history())]
    assert "WRITE" in operations[operations.index("OPTIMIZE"):], operations  # appended after the compaction


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs: a real file system that really fills up."""

    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        message = f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {mounted.stderr.strip()}"
        if os.environ.get("CI"):  # CI runs as root: a skip there would hide the test
            pytest.fail(message)
        pytest.skip(message)
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(directory):
    with open(directory / "filler", "wb") as filler:
        try:
            while True:
                filler.write(b"\0" * (1 << 20))
                filler.flush()
        except OSError:  # ENOSPC: the disk is full
            pass


def test_a_batch_whose_table_write_fails_is_invisible_and_the_rerun_completes_it(spark, settings, small_disk):
    from deltalake import DeltaTable

    from spark_jobs.errors import SigflowError

    s = settings.replace(delta_root=str(small_disk / "delta"))
    first, second = generate_events(150, seed=11), generate_events(150, seed=12)
    produce(s, first)
    run_job(spark, s, "ingest")
    tables = [spec.name for spec in JOBS["ingest"].tables]
    before = {name: (DeltaTable(s.table_uri(name)).version(), len(table(s, name))) for name in tables}

    _fill(small_disk)
    produce(s, second)
    with pytest.raises(SigflowError, match="No space left on device") as err:
        run_job(spark, s, "ingest")
    assert "rerun" in err.value.hint
    after_failure = {name: (DeltaTable(s.table_uri(name)).version(), len(table(s, name))) for name in tables}
    assert after_failure == before  # no new version, no row of the failed batch

    (small_disk / "filler").unlink()
    run_job(spark, s, "ingest")
    written = Counter(bytes(value) for value in table(s, "device_events_raw")["value"])
    assert written == Counter(r.value for r in first + second)  # the failed batch, once
