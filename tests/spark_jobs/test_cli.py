"""The CLI as operators meet it: one actionable line on failure, exit code non-zero."""

import json
import os
from pathlib import Path

import pytest

from spark_jobs.config import load_settings
from spark_jobs.runtime.delta.table_access import count_matching, read_pandas
from tests.helpers import sigflow


def _one_line_error(result):
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("sigflow:")]
    assert lines[0].startswith("sigflow: error:") and lines[1].startswith("sigflow: hint:")
    return lines


def test_unreachable_broker_is_one_actionable_line(tmp_path):
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "kafka_bootstrap_servers": "127.0.0.1:1"})
    lines = _one_line_error(sigflow(s, "run", "ingest", timeout=60))
    assert "127.0.0.1:1 did not answer" in lines[0] and "sigflow broker start" in lines[1]


def test_no_broker_at_all_says_how_to_start_one(tmp_path):
    result = sigflow(None, "topics", "create", extra_env={"SIGFLOW_DATA_DIR": str(tmp_path)})
    lines = _one_line_error(result)
    assert "embedded broker is not running" in lines[0]


def test_invalid_config_names_the_setting(tmp_path):
    result = sigflow(None, "run", "ingest", extra_env={"SIGFLOW_WATERMARK_DELAY": "soon"})
    lines = _one_line_error(result)
    assert "watermark_delay='soon'" in lines[0] and "SIGFLOW_WATERMARK_DELAY" in lines[1]


@pytest.mark.parametrize("command", [["run", "ingest"], ["pipeline"]])
def test_a_processing_time_that_is_no_duration_is_named_as_the_flag_given(tmp_path, command):
    """It was reported as the setting trigger_interval, with a hint to set it in the config
    file or SIGFLOW_TRIGGER_INTERVAL, neither of which the operator used."""
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "kafka_bootstrap_servers": "127.0.0.1:1"})
    lines = _one_line_error(sigflow(s, *command, "--processing-time=-5s"))
    assert lines == ["sigflow: error: --processing-time '-5s' is not a duration",
                     "sigflow: hint: write it like 10s, '30 seconds' or 5m"]


def test_unknown_job_lists_the_jobs(tmp_path):
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "kafka_bootstrap_servers": "127.0.0.1:1"})
    lines = _one_line_error(sigflow(s, "run", "no-such-job"))
    assert "ingest" in lines[1]


def test_a_pipeline_naming_an_unknown_job_is_refused_before_it_starts_a_driver(settings):
    """`sigflow pipeline ingest bogus` started Spark's JVM (its start-up line on the console)
    before it found the job unknown."""
    refused = sigflow(settings, "pipeline", "ingest", "bogus")
    lines = _one_line_error(refused)
    assert "unknown job 'bogus'" in lines[0] and "ingest" in lines[1]
    assert refused.stderr.strip().splitlines() == lines, refused.stderr  # and nothing of a JVM


def test_stop_takes_only_a_job_name_never_a_path(tmp_path):
    """`sigflow stop` reads the job's lease under its checkpoint: a name that is no job is
    refused before it becomes a path."""
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "kafka_bootstrap_servers": "127.0.0.1:1"})
    (tmp_path / "elsewhere").mkdir()
    lines = _one_line_error(sigflow(s, "stop", "../elsewhere"))
    assert "unknown job '../elsewhere'" in lines[0] and "ingest" in lines[1]


def test_produce_of_a_directory_says_it_is_one(tmp_path):
    """It said "no such file" of a folder that is there."""
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "kafka_bootstrap_servers": "127.0.0.1:1"})
    lines = _one_line_error(sigflow(s, "produce", "--file", str(tmp_path)))
    assert lines[0] == f"sigflow: error: {tmp_path}: is a directory", lines



def test_a_report_that_cannot_be_written_says_where_in_one_line(tmp_path):
    """A folder that cannot hold the page ended in an unexplained FileNotFoundError."""
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "kafka_bootstrap_servers": "127.0.0.1:1"})
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    lines = _one_line_error(sigflow(s, "report", "--out", str(blocker / "report.html")))
    assert lines == [f"sigflow: error: the report cannot be written to {blocker / 'report.html'}: {blocker} is a file",
                     "sigflow: hint: give --out a file in a folder you may write"], lines


def test_a_batch_or_a_count_below_zero_is_refused_by_its_flag(tmp_path):
    """`rewind --to-batch -5` was planned, and refused as "no longer in the checkpoint"."""
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "kafka_bootstrap_servers": "127.0.0.1:1"})
    for args, flag in ((("checkpoint", "rewind", "dedup", "--to-batch", "-5"), "--to-batch: -5 is below 0"),
                       (("checkpoint", "inspect", "dedup", "--state", "--limit", "x"), "--limit: 'x' is not a whole number"),
                       (("quarantine", "--samples", "-1"), "--samples: -1 is below 0")):
        refused = sigflow(s, *args)
        assert refused.returncode == 2 and refused.stderr.strip().endswith(f"error: argument {flag}"), refused.stderr


def test_produce_publishes_each_line_as_is(settings, tmp_path):
    from spark_jobs.runtime.kafka import admin as kafka_admin
    from spark_jobs.runtime.kafka import offsets as kafka_offsets
    path = tmp_path / "events.jsonl"
    path.write_text('{"event_id": "e1", "device_id": "d1", "event_time": 1, "signal": 1}\nnot json\n')
    result = sigflow(settings, "produce", "--file", str(path))
    assert result.returncode == 0 and "produced 2 records" in result.stdout
    parts = kafka_admin.topic_partitions(settings.kafka.bootstrap_servers, settings.streaming.events_topic)
    bounds = kafka_offsets.offset_bounds(settings.kafka.bootstrap_servers, settings.streaming.events_topic, parts)
    assert sum(end for _, end in bounds.values()) == 2




def test_produce_to_a_topic_sigflow_does_not_make_names_its_own_instead_of_topics_create(settings, tmp_path):
    """A misspelt --topic was told to run `sigflow topics create`, which makes only the
    configured topics, so the same error came back."""
    path = tmp_path / "events.jsonl"
    path.write_text('{"event_id": "e1", "device_id": "d1", "event_time": 1, "signal": 1}\n')
    lines = _one_line_error(sigflow(settings, "produce", "--file", str(path), "--topic", "device-event"))
    assert lines[0].startswith("sigflow: error: Kafka topic 'device-event' does not exist at "), lines
    assert lines[1] == (f"sigflow: hint: the jobs read {settings.streaming.events_topic} and "
                        f"{settings.streaming.alerts_topic}: was --topic device-event meant to be one of them? "
                        "`sigflow topics create` makes only those"), lines
@pytest.mark.slow  # two driver JVMs of its own
@pytest.mark.timeout(600)  # 105 s beside the suite
def test_a_driver_jvm_dying_mid_batch_stops_with_advice_and_the_rerun_writes_the_batch_once(settings):
    """The driver's JVM exits in the middle of a batch (as it does on OutOfMemoryError, with
    -XX:+ExitOnOutOfMemoryError) while Python lives on: the command says which two settings
    to change, the batch is left uncommitted with no rows visible, and a rerun redoes it."""
    from spark_jobs.local.simulate import generate_events
    from spark_jobs.runtime.checkpoint.directory import Checkpoint
    from tests.helpers import produce

    records = generate_events(200, seed=3, malformed_ratio=0)
    produce(settings, records)
    result = sigflow(settings, "run", "ingest", extra_env={
        "SIGFLOW_SPARK_DRIVER_MEMORY": "512m", "SIGFLOW_FAILPOINTS": "ingest/before_delta_commit:0@jvm"})
    assert result.returncode == 2, result.stderr[-2000:]
    error, hint = [line for line in result.stderr.splitlines() if line.startswith("sigflow:")][-2:]
    assert "driver died during a batch, most likely out of memory" in error and "512m" in error
    assert "raise SIGFLOW_SPARK_DRIVER_MEMORY" in hint and "docs/runbooks/job-crashed.md" in hint
    checkpoint = Checkpoint(settings.checkpoint_uri("ingest"))
    assert checkpoint.offsets(0) is not None and checkpoint.committed_batches() == []
    assert count_matching(settings.table_uri("device_events_raw")) == 0

    rerun = sigflow(settings, "run", "ingest")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert count_matching(settings.table_uri("device_events_raw")) == len(records)  # every record, once
    # the process exits right after its last batch, whose progress line still reaches the file
    logged = [json.loads(line)["batch_id"] for line in settings.progress_file("ingest").read_text().splitlines()]
    assert sorted(logged) == sorted(read_pandas(settings.table_uri("pipeline_metrics")).batch_id) == [0]


@pytest.mark.slow  # two driver JVMs of its own
def test_a_failed_batch_is_one_line_per_spark_error_on_the_console_and_whole_in_the_file_its_hint_names(settings):
    """A batch that fails: Spark's errors printed their stack traces, the JVM's and the
    batch's Python one inside them, about 500 lines between the command and its own line
    saying what failed. With -v the console has them all, as before."""
    import stat

    from spark_jobs.local.simulate import generate_events
    from tests.helpers import produce

    produce(settings, generate_events(50, seed=8, malformed_ratio=0))
    (Path(settings.data_dir) / "logs").mkdir(mode=0o755, parents=True)  # left open by someone: made private
    failed = sigflow(settings, "run", "ingest", extra_env={"SIGFLOW_FAILPOINTS": "ingest/before_delta_commit:0@raise"})
    error, hint = _one_line_error(failed)
    assert "job ingest failed" in error and "failpoint before_delta_commit: ingest batch 0 failed" in error
    log_file = Path(settings.data_dir).resolve() / "logs" / "sigflow-ingest.log"
    assert hint == f"sigflow: hint: see {log_file} for the batch that failed, in full"
    spark_lines = [line for line in failed.stderr.splitlines() if " spark " in line]
    assert spark_lines and all(" spark ERROR " in line or " spark WARN " in line for line in spark_lines)
    # and sigflow's error and hint: not the Java launcher's warning of the incubator module Spark adds
    assert len(failed.stderr.splitlines()) == len(spark_lines) + 2, failed.stderr
    full = log_file.read_text()
    assert "Traceback (most recent call last)" in full and "\tat org.apache.spark" in full
    assert "FailpointError: failpoint before_delta_commit" in full
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600 and stat.S_IMODE(log_file.parent.stat().st_mode) == 0o700

    verbose = sigflow(settings, "-v", "run", "ingest",
                      extra_env={"SIGFLOW_FAILPOINTS": "ingest/before_delta_commit:0@raise"})
    assert verbose.returncode == 2 and "\tat org.apache.spark" in verbose.stderr
    assert "see the log above for the batch that failed" in verbose.stderr


@pytest.mark.slow  # a driver JVM of its own
def test_a_batch_replayed_after_its_commits_reports_what_it_wrote_in_pipeline_metrics(spark, settings):
    """Killed after the batch's Delta commits, before Spark's: the rerun writes nothing new
    (Delta has the batch), and the batch's pipeline_metrics row still counts its output:
    each of the 200 valid records once raw and once typed."""
    from spark_jobs.local.simulate import generate_events
    from tests.helpers import produce, run_job

    produce(settings, generate_events(200, seed=5, malformed_ratio=0))
    killed = sigflow(settings, "run", "ingest", extra_env={"SIGFLOW_FAILPOINTS": "ingest/after_delta_commit:0"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert count_matching(settings.table_uri("device_events_raw")) == 200
    run_job(spark, settings, "ingest")
    assert count_matching(settings.table_uri("device_events_raw")) == 200
    metrics = read_pandas(settings.table_uri("pipeline_metrics"))
    assert metrics[["batch_id", "input_rows", "output_rows"]].values.tolist() == [[0, 200, 400]]


@pytest.mark.slow  # a CLI process of its own
def test_a_second_run_of_a_job_on_its_checkpoint_is_refused_and_no_row_is_written_twice(spark, settings):
    """While a run holds the checkpoint, `sigflow run` of the same job is refused, naming the
    holder, before it starts a driver; the first run then writes every record once."""
    from spark_jobs.jobs.registry import get_job
    from spark_jobs.local.simulate import generate_events
    from spark_jobs.runtime.runner import JobRun
    from tests.helpers import produce

    produce(settings, generate_events(120, seed=9, malformed_ratio=0))
    first = JobRun(get_job("ingest"), settings, spark)  # holds the lease from here
    second = sigflow(settings, "run", "ingest", timeout=120)
    assert second.returncode != 0
    refusal = [line for line in second.stderr.splitlines() if line.startswith("sigflow:")]
    assert "ingest is already running on this host" in refusal[0] and f"pid {os.getpid()}" in refusal[0], second.stderr
    assert "Traceback" not in second.stderr
    first.run_available_now()
    assert count_matching(settings.table_uri("device_events_raw")) == 120
    JobRun(get_job("ingest"), settings, spark).run_available_now()  # the lease was released with the run
    assert count_matching(settings.table_uri("device_events_raw")) == 120


def test_a_missing_file_to_produce_is_one_line(tmp_path):
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "kafka_bootstrap_servers": "127.0.0.1:1"})
    for args in (("--validate",), ()):
        lines = _one_line_error(sigflow(s, "produce", *args, "--file", str(tmp_path / "missing.jsonl")))
        assert "missing.jsonl: no such file" in lines[0]


def test_stop_refuses_to_signal_a_restart_being_applied(tmp_path):
    """The lease is held by a rewind being applied (this test's process): `sigflow stop`
    says so and signals nothing; a resume refuses to plan around it."""
    from spark_jobs.ops import restart
    from spark_jobs.runtime.checkpoint.directory import Checkpoint
    from spark_jobs.runtime.checkpoint.lease import Lease

    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "kafka_bootstrap_servers": "127.0.0.1:1"})
    with Lease(Checkpoint(s.checkpoint_uri("ingest")), "ingest", 60, purpose="rewind"):
        lines = _one_line_error(sigflow(s, "stop", "ingest"))
        assert "a rewind of its checkpoint is being applied" in lines[0]
        resumed = restart.plan_resume(s, "ingest")
        assert not resumed.steps and any("a rewind of ingest is being applied" in r for r in resumed.refusals)


def test_bad_checkpoint_and_table_files_end_in_one_line_and_recover_runs_past_them(spark, settings):
    """A checkpoint's sigflow.json that is not JSON, and a Delta commit whose userMetadata
    is another writer's free text: rewind refuses in one line pointing to recover, recover
    plans past the damaged file, lineage and the run say what is wrong without a traceback."""
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    from spark_jobs.local.simulate import generate_events
    from spark_jobs.runtime.checkpoint.directory import Checkpoint
    from tests.helpers import produce, run_job

    produce(settings, generate_events(60, seed=6))
    run_job(spark, settings, "ingest")
    raw = settings.table_uri("device_events_raw")
    write_deltalake(raw, DeltaTable(raw).to_pyarrow_dataset().head(0), mode="append",
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": "manual fix, see ticket"}))
    lineage = sigflow(settings, "lineage", "device_events_raw")
    assert lineage.returncode == 0, lineage.stderr

    checkpoint = Checkpoint(settings.checkpoint_uri("ingest"))
    (Path(checkpoint.path) / "sigflow.json").write_text('{"app_id": "sigflow-ingest-')
    rewound = sigflow(settings, "checkpoint", "rewind", "ingest", "--to-batch", "0")
    assert rewound.returncode == 3 and "Traceback" not in rewound.stderr, rewound.stderr
    assert "sigflow.json is not a JSON object): recover it instead" in rewound.stdout
    recovered = sigflow(settings, "checkpoint", "recover", "ingest", "--from", "delta")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert "move the old checkpoint aside" in recovered.stdout
    ran = sigflow(settings, "run", "ingest", timeout=120)
    assert "sigflow.json is damaged" in _one_line_error(ran)[0]
