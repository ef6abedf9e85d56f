"""Jobs started at once create the tables they share: one creates, the others wait for its
first commit; a location that never becomes a table is refused with one clear line. A table
only drivers commit to is created by delta-rs, one Spark appends to by Spark."""

from __future__ import annotations

import threading

import pytest

from spark_jobs.contracts.tables import (
    DEVICE_STATUS,
    KEY_CONSTRAINT,
    LATE_EVENTS,
    PIPELINE_METRICS,
)
from spark_jobs.errors import SigflowError
from spark_jobs.runtime.delta import schema, table_access
from spark_jobs.runtime.delta.sink import DeltaSink


def _creation_under_way(uri) -> None:
    """What another job's creation leaves before its first commit lands: the table's log
    directory, holding the commit it is writing under a temporary name."""
    log = uri / "_delta_log"
    log.mkdir(parents=True)
    (log / ".00000000000000000000.json.b5c1f0e2.tmp").write_text("{}")


def test_a_job_finding_a_table_mid_creation_waits_for_its_first_commit(spark, tmp_path):
    uri = tmp_path / "late_events"
    _creation_under_way(uri)
    other_job = threading.Timer(2.0, schema.create_table, (str(uri), LATE_EVENTS))
    other_job.start()
    try:
        schema.ensure_with_spark(spark, str(uri), LATE_EVENTS)
    finally:
        other_job.join()
    assert table_access.exists(str(uri))
    assert set(spark.read.format("delta").load(str(uri)).columns) == set(LATE_EVENTS.schema.fieldNames())


def test_a_location_holding_files_but_no_table_is_refused_with_what_to_do(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(schema, "CREATOR_WAIT_S", 1.0)
    uri = tmp_path / "late_events"
    _creation_under_way(uri)

    with pytest.raises(SigflowError) as refused:
        schema.ensure_with_spark(spark, str(uri), LATE_EVENTS)

    assert refused.value.message.startswith(f"table late_events cannot be created at {uri}")
    assert "move them aside" in refused.value.hint
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("spec", [PIPELINE_METRICS, DEVICE_STATUS], ids=lambda spec: spec.name)
def test_six_drivers_creating_a_table_only_drivers_commit_to_make_one_whole_table(spark, settings, spec):
    """The one-application-per-job shape: six drivers start at once and each ensures
    the table (delta-rs creates it). One creates it; the others find it and go on.
    delta-rs retried a losing creation at the next version: a second CREATE TABLE; the
    losers' key constraint lost to the creator's property commit (device_status)."""
    start, said, failed = threading.Barrier(6), [], []

    def driver() -> None:
        start.wait()
        try:
            said.append(DeltaSink(spark, settings).ensure_table(spec))
        except Exception as exc:  # noqa: BLE001 - the assertion below names it
            failed.append(exc)

    drivers = [threading.Thread(target=driver) for _ in range(6)]
    for thread in drivers:
        thread.start()
    for thread in drivers:
        thread.join()

    assert failed == [] and said.count("created") == 1 and len(said) == 6
    assert sum("added constraint" in line for line in said) <= 1  # said only by the driver that added it
    table = table_access.open_table(settings.table_uri(spec.name))
    assert [entry["operation"] for entry in table.history()].count("CREATE TABLE") == 1
    assert table.schema().to_arrow().names == list(spec.columns)
    configuration = table.metadata().configuration
    assert configuration["delta.checkpointInterval"] == str(spec.checkpoint_interval) == "10"
    assert f"delta.constraints.{KEY_CONSTRAINT.lower()}" in {key.lower() for key in configuration}
    assert spark.read.format("delta").load(settings.table_uri(spec.name)).count() == 0
