"""Ctrl-C (SIGINT) and SIGTERM stop a long-running command at any moment: promptly, with
exit code 130 and a line saying what was done, leaving no process behind and nothing
half-done that a rerun would not finish. (`sigflow airflow`: tests/spark_jobs/local/;
`sigflow run --processing-time`, which stops gracefully after its batch: tests/spark_jobs/runtime/.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from spark_jobs.local.simulate import MALFORMED_KINDS, generate_events
from spark_jobs.runtime.waiting import wait_until
from tests.helpers import (
    REPO,
    cli_env,
    processes_with_env,
    produce,
    records_in,
    run_job,
    table,
    wait_for,
)

pytestmark = pytest.mark.slow  # signals to CLI processes, a JVM each

SIGNALS = pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])


def _start(settings, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    # SIGINT ignored, as in a shell's background job: the command must not rely on Python's default
    return subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.cli", *args], env={**cli_env(settings), **(extra_env or {})}, cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )


def _stop(command: subprocess.Popen, signum: int, settings) -> list[str]:
    command.send_signal(signum)
    output, _ = command.communicate(timeout=90)
    assert command.returncode == 130, output
    # a JVM's shutdown hooks may still be running
    wait_until(lambda: not processes_with_env("SIGFLOW_DATA_DIR", settings.data_dir), timeout_s=20, every_s=0.5)
    assert processes_with_env("SIGFLOW_DATA_DIR", settings.data_dir) == [], output
    return output.splitlines()


@SIGNALS
def test_a_signal_stops_simulate_and_says_how_many_records_kafka_holds(settings, signum):
    command = _start(settings, "simulate", "--rate", "50", "--duration", "600")
    wait_for(lambda: records_in(settings.kafka.bootstrap_servers, settings.streaming.events_topic) >= 20,
             timeout_s=60, watched=(command,), what="20 records in Kafka")

    lines = _stop(command, signum, settings)

    topic = re.escape(settings.streaming.events_topic)
    sent = re.search(rf"sigflow: error: interrupted after ([\d,]+) to {topic}\b.* sent in \d+ s", "\n".join(lines))
    assert sent, lines
    assert int(sent[1].replace(",", "")) == records_in(settings.kafka.bootstrap_servers, settings.streaming.events_topic)


def test_sigint_stops_a_pipeline_mid_run_and_a_rerun_writes_every_record_once(spark, settings):
    s = settings.replace(max_offsets_per_trigger=300)  # four ingest batches
    records = generate_events(1200, seed=5, late_ratio=0.0, malformed_ratio=0.02)
    produce(s, records)
    # the signal lands while ingest's batch 1 is held between its Delta commits and Spark's
    # commit log: the rerun must find that batch written and not write it again
    command = _start(s, "pipeline", "ingest", "dedup", extra_env={"SIGFLOW_FAILPOINTS": "ingest/after_delta_commit:1@pause"})
    seen = []
    while not seen or "failpoint after_delta_commit: ingest batch 1 paused" not in seen[-1]:
        seen.append(command.stdout.readline())  # blocks until a line; "" once the command ended
        assert seen[-1], "".join(seen)  # the command ended without reaching the pause

    lines = _stop(command, signal.SIGINT, s)
    assert lines[-1] == "sigflow: interrupted", seen + lines
    valid = [r for r in records if r.kind not in MALFORMED_KINDS]
    assert len(table(s, "device_events")) < len(valid)  # stopped mid-run, not after it

    for job in ("ingest", "dedup"):  # the rerun, from the checkpoints the signal left (a warm JVM)
        run_job(spark, s, job)
    assert len(table(s, "device_events")) == len(valid)
    assert len(table(s, "quarantined_events")) == len(records) - len(valid)
    deduplicated = table(s, "device_events_deduplicated").event_id
    assert deduplicated.is_unique and set(deduplicated) == {json.loads(r.value)["event_id"] for r in valid}


def test_sigint_while_a_batch_is_held_before_its_writes_stops_the_run_in_one_line(spark, settings):
    """Ctrl-C while a batch is under way: the query is stopped, the batch's next Spark call
    fails on the interrupt, and the run ends with its one line; a rerun writes the batch.
    Spark tells a stop from a failure by matching the batch's Python error against a regex
    that recurses once per character, and a Py4J error carries a Java stack trace: the
    query's thread died of a StackOverflowError, a thousand lines of it on the console."""
    s = settings.replace(max_offsets_per_trigger=300)
    records = generate_events(600, seed=6, late_ratio=0.0, malformed_ratio=0.0)
    produce(s, records)
    command = _start(s, "run", "dedup", extra_env={"SIGFLOW_FAILPOINTS": "dedup/before_delta_commit:1@pause"})
    seen = []
    while not seen or "failpoint before_delta_commit: dedup batch 1 paused" not in seen[-1]:
        seen.append(command.stdout.readline())
        assert seen[-1], "".join(seen)

    lines = _stop(command, signal.SIGINT, s)
    assert lines[-1] == "sigflow: interrupted", seen + lines
    assert not [line for line in lines if "StackOverflowError" in line or "java.util.regex" in line], lines[:12]
    assert len(lines) <= 3, lines[:40]
    assert len(table(s, "device_events_deduplicated")) < len(records)  # stopped mid-run

    run_job(spark, s, "dedup")  # from the checkpoint the signal left
    deduplicated = table(s, "device_events_deduplicated").event_id
    assert deduplicated.is_unique and set(deduplicated) == {json.loads(r.value)["event_id"] for r in records}


def _start_as_a_group(settings, *args: str, extra_env: dict[str, str]) -> subprocess.Popen:
    """The command in a process group of its own, as `timeout`, a terminal's job control and
    systemd (a control group) start it: a signal to the group reaches its JVM too."""
    return subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.cli", *args], env=cli_env(settings, extra_env), cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def _until_line(command: subprocess.Popen, text: str) -> list[str]:
    seen = []
    while not seen or text not in seen[-1]:
        seen.append(command.stdout.readline())
        assert seen[-1], "".join(seen)  # the command ended before the line
    return seen


def test_sigterm_to_the_whole_process_group_stops_a_pipeline_behind_in_kafka_after_its_batch_in_flight(
        spark, settings):
    """`timeout` and systemd's default stop send SIGTERM to every process of the command, its
    driver's JVM among them. The JVM shut Spark down under the batch: a page of Java stack
    traces, and the run ended as if its driver had died of a lack of memory. And a query behind
    in Kafka starts its next batch the moment one ends: the stop, waiting for it to be idle,
    ran on through the backlog. The stop is the Python process's: the batch in flight is
    finished, none after it is written, and the rerun writes every record once."""
    s = settings.replace(max_offsets_per_trigger=300)
    records = generate_events(1200, seed=7, late_ratio=0.0, malformed_ratio=0.02)
    produce(s, records)
    command = _start_as_a_group(s, "pipeline", "ingest", "dedup", "--processing-time", "1 second",
                                extra_env={"SIGFLOW_FAILPOINTS": "ingest/before_delta_commit:1@pause"})
    try:
        seen = _until_line(command, "failpoint before_delta_commit: ingest batch 1 paused")
        os.killpg(command.pid, signal.SIGTERM)
        output, _ = command.communicate(timeout=120)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.communicate()
    lines = seen + output.splitlines()
    assert command.returncode == 0, lines[-40:]
    assert not [line for line in lines if "died" in line or "Exception" in line or line.startswith("\tat ")], lines[-40:]
    wait_until(lambda: not processes_with_env("SIGFLOW_DATA_DIR", s.data_dir), timeout_s=20, every_s=0.5)
    assert processes_with_env("SIGFLOW_DATA_DIR", s.data_dir) == []
    valid = [r for r in records if r.kind not in MALFORMED_KINDS]
    events = table(s, "device_events")
    assert set(events.batch_id) == {0, 1}, (events.batch_id.value_counts(), lines[-10:])  # batch 1 was in flight

    for job in ("ingest", "dedup"):
        run_job(spark, s, job)
    assert sorted(table(s, "device_events").event_id) == sorted(json.loads(r.value)["event_id"] for r in valid)
    deduplicated = table(s, "device_events_deduplicated").event_id
    assert deduplicated.is_unique and set(deduplicated) == {json.loads(r.value)["event_id"] for r in valid}


def test_a_batch_in_flight_that_fails_after_sigterm_is_reported_not_taken_for_a_clean_stop(settings):
    """SIGTERM asks for a stop after the batch in flight, and that batch fails. The run ended
    with exit code 0 as if it had stopped cleanly; the failure is the run's error, and the
    next run redoes the batch."""
    s = settings.replace(max_offsets_per_trigger=300)
    produce(s, generate_events(900, seed=8, late_ratio=0.0, malformed_ratio=0.0))
    command = _start(s, "run", "ingest", "--processing-time", "1 second", extra_env={
        "SIGFLOW_FAILPOINTS": "before_delta_commit:1@pause,ingest/before_delta_commit:1@raise"})
    try:
        seen = _until_line(command, "failpoint before_delta_commit: ingest batch 1 paused")
        command.send_signal(signal.SIGTERM)
        output, _ = command.communicate(timeout=120)
    finally:
        if command.poll() is None:
            command.kill()
            command.communicate()
    lines = seen + output.splitlines()
    assert command.returncode == 2, lines[-40:]
    assert lines[-2].startswith("sigflow: error: job ingest failed: ") and "ingest batch 1 failed" in lines[-2], lines[-40:]
    assert table(s, "device_events").batch_id.max() == 0
