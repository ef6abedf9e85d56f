"""The Delta sink: tables created and migrated, each batch written exactly once."""

from operator import itemgetter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_jobs.contracts.tables import (
    ALL_TABLES,
    DEVICE_SIGNAL_AVERAGES,
    LATE_EVENTS,
    LATE_EVENTS_RECONCILED,
    QUARANTINED_EVENTS,
    TABLE_STATUS,
    TableSpec,
)
from spark_jobs.local.simulate import generate_events
from spark_jobs.runtime.delta.commit_info import CommitInfo
from spark_jobs.runtime.delta.schema import (
    arrow_schema,
    create_table,
    ensure_with_spark,
)
from spark_jobs.runtime.delta.sink import DeltaSink
from spark_jobs.runtime.delta.table_access import (
    commit_metadata,
    count_matching,
    read_arrow,
    read_pandas,
)
from tests.helpers import produce, run_job

READINGS = TableSpec("readings", "device_id STRING, value DOUBLE", "test table")


def test_table_is_created_empty_with_its_schema(spark, settings):
    sink = DeltaSink(spark, settings)
    assert sink.ensure_table(READINGS) == "created"
    assert sink.ensure_table(READINGS) == "exists"
    table = DeltaTable(settings.table_uri("readings"))
    assert [f.name for f in table.schema().fields] == ["device_id", "value"]
    assert count_matching(table.table_uri) == 0


def _info(app_id: str, batch_id: int) -> CommitInfo:
    return CommitInfo(job="readings-writer", app_id=app_id, batch_id=batch_id)


def _checkpoints(uri: str) -> list[str]:
    return sorted(p.name for p in (Path(uri) / "_delta_log").glob("*.checkpoint*.parquet"))


def test_sigflow_tables_take_a_delta_checkpoint_every_100_commits_not_every_10(spark, settings):
    """Delta's default writes a checkpoint inside every 10th commit; a sigflow table, made by
    either writer or migrated, goes to version 10 without one. An operator's own value stays."""
    sink = DeltaSink(spark, settings)
    sink.ensure_table(READINGS)
    plain_uri = settings.table_uri("readings_delta_default")
    write_deltalake(plain_uri, pa.Table.from_pylist([], schema=arrow_schema(READINGS)))
    row = spark.createDataFrame([("d1", 1.0)], READINGS.schema)
    for version in range(1, 11):
        sink.append(row, READINGS, _info("app", version), replay_possible=False)
        row.write.format("delta").mode("append").save(plain_uri)
    assert _checkpoints(plain_uri) == ["00000000000000000010.checkpoint.parquet"]
    assert _checkpoints(settings.table_uri("readings")) == []

    # the line says what the migration did; the columns get the dictionary's words too
    assert create_table(plain_uri, READINGS) == (
        "exists, set delta.checkpointInterval=100, set delta.enableChangeDataFeed=true, "
        "described 2 column(s) and the table")
    assert create_table(plain_uri, READINGS) == "exists"
    made_by_delta_rs = settings.table_uri("readings_by_delta_rs")
    assert create_table(made_by_delta_rs, READINGS) == "created"
    chosen_uri = settings.table_uri("readings_operator_chose")
    DeltaTable.create(chosen_uri, schema=arrow_schema(READINGS), configuration={"delta.checkpointInterval": "50"})
    assert create_table(chosen_uri, READINGS).startswith("exists, set delta.enableChangeDataFeed=true,")  # 50 stays
    assert {uri: DeltaTable(uri).metadata().configuration.get("delta.checkpointInterval")
            for uri in (plain_uri, made_by_delta_rs, chosen_uri)} == {
        plain_uri: "100", made_by_delta_rs: "100", chosen_uri: "50"}



DRIVER_ROWS = TableSpec("driver_rows", "batch_id BIGINT, value DOUBLE", "test table", driver_commits=True)


def test_a_table_drivers_commit_to_each_batch_checkpoints_every_10_commits_and_sigflows_former_100_moves(
        spark, settings):
    """A table whose every commit is a driver's few rows (pipeline_metrics, table_status) is
    read whole at each commit's start: it checkpoints every 10 commits. A table sigflow made
    with its former interval for every table moves to the table's own; an operator's stays."""
    sink = DeltaSink(spark, settings)
    made = settings.table_uri("driver_rows")
    assert create_table(made, DRIVER_ROWS) == "created"
    for batch in range(1, 11):
        assert sink.append_unwritten([{"batch_id": batch, "value": 1.0}], DRIVER_ROWS, "app", _info("app", batch),
                                     itemgetter("batch_id")) == 1
    assert DeltaTable(made).version() == 10
    assert len(_checkpoints(made)) == 1  # delta-rs writes it with the commit before a multiple of 10

    former, chosen = settings.table_uri("table_status_former"), settings.table_uri("table_status_chosen")
    for uri, interval in ((former, "100"), (chosen, "50")):
        DeltaTable.create(uri, schema=arrow_schema(TABLE_STATUS),
                          configuration={"delta.checkpointInterval": interval, "delta.enableChangeDataFeed": "true"})
    assert create_table(former, TABLE_STATUS).startswith("exists, set delta.checkpointInterval=10,")
    assert not create_table(chosen, TABLE_STATUS).startswith("exists, set delta.checkpointInterval")
    assert {uri: DeltaTable(uri).metadata().configuration["delta.checkpointInterval"] for uri in (former, chosen)} == {
        former: "10", chosen: "50"}


def test_a_replayed_batch_is_written_once(spark, settings):
    sink = DeltaSink(spark, settings)
    sink.ensure_table(READINGS)
    batch = spark.createDataFrame([("d1", 1.0), ("d2", 2.0)], READINGS.schema)
    assert sink.append(batch, READINGS, _info("app-a", 0)) == 2
    assert sink.append(batch, READINGS, _info("app-a", 0)) is None
    assert sink.append(batch, READINGS, _info("app-b", 0)) == 2  # another checkpoint
    assert count_matching(settings.table_uri("readings")) == 4
    assert sink.committed_version(READINGS, "app-a") == 0
    assert [m["batch_id"] for m in commit_metadata(settings.table_uri("readings"))] == [0, 0]


def test_a_batch_appended_without_a_transaction_is_found_by_a_later_runs_replay_check(spark, settings):
    """A batch its own run planned is appended without Delta's transaction lookup; when a
    later run replays it, the check finds it in the commit metadata, behind other writers'
    commits too (a shared table), and the batch after it is still written."""
    sink = DeltaSink(spark, settings)
    sink.ensure_table(READINGS)
    batch = spark.createDataFrame([("d1", 1.0), ("d2", 2.0)], READINGS.schema)

    assert sink.append(batch, READINGS, _info("app-a", 0), replay_possible=False) == 2
    assert sink.append(batch, READINGS, _info("app-a", 1), replay_possible=False) == 2
    assert sink.append(batch, READINGS, _info("app-b", 5), replay_possible=False) == 2
    assert sink.committed_version(READINGS, "app-a") is None  # no transaction recorded
    assert sink.append(batch, READINGS, _info("app-a", 1)) is None  # the replay
    assert sink.append(batch, READINGS, _info("app-a", 2)) == 2
    assert count_matching(settings.table_uri("readings")) == 8


def test_delta_spark_itself_skips_a_transaction_it_already_holds(spark, settings):
    """The guard is Delta's own: a replay that bypasses sigflow's pre-check writes nothing."""
    sink = DeltaSink(spark, settings)
    sink.ensure_table(READINGS)
    batch = spark.createDataFrame([("d1", 1.0)], READINGS.schema)
    def attempt(batch_id: int, attempt_number: int) -> CommitInfo:  # each attempt's metadata its own
        return CommitInfo(job="readings-writer", app_id="app", batch_id=batch_id, watermark_ms=attempt_number)

    assert sink._append(batch, READINGS, attempt(3, 1), transaction=True) == 1
    assert sink._append(batch, READINGS, attempt(3, 2), transaction=True) is None  # the replay
    assert sink._append(batch, READINGS, attempt(2, 3), transaction=True) is None  # an older batch
    assert count_matching(settings.table_uri("readings")) == 1


BATCH_ROWS = TableSpec("batch_rows", "batch_id BIGINT, value DOUBLE", "test table of per-batch rows")


def test_rows_offered_again_after_a_restart_are_written_once_each(spark, settings):
    """A run's recorder offers the rows of every batch whose progress it holds; after a
    restart that includes batches an earlier run wrote. Only those past the table's
    transaction are appended, once, under the newest of them."""
    sink = DeltaSink(spark, settings)
    sink.ensure_table(BATCH_ROWS)
    batch = itemgetter("batch_id")

    def rows(*batches):
        return [{"batch_id": b, "value": float(b)} for b in batches]

    assert sink.append_unwritten(rows(0, 1, 2), BATCH_ROWS, "app", _info("app", 2), batch) == 3
    assert sink.append_unwritten(rows(1, 2, 3, 4), BATCH_ROWS, "app", _info("app", 4), batch) == 2
    assert sink.append_unwritten(rows(3, 4), BATCH_ROWS, "app", _info("app", 4), batch) is None
    assert sink.committed_version(BATCH_ROWS, "app") == 4
    assert sink.append_unwritten(rows(0, 1), BATCH_ROWS, "other", _info("other", 1), batch) == 2  # another app's own
    written = read_arrow(settings.table_uri("batch_rows"))
    assert sorted(written["batch_id"].to_pylist()) == [0, 0, 1, 1, 2, 3, 4]


def test_driver_rows_are_written_once_per_transaction_and_both_engines_see_each_others(spark, settings):
    """delta-rs appends to a table delta-spark created and writes to: one transaction per
    (app id, version) across both writers, and Spark reads every row."""
    sink = DeltaSink(spark, settings)
    sink.ensure_table(READINGS)
    assert sink.append(spark.createDataFrame([("d1", 1.0)], READINGS.schema), READINGS, _info("app", 0)) == 1
    rows = [{"device_id": "d2", "value": 2.0}, {"device_id": "d3", "value": 3.0}]
    assert sink.append_unwritten(rows, READINGS, "app", _info("app", 0), lambda row: 0) is None  # Spark's commit holds 0
    assert sink.append_unwritten(rows, READINGS, "app", _info("app", 1), lambda row: 1) == 2
    assert sink.append_unwritten(rows, READINGS, "app", _info("app", 1), lambda row: 1) is None  # the replay
    assert sink.committed_version(READINGS, "app") == 1
    assert sink.append(spark.createDataFrame([("d4", 4.0)], READINGS.schema), READINGS, _info("app", 1)) is None
    read_by_spark = spark.read.format("delta").load(settings.table_uri("readings"))
    assert sorted(r.device_id for r in read_by_spark.collect()) == ["d1", "d2", "d3"]
    assert [m["batch_id"] for m in commit_metadata(settings.table_uri("readings"))] == [1, 0]


def test_rows_the_driver_holds_are_appended_once_per_batch_whichever_writer_came_first(spark, settings):
    """A batch's late events, collected: appended once per (app id, batch id), found by a
    replay whether the first attempt went through delta-rs, with or without the transaction,
    or through Spark; a batch of none makes no commit."""
    sink = DeltaSink(spark, settings)
    sink.ensure_table(READINGS)
    uri = settings.table_uri("readings")
    rows = pa.table({"value": [1.0, 2.0], "device_id": ["d1", "d2"]})  # the writer's column order
    assert sink.append_held(rows, READINGS, _info("app", 0), replay_possible=False) == 2
    assert sink.append_held(rows, READINGS, _info("app", 0)) is None  # replayed after a run planned it
    assert sink.append_held(rows, READINGS, _info("app", 1)) == 2  # planned by an earlier query
    assert sink.append_held(rows, READINGS, _info("app", 1)) is None
    assert sink.append(spark.createDataFrame([("d3", 3.0)], READINGS.schema), READINGS, _info("app", 2),
                       replay_possible=False) == 1
    assert sink.append_held(rows, READINGS, _info("app", 2)) is None  # Spark wrote it first
    version = DeltaTable(uri).version()
    assert sink.append_held(rows.slice(0, 0), READINGS, _info("app", 3)) == 0
    assert DeltaTable(uri).version() == version
    assert sorted(r.device_id for r in spark.read.format("delta").load(uri).collect()) == [
        "d1", "d1", "d2", "d2", "d3"]
    assert [m["batch_id"] for m in commit_metadata(uri)] == [2, 1, 0]


def test_a_column_added_to_the_spec_is_added_to_the_table_and_backfilled(spark, settings):
    sink = DeltaSink(spark, settings)
    sink.ensure_table(READINGS)
    sink.append(spark.createDataFrame([("d1", 1.0), ("d2", -3.0)], READINGS.schema), READINGS, _info("app", 0))
    grown = TableSpec("readings", "sign STRING, device_id STRING, value DOUBLE", "test table",
                      backfill=(("sign", "CASE WHEN value < 0 THEN 'negative' ELSE 'positive' END"),))

    assert sink.ensure_table(grown) == "exists, added column(s) sign, 2 rows filled"
    assert sink.ensure_table(grown) == "exists"
    # the writer appends in the spec's column order to a table that has the column last
    sink.append(spark.createDataFrame([("positive", "d3", 5.0)], grown.schema), grown, _info("app", 1))
    rows = read_pandas(settings.table_uri("readings")).sort_values("device_id")
    assert rows[["device_id", "sign"]].values.tolist() == [["d1", "positive"], ["d2", "negative"], ["d3", "positive"]]


def test_quarantined_rows_from_before_reason_codes_get_the_code_their_detail_names(spark, settings):
    """Tables written before reason_code existed: adding the column fills it from the reason
    text, and each row gets the code the event contract gives that record today."""
    produce(settings, generate_events(400, seed=11, malformed_ratio=0.5))
    run_job(spark, settings, "ingest")
    today = read_pandas(settings.table_uri("quarantined_events"))
    assert today.reason_code.nunique() >= 6

    old_uri = settings.table_uri("quarantined_events_before_codes")
    old_layout = TableSpec("old", QUARANTINED_EVENTS.ddl.replace("reason_code STRING, ", "")
                           .replace("job STRING, ", "", 1).replace("device_id STRING, ", ""), "before codes")
    write_deltalake(old_uri, pa.Table.from_pandas(today.drop(columns=["reason_code", "job", "device_id"]),
                                                  preserve_index=False).cast(arrow_schema(old_layout)))

    assert create_table(old_uri, QUARANTINED_EVENTS) == (
        f"exists, set delta.checkpointInterval=100, set delta.enableChangeDataFeed=true, added column(s) "
        f"reason_code, job, device_id, {len(today)} rows filled, added constraint key_not_null, "
        f"described {len(QUARANTINED_EVENTS.columns)} column(s) and the table")
    migrated = read_pandas(old_uri)
    assert set(migrated.job) == {"ingest"}  # the job that read them, from source_job
    by_offset = ["topic", "partition", "offset"]
    assert (migrated.sort_values(by_offset).reason_code.tolist() == today.sort_values(by_offset).reason_code.tolist())


def test_driver_rows_appended_while_another_writer_deletes_rows_are_all_committed_once(spark, settings):
    """pipeline_metrics has several writers: a rewind deletes one job's rows while other jobs
    append theirs. Every append lands, once, whatever the deletes between its read and its
    commit (delta-rs fails such an append; the sink tries it again)."""
    import threading

    sink = DeltaSink(spark, settings)
    sink.ensure_table(READINGS)
    uri = settings.table_uri("readings")
    stop, deletes = threading.Event(), []

    def rewinds() -> None:  # another job's rows added, then deleted, over and over
        while not stop.is_set():
            write_deltalake(uri, pa.table({"device_id": ["other"], "value": [0.0]}), mode="append")
            DeltaTable(uri).delete("device_id = 'other'")
            deletes.append(1)
            stop.wait(0.1)

    deleting = threading.Thread(target=rewinds)
    deleting.start()
    try:
        written = [sink.append_unwritten([{"device_id": "mine", "value": float(v)}], READINGS, "app", _info("app", v), lambda row: v)
                   for v in range(25)]
    finally:
        stop.set()
        deleting.join(timeout=60)
    assert deletes  # deletes came while the appends ran
    assert written == [1] * 25
    rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
    assert sorted(r["value"] for r in rows if r["device_id"] == "mine") == [float(v) for v in range(25)]


@pytest.mark.parametrize("metadata", [
    "manual fix, see ticket", "null", "[]", '{"sigflow": {"job": "ingest", "batch_id": "seven"}}',
    '{"sigflow": {"job": "ingest", "batch_id": -1}}', '{"sigflow": {"batch_id": 3}}',
    '{"sigflow": {"job": "ingest", "kafka_end_offsets": {"events": {"0": "end"}}}}'])
def test_a_commit_whose_metadata_is_not_a_sigflow_record_is_not_a_sigflow_commit(metadata):
    """Parsed in one place: free text, the wrong shape, a batch id that is no batch id, or
    offsets that are no offsets make no record (the replay check, recover and lineage then
    see no sigflow commit), never a crash or a wrong batch further on."""
    assert CommitInfo.parse(metadata) is None
    written = CommitInfo(job="ingest", app_id="a1", batch_id=3, watermark_ms=0, kafka_end_offsets={"t": {"0": 5}})
    assert CommitInfo.parse(written.user_metadata()) == written


def _key_constraint(uri: str) -> str | None:
    return DeltaTable(uri).metadata().configuration.get("delta.constraints.key_not_null")


def test_no_writer_can_leave_a_tables_key_null(spark, settings):
    """Every table, made by either writer, refuses a row without its key: Spark's append of
    a window with no kind, delta-rs's append of a status row with no table name."""
    averages = settings.table_uri(DEVICE_SIGNAL_AVERAGES.name)
    assert ensure_with_spark(spark, averages, DEVICE_SIGNAL_AVERAGES) == "created"  # by Spark (reconcile's)
    assert DeltaTable(averages).version() == 0  # the constraint in the creating commit
    for name, spec in ALL_TABLES.items():
        if name != DEVICE_SIGNAL_AVERAGES.name:
            assert create_table(settings.table_uri(name), spec) == "created"  # by delta-rs
        constraint = (_key_constraint(settings.table_uri(name)) or "").replace("`", "")  # delta-rs drops them
        assert all(f"{column} IS NOT NULL" in constraint for column in spec.required), name

    window = {"device_id": "d1", "window_start": "2026-01-01 00:00:00", "window_end": "2026-01-01 00:01:00",
              "window_kind": None, "event_count": 1, "revision": 0}
    columns = ", ".join(f"{value!r} AS {column}" if value is not None else f"CAST(NULL AS STRING) AS {column}"
                        for column, value in window.items())
    row = spark.sql(f"SELECT {columns}").selectExpr(
        *(f"CAST({f.name} AS {f.dataType.simpleString()}) AS {f.name}" if f.name in window
          else f"CAST(NULL AS {f.dataType.simpleString()}) AS {f.name}" for f in DEVICE_SIGNAL_AVERAGES.schema))
    with pytest.raises(Exception, match="key_not_null"):
        row.write.format("delta").mode("append").save(averages)
    row.fillna({"window_kind": "tumbling"}).write.format("delta").mode("append").save(averages)

    status = settings.table_uri(TABLE_STATUS.name)
    no_name = pa.Table.from_pylist([{"job": "ingest", "checkpoint_id": "c", "batch_id": 3}],
                                   schema=arrow_schema(TABLE_STATUS))
    with pytest.raises(Exception, match="failed validation"):
        write_deltalake(status, no_name, mode="append")
    assert count_matching(status) == 0 and count_matching(averages) == 1


def test_a_table_made_before_keys_were_constrained_gets_the_constraint_unless_a_row_breaks_it(settings):
    """Migration adds the constraint after Delta has checked every row; a table already
    holding a null key is left without it, keeps every row, and the line says why."""
    spec = TABLE_STATUS
    rows = [{"table_name": "device_events", "job": "ingest", "checkpoint_id": "c", "batch_id": 1}]
    clean, broken = settings.table_uri("status_clean"), settings.table_uri("status_broken")
    write_deltalake(clean, pa.Table.from_pylist(rows, schema=arrow_schema(spec)))
    write_deltalake(broken, pa.Table.from_pylist(rows + [{"job": "ingest", "batch_id": 2}], schema=arrow_schema(spec)))

    assert ", added constraint key_not_null" in create_table(clean, spec)
    assert create_table(clean, spec) == "exists"
    assert ", key constraint not added: 1 row(s) with a null key in " + ", ".join(spec.required) in \
        create_table(broken, spec)
    assert _key_constraint(broken) is None and count_matching(broken) == 2


def test_late_rows_from_before_record_kind_say_whether_an_event_or_an_alert_was_dropped(settings):
    """An alert's late row has no signal (every valid event has one): that is what the
    migration tells them apart by, in both late tables."""
    for spec in (LATE_EVENTS, LATE_EVENTS_RECONCILED):
        old_layout = TableSpec("old", spec.ddl.replace("record_kind STRING, ", ""), "before record_kind")
        rows = [{"job": "alert-join", "event_id": "e1", "signal": 2.5, "topic": "t", "partition": 0, "offset": 1},
                {"job": "alert-join", "event_id": "a1", "signal": None, "topic": "t", "partition": 0, "offset": 2}]
        uri = settings.table_uri(f"{spec.name}_before_kinds")
        write_deltalake(uri, pa.Table.from_pylist(rows, schema=arrow_schema(old_layout)))
        assert "added column(s) record_kind, 2 rows filled, added constraint key_not_null" in create_table(uri, spec)
        migrated = read_pandas(uri).sort_values("offset")
        assert migrated.record_kind.tolist() == ["event", "alert"], spec.name
