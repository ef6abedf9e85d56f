from pathlib import Path

import pytest

from spark_jobs.runtime.checkpoint.directory import Checkpoint


def test_reads_offset_log_entries_and_keeps_one_app_id(tmp_path):
    app_id = Checkpoint(str(tmp_path)).app_id("ingest")  # made before the first batch, as a run does
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
    assert ck.app_id("ingest") == app_id
    assert app_id.startswith("sigflow-ingest-") and Checkpoint(str(tmp_path)).app_id("ingest") == app_id
    assert Checkpoint(str(tmp_path / "fresh")).app_id("ingest") != app_id


def test_batches_without_the_identity_file_are_refused_not_given_a_new_id(tmp_path):
    """A new app id would append the batch in flight a second time under it."""
    import pytest

    from spark_jobs.errors import CheckpointIdentityLost

    ck = Checkpoint(str(tmp_path))
    ck.app_id("dedup")
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"t":{"0":5}}')
    (tmp_path / "sigflow.json").unlink()
    with pytest.raises(CheckpointIdentityLost, match="sigflow checkpoint recover dedup"):
        ck.app_id("dedup")
    assert not (tmp_path / "sigflow.json").exists()
    assert any("sigflow.json" in problem for problem in ck.problems())


def test_identity_is_replaced_whole_and_leaves_no_temporary_file(tmp_path):
    ck = Checkpoint(str(tmp_path))
    first = ck.app_id("sessions")
    ck.rotate_app_id("sessions", rewound_to=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sigflow.json"]
    identity = ck.identity()
    assert identity["checkpoint_id"] == first and identity["app_id"] != first


def test_a_rewind_removes_state_files_of_both_rocksdb_formats(tmp_path):
    """State format 2 names its snapshots N_<uuid>.zip; a rewind to batch 1 keeps versions
    up to 2 (batch N leaves version N+1) and deletes later ones of either naming."""
    state = tmp_path / "state" / "0" / "0"
    state.mkdir(parents=True)
    names = ["1.changelog", "2.zip", "2_0a1b2c.zip", "3.changelog", "3_9f8e7d.zip", "4.delta", "_metadata"]
    for name in names:
        (state / name).write_text("x")
    removed = Checkpoint(str(tmp_path)).truncate_after(1)
    assert sorted(p.name for p in state.iterdir()) == ["1.changelog", "2.zip", "2_0a1b2c.zip", "_metadata"]
    assert len(removed) == 3


def test_an_edited_checkpoint_id_never_reaches_a_delete_predicate(tmp_path):
    """sigflow.json's ids go into the Delta predicates that delete a job's rows; one edited
    to carry SQL is refused before anything is read or deleted."""
    import pandas as pd
    import pytest
    from deltalake import DeltaTable, write_deltalake

    from spark_jobs.errors import SigflowError
    from spark_jobs.runtime.delta.table_access import delete_rows

    checkpoint = Checkpoint(str(tmp_path / "ck"))
    checkpoint.save_identity({"app_id": "sigflow-ingest-0123456789ab", "checkpoint_id": "x' OR '1'='1", "job": "ingest"})
    with pytest.raises(SigflowError, match="checkpoint_id in .*sigflow.json is not an identifier"):
        checkpoint.checkpoint_id("ingest")

    uri = str(tmp_path / "metrics")
    write_deltalake(uri, pd.DataFrame({"job": ["ingest", "dedup"], "checkpoint_id": ["a", "b"], "batch_id": [1, 1]}))
    for bad in ({"job": "ingest' OR '1'='1"}, {"job": "ingest", "checkpoint_id": "a' OR '1'='1"}):
        with pytest.raises(SigflowError, match="not an identifier"):
            delete_rows(uri, **bad)
    delete_rows(uri, job="ingest", checkpoint_id="a")
    assert DeltaTable(uri).to_pyarrow_dataset().to_table().column("job").to_pylist() == ["dedup"]


def _checkpoint_mid_rewind(tmp_path):
    """A checkpoint with one committed batch whose rewind stopped half way, as an older sigflow
    marked it (pending_rewind in sigflow.json)."""
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"t":{"0":5}}')
    checkpoint = Checkpoint(str(tmp_path))
    checkpoint.save_identity({"app_id": "sigflow-dedup-0123456789ab", "checkpoint_id": "sigflow-dedup-0123456789ab",
                              "job": "dedup", "pending_rewind": 0})
    return checkpoint


def test_a_read_the_storage_fails_for_a_moment_is_read_again_not_taken_for_no_file(tmp_path):
    """A job starting while the object store fails reads for a moment: it used to take the
    unread sigflow.json for none, miss the rewind left half done, and start."""
    import pytest

    from spark_jobs.errors import SigflowError
    from spark_jobs.runtime.checkpoint.guards import check_no_unfinished_restart
    from tests.helpers import StorageDown

    checkpoint = _checkpoint_mid_rewind(tmp_path)
    outage = StorageDown(1.0)
    checkpoint.fs = outage.filesystem()
    with pytest.raises(SigflowError, match="a rewind to batch 0 did not finish"):
        check_no_unfinished_restart(checkpoint, "dedup")
    assert outage.refused >= 1


def test_an_identity_the_storage_failed_to_read_is_never_saved_over(tmp_path, settings, monkeypatch):
    """The settings check saves sigflow.json with what it recorded: over an identity it could
    not read, it used to save one without the app id its Delta commits carry."""
    import json

    import pytest

    from spark_jobs.jobs.registry import get_job
    from spark_jobs.runtime.checkpoint import storage
    from spark_jobs.runtime.checkpoint.guards import check_settings_compatible
    from tests.helpers import StorageDown

    checkpoint = _checkpoint_mid_rewind(tmp_path)
    checkpoint.fs = StorageDown(60).filesystem()
    monkeypatch.setattr(storage, "READ_PATIENCE_S", 1.0)  # a storage down for good, sooner
    with pytest.raises(OSError, match="503"):
        check_settings_compatible(checkpoint, get_job("dedup"), settings)
    kept = json.loads((tmp_path / "sigflow.json").read_text())
    assert (kept["app_id"], kept["pending_rewind"]) == ("sigflow-dedup-0123456789ab", 0)


# Each file of a checkpoint damaged as storage, a careless edit or a crash leaves it: bytes
# that are not text, JSON of the wrong types, truncation.
DAMAGE = {
    "sigflow.json": [b"\xff\xfe{\"app_id\": 1}", b"{\"app_id\": \"sigflow-sessions-", b"[]",
                     b'{"app_id": "a b", "checkpoint_id": "a b"}', b'{"app_id": 5}', b'{"checkpoint_id": null}'],
    "offsets/0": [b"v1\n\xc3\x28", b'v1\n{"batchWatermarkMs": {}}\n{"t":{"0":5}}', b"v1\n{\"batchWat",
                  b'v1\n{"batchWatermarkMs": 0}\n{"t": 5}', b'v1\n{"batchWatermarkMs": 0}\n{"t": {"0": "x"}}',
                  b'v1\n{"batchWatermarkMs": 0, "conf": []}\n-', b"v1", b""],
    "commits/0": [b"\x80\x81", b"", b"{}"],
    "metadata": [b"\xff"],
}


@pytest.mark.parametrize("name, damage", [(name, damage) for name, damages in DAMAGE.items() for damage in damages])
def test_recover_plans_over_any_damaged_file_naming_it(settings, name, damage):
    """recover is the way out of a damaged checkpoint: whatever a file holds, its plan (with
    --force) names the damage and moves it aside, with no traceback."""
    from spark_jobs.ops import restart
    from tests.helpers import committed_checkpoint

    committed_checkpoint(settings, "sessions", read_to=10, identity={"app_id": "sigflow-sessions-0123456789ab",
                                                                    "checkpoint_id": "sigflow-sessions-0123456789ab"})
    folder = Path(settings.checkpoint_uri("sessions"))
    (folder / "metadata").write_text('{"id":"q"}')
    (folder / name).write_bytes(damage)
    checkpoint = Checkpoint(str(folder))
    problems = checkpoint.problems()
    assert any(problem.startswith(name) for problem in problems), problems
    plan = restart.plan_recover(settings, "sessions", recover_from="earliest", force=True)
    assert not plan.refusals, plan.describe()
    assert plan.steps[0].startswith("move the old checkpoint aside") and all(p in plan.steps[0] for p in problems)


def test_recover_over_a_damaged_checkpoint_prints_its_plan_without_a_traceback(settings):
    from tests.helpers import committed_checkpoint, sigflow

    committed_checkpoint(settings, "sessions", read_to=10)
    folder = Path(settings.checkpoint_uri("sessions"))
    (folder / "commits" / "0").write_bytes(b"\xff\xfe")
    (folder / "offsets" / "0").write_text('v1\n{"batchWatermarkMs": {}}\n{"t":{"0":5}}')
    printed = sigflow(settings, "checkpoint", "recover", "sessions", "--from", "earliest", "--force")
    assert printed.returncode == 0 and "Traceback" not in printed.stderr + printed.stdout, printed.stderr[-2000:]
    assert "offsets/0 is truncated or not the offsets Spark writes" in printed.stdout
    assert "commits/0 is not text (UTF-8)" in printed.stdout


def test_a_run_from_a_damaged_offset_log_is_refused_naming_the_jobs_fix(tmp_path):
    """Spark failed the query on a truncated offset log entry with its JSON parser's error
    and "see the log above"; the run is refused before it starts, naming the recover."""
    from spark_jobs.config import load_settings
    from tests.helpers import committed_checkpoint, sigflow

    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "kafka_bootstrap_servers": "127.0.0.1:1"})
    committed_checkpoint(s, "sessions", read_to=10)
    (Path(s.checkpoint_uri("sessions")) / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":')
    refused = sigflow(s, "run", "sessions")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"sigflow: error: sessions: {s.checkpoint_uri('sessions')}/offsets/0 is truncated or not the offsets Spark writes",
        "sigflow: hint: rebuild the checkpoint: `sigflow checkpoint recover sessions --force` plans it "
        "(docs/runbooks/checkpoint-lost-or-corrupt.md)"], refused.stderr


def test_status_says_whose_checkpoint_is_damaged_and_answers_for_every_other_job(tmp_path):
    """One job's damaged offset log failed `sigflow status` as a whole: on-call saw none of the
    other jobs, and the Prometheus exporter, which asks the same, none either."""
    from spark_jobs.config import load_settings
    from spark_jobs.jobs.registry import ALL_JOBS
    from spark_jobs.ops import prometheus
    from tests.helpers import committed_checkpoint, sigflow

    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "kafka_bootstrap_servers": "127.0.0.1:1"})
    committed_checkpoint(s, "sessions", read_to=10)
    (Path(s.checkpoint_uri("sessions")) / "offsets" / "0").write_bytes(b"\xff\xfe")
    shown = sigflow(s, "status")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = lines.index("sessions: DAMAGED")
    block = lines[at + 1:next(i for i in range(at + 1, len(lines) + 1) if i == len(lines) or not lines[i][:1].isspace())]
    assert block[0] == "  offsets/0 is not text (UTF-8): its checkpoint cannot be read", block
    assert block[-1] == "  next: `sigflow checkpoint recover sessions --force` plans it " \
                        "(docs/runbooks/checkpoint-lost-or-corrupt.md)", block
    assert [line.split(":")[0] for line in lines if not line.startswith(" ")] == list(ALL_JOBS)
    assert 'sigflow_job_status{sigflow_job="sessions",status="DAMAGED"} 1.0' in prometheus.exposition(s)


def test_an_offset_log_entry_that_fails_its_checksum_stops_the_run_naming_the_jobs_fix(spark, settings):
    """An entry still JSON but not what Spark wrote (a flipped digit): Spark's checksum
    refuses it, and the run ended in "job dedup failed: [STREAM_FAILED] ... Checksum error"
    and "see the log above"."""
    from spark_jobs.errors import CheckpointDamaged
    from spark_jobs.local.simulate import generate_events
    from tests.helpers import produce, run_job

    produce(settings, generate_events(20, seed=3, late_ratio=0.0, malformed_ratio=0.0))
    run_job(spark, settings, "dedup")
    folder = Path(settings.checkpoint_uri("dedup"))
    last = folder / "offsets" / str(Checkpoint(str(folder)).offset_batches()[-1])
    last.write_text(last.read_text().replace('"batchTimestampMs":1', '"batchTimestampMs":2', 1))
    with pytest.raises(CheckpointDamaged) as stopped:
        run_job(spark, settings, "dedup")
    assert stopped.value.message == (f"job dedup stopped: {last.resolve()} does not match its checksum (.crc): "
                                     "its checkpoint is damaged")
    assert "`sigflow checkpoint recover dedup --force`" in stopped.value.hint


def test_state_the_run_cannot_load_stops_it_saying_so_and_what_to_do(spark, settings):
    """A state file cut short (its checksum file gone with its end): the run ended in "job
    dedup failed: py4j.protocol.Py4JJavaError: An error occurred while calling
    o640.executeTake." under 500 lines of Spark's log."""
    from spark_jobs.errors import CheckpointDamaged
    from spark_jobs.local.simulate import generate_events
    from tests.helpers import produce, run_job

    produce(settings, generate_events(20, seed=4, late_ratio=0.0, malformed_ratio=0.0))
    run_job(spark, settings, "dedup")
    partition = Path(settings.checkpoint_uri("dedup")) / "state" / "0" / "0"
    newest = max(partition.glob("*.delta"), key=lambda path: int(path.stem))
    newest.write_bytes(newest.read_bytes()[:7])
    (partition / f".{newest.name}.crc").unlink()
    produce(settings, generate_events(20, seed=5, late_ratio=0.0, malformed_ratio=0.0))  # a batch to run
    with pytest.raises(CheckpointDamaged) as stopped:
        run_job(spark, settings, "dedup")
    assert stopped.value.message.startswith("job dedup stopped: its state in the checkpoint could not be loaded "
                                            "([CANNOT_LOAD_STATE_STORE"), stopped.value.message
    assert stopped.value.message.endswith("; caused by java.io.EOFException)"), stopped.value.message
    assert "`sigflow checkpoint recover dedup --force`" in stopped.value.hint
