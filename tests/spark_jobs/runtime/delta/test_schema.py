"""Jobs started at once create the tables they share: one creates, the others wait for its
first commit; a location that holds files but never becomes a table is refused with one
clear line, by either writer. A run creates its tables (by delta-rs) while its query starts, and no batch
writes before they exist."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from spark_jobs.contracts.tables import (
    DEVICE_EVENTS,
    DEVICE_EVENTS_RAW,
    DEVICE_STATUS,
    KEY_CONSTRAINT,
    LATE_EVENTS,
    PIPELINE_METRICS,
)
from spark_jobs.errors import SigflowError
from spark_jobs.jobs.ingest import INGEST
from spark_jobs.local.simulate import generate_events
from spark_jobs.runtime.delta import properties, schema, table_access
from spark_jobs.runtime.delta.sink import DeltaSink
from spark_jobs.runtime.metrics.progress import query_name
from tests.helpers import another_commit_after_the_first_read, produce, run_job, table


def _creation_under_way(uri) -> None:
    """What another job's creation leaves before its first commit lands: the table's log
    directory, holding the commit it is writing under a temporary name."""
    log = uri / "_delta_log"
    log.mkdir(parents=True)
    (log / ".00000000000000000000.json.b5c1f0e2.tmp").write_text("{}")


def _copys_data_file(uri) -> None:
    """A data file a copy made by hand left where no table is: a table made beside it would
    not hold it, and a vacuum of that table would delete it."""
    uri.mkdir(parents=True)
    (uri / "part-00000-0f3a.c000.snappy.parquet").write_bytes(b"PAR1")


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
    assert [entry["operation"] for entry in table_access.open_table(str(uri)).history()].count("CREATE TABLE") == 1
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


def test_delta_rs_refuses_a_copys_data_file_and_creates_over_a_creation_cut_off(tmp_path, monkeypatch):
    """delta-rs itself would make a table beside any file: sigflow refuses a location with a
    data file in it, as Spark's CREATE TABLE does, and creates over what a creation cut off
    left in the log (a temporary commit), as delta-rs did before."""
    monkeypatch.setattr(schema, "CREATOR_WAIT_S", 1.0)
    copied, cut_off = tmp_path / "copied" / "late_events", tmp_path / "cut_off" / "late_events"
    _copys_data_file(copied)
    _creation_under_way(cut_off)

    with pytest.raises(SigflowError) as refused:
        schema.create_table(str(copied), LATE_EVENTS)
    assert refused.value.message.startswith(f"table late_events cannot be created at {copied}")
    assert "move them aside" in refused.value.hint
    assert not table_access.exists(str(copied))
    assert schema.create_table(str(cut_off), LATE_EVENTS) == "created"


def test_a_migration_whose_property_commit_loses_to_another_drivers_sets_what_the_table_still_lacks(
        tmp_path, settings, monkeypatch):
    """Drivers starting at once migrate one table at once. Another driver's property commit
    lands between this migration's read of the table and its own commit (a creator setting
    the table's own properties after its version 0): this migration's commit fails, and is
    made again with what the table as it then is still lacks."""
    uri = str(tmp_path / LATE_EVENTS.name)
    table_access.create(uri, schema.commented_arrow_schema(LATE_EVENTS), None, {}, LATE_EVENTS.description)
    another_commit_after_the_first_read(monkeypatch, lambda: table_access.set_properties(uri, LATE_EVENTS.properties))
    retention = properties.follower_properties(settings)

    said = schema.migrate_table(uri, LATE_EVENTS, retention)

    assert all(f"set {key}={value}" in said for key, value in retention.items()), said
    configuration = table_access.open_table(uri).metadata().configuration
    assert {**LATE_EVENTS.properties, **retention}.items() <= configuration.items()


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

    assert failed == [] and said.count("created") == 1 and len(said) == 6, " | ".join(s[:50] for s in said)
    assert sum("added constraint" in line for line in said) <= 1  # said only by the driver that added it
    table = table_access.open_table(settings.table_uri(spec.name))
    assert [entry["operation"] for entry in table.history()].count("CREATE TABLE") == 1
    assert table.schema().to_arrow().names == list(spec.columns)
    configuration = table.metadata().configuration
    assert configuration["delta.checkpointInterval"] == str(spec.checkpoint_interval) == "10"
    assert f"delta.constraints.{KEY_CONSTRAINT.lower()}" in {key.lower() for key in configuration}
    assert spark.read.format("delta").load(settings.table_uri(spec.name)).count() == 0


def test_a_run_whose_table_is_created_slowly_writes_its_first_batch_into_that_table_once_created(
        spark, settings, monkeypatch):
    """A run creates its tables while its query starts: a first batch ready to write before
    one of its tables exists waits for that creation, instead of letting its Spark append
    create a table without the key constraint and properties sigflow declares."""
    records = generate_events(40, seed=21, malformed_ratio=0)
    produce(settings, records)
    uri = Path(settings.table_uri(DEVICE_EVENTS.name))
    batch_split = threading.Event()

    def split(*args):
        tables = INGEST.split(*args)
        batch_split.set()
        return tables

    create = schema._create_with_delta_rs

    def slowly(location, spec, properties) -> None:  # lands only once the batch is ready to write
        if spec.name == DEVICE_EVENTS.name:
            batch_split.wait(120)
            time.sleep(5.0)  # a batch that did not wait would have written meanwhile
        create(location, spec, properties)

    monkeypatch.setattr(schema, "_create_with_delta_rs", slowly)
    try:
        run_job(spark, settings, dataclasses.replace(INGEST, split=split))
    finally:
        batch_split.set()

    events = table_access.open_table(str(uri))
    assert [entry["operation"] for entry in sorted(events.history(), key=lambda e: e["version"])][0] == "CREATE TABLE"
    assert f"delta.constraints.{KEY_CONSTRAINT.lower()}" in {key.lower() for key in events.metadata().configuration}
    assert sorted(table(settings, DEVICE_EVENTS.name)["event_id"]) == sorted(json.loads(r.value)["event_id"] for r in records)


def test_a_run_whose_table_cannot_be_created_stops_with_one_line_and_writes_nothing(spark, settings, monkeypatch):
    """The creation's refusal is the run's error, raised once its query has stopped: no
    batch of it wrote a row, its lease is free, and once the location is cleared the next
    run writes every record once."""
    monkeypatch.setattr(schema, "CREATOR_WAIT_S", 1.0)
    records = generate_events(40, seed=22, malformed_ratio=0)
    produce(settings, records)
    blocked = Path(settings.table_uri(DEVICE_EVENTS.name))
    _copys_data_file(blocked)

    with pytest.raises(SigflowError, match=f"table {DEVICE_EVENTS.name} cannot be created") as refused:
        run_job(spark, settings, "ingest")

    assert "move them aside" in refused.value.hint
    assert query_name("ingest") not in {query.name for query in spark.streams.active}
    assert len(table(settings, DEVICE_EVENTS_RAW.name)) == 0  # created beside it, written to by no batch
    shutil.rmtree(blocked)
    run_job(spark, settings, "ingest")  # refused while another run of ingest holds the lease
    raw = Counter(bytes(value) for value in table(settings, DEVICE_EVENTS_RAW.name)["value"])
    assert raw == Counter(r.value for r in records)
    assert len(table(settings, DEVICE_EVENTS.name)) == len(records)
