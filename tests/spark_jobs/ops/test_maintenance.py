"""Maintenance compacts, vacuums and prunes without changing what the tables hold."""

from datetime import datetime, timezone

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_jobs.contracts.tables import QUARANTINED_EVENTS
from spark_jobs.errors import ConfigError
from spark_jobs.local.simulate import generate_events
from spark_jobs.ops import maintenance
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.delta.schema import arrow_schema
from tests.helpers import produce, run_job, table


def _contents(settings, name):
    frame = table(settings, name)
    return sorted(map(repr, frame.to_dict("records")))


def test_maintenance_compacts_and_vacuums_but_keeps_every_row(spark, settings):
    records = generate_events(400, seed=5, malformed_ratio=0.05)
    for start in range(0, 400, 100):  # four runs: several small files per table
        produce(settings, records[start:start + 100])
        run_job(spark, settings, "ingest")
    names = ["device_events_raw", "device_events", "quarantined_events", "pipeline_metrics"]
    before = {n: _contents(settings, n) for n in names}
    files_before = len(DeltaTable(settings.table_uri("device_events_raw")).file_uris())

    s = settings.replace(vacuum_retention="0 seconds", vacuum_retention_floor="0 seconds", checkpoint_batches_retained=2)
    assert maintenance.run(s, dry_run=True)[-1] == "dry run: nothing changed"
    assert len(DeltaTable(s.table_uri("device_events_raw")).file_uris()) == files_before
    lines = maintenance.run(s)

    assert {n: _contents(s, n) for n in names} == before
    assert len(DeltaTable(s.table_uri("device_events_raw")).file_uris()) < files_before
    assert any(line.startswith("device_events_raw:") and "vacuumed" in line for line in lines)
    assert len(Checkpoint(s.checkpoint_uri("ingest")).offset_batches()) == 2
    produce(s, generate_events(50, seed=6))
    run_job(spark, s, "ingest")  # the job still resumes from the pruned checkpoint
    assert len(table(s, "device_events_raw")) == 450


def test_a_vacuum_retention_under_its_floor_is_refused_and_hours_round_up_never_to_zero(settings):
    with pytest.raises(ConfigError, match="under its floor of 1 hour"):
        maintenance.run(settings.replace(vacuum_retention="30 minutes"))
    assert maintenance.vacuum_retention_hours(settings.replace(vacuum_retention="90 minutes")) == 2
    floorless = settings.replace(vacuum_retention_floor="0 seconds")
    assert maintenance.vacuum_retention_hours(floorless.replace(vacuum_retention="1 second")) == 1
    assert maintenance.vacuum_retention_hours(floorless.replace(vacuum_retention="0 seconds")) == 0


def test_quarantined_records_past_retention_are_deleted(spark, settings):
    produce(settings, [(b"k", b"not json")] * 3)
    run_job(spark, settings, "ingest")
    old = table(settings, "quarantined_events").iloc[:1].to_dict("records")
    old[0]["ingest_time"] = datetime(2020, 1, 1, tzinfo=timezone.utc)
    schema = arrow_schema(QUARANTINED_EVENTS)
    write_deltalake(settings.table_uri("quarantined_events"), pa.Table.from_pylist(old, schema=schema), mode="append")

    lines = maintenance.run(settings)
    assert any("1 rows past retention deleted" in line for line in lines)
    remaining = table(settings, "quarantined_events")
    assert len(remaining) == 3 and remaining.ingest_time.min().year > 2020


def test_table_status_rows_past_retention_are_deleted_but_each_tables_newest_stays(settings):
    """A job that last ran before the retention still says how complete its table is, also
    where another job writing the same table ran since."""
    from spark_jobs.contracts.tables import TABLE_STATUS

    now = datetime.now(timezone.utc)
    long_ago = datetime(2020, 1, 1, tzinfo=timezone.utc)

    def row(name: str, recorded_at: datetime, job: str = "j") -> dict:
        return {"table_name": name, "job": job, "checkpoint_id": "c", "batch_id": 0, "batch_time": recorded_at,
                "final_through": None, "rows_written": 1, "recorded_at": recorded_at}

    rows = [row("quiet", long_ago), row("quiet", datetime(2020, 1, 2, tzinfo=timezone.utc)),
            row("busy", long_ago), row("busy", now), row("it's", long_ago),
            row("shared", long_ago, "sessions"), row("shared", now, "ingest")]
    write_deltalake(settings.table_uri("table_status"), pa.Table.from_pylist(rows, schema=arrow_schema(TABLE_STATUS)))

    lines = maintenance.run(settings.replace(table_status_retention="30 days"))
    assert any(line.startswith("table_status:") and "2 rows past retention deleted" in line for line in lines), lines
    kept = table(settings, "table_status")
    assert sorted(zip(kept.table_name, kept.job, kept.recorded_at.dt.year)) == [
        ("busy", "j", now.year), ("it's", "j", 2020), ("quiet", "j", 2020),
        ("shared", "ingest", now.year), ("shared", "sessions", 2020)]
    assert kept[kept.table_name == "quiet"].recorded_at.dt.day.tolist() == [2]
