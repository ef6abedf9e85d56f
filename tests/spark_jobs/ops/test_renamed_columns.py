"""A renamed column keeps its former name readable: tables made before the rename get the new
column filled from the old, and every row the jobs write afterwards holds the value under
both names, in the table and in its change feed, until the date the table's comment states
(docs/consumers.md, "Renamed columns")."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from spark_jobs.contracts.tables import DEVICE_STATUS, QUARANTINED_EVENTS, TableSpec
from spark_jobs.runtime.delta.schema import arrow_schema, create_table
from tests.helpers import at, produce, run_job, send, single_partition_topics, table
from tests.oracle import Event


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


def _as_before(spec: TableSpec, ddl: str, rows: list[dict], uri: str) -> int:
    """The table as a release before the rename made it, with ``rows``: its version."""
    before = TableSpec(spec.name, ddl, spec.description, key=spec.key)
    create_table(uri, before)
    write_deltalake(uri, pa.Table.from_pylist(rows, schema=arrow_schema(before)), mode="append")
    return DeltaTable(uri).version()


def test_renamed_columns_are_readable_under_both_names_in_old_rows_new_rows_and_the_change_feed(spark, settings):
    s = single_partition_topics(settings)
    status_before = (DEVICE_STATUS.ddl.replace(", session_last_event_time TIMESTAMP", "")
                     .replace("session_end TIMESTAMP", "session_last_event_time TIMESTAMP"))
    status_version = _as_before(DEVICE_STATUS, status_before, [
        {"device_id": "d1", "session_start": _utc(at(11, 0)), "session_last_event_time": _utc(at(11, 10)),
         "session_event_count": 2, "session_avg_signal": 1.0, "session_closed": True}], s.table_uri("device_status"))
    quarantine_before = QUARANTINED_EVENTS.ddl.replace("device_id STRING, ", "")
    quarantine_version = _as_before(QUARANTINED_EVENTS, quarantine_before, [
        {"reason_code": "not_json", "reason": "not JSON", "payload_text": "{", "value": b"{", "topic": "old",
         "partition": 0, "offset": 0, "job": "ingest", "source_job": "ingest", "checkpoint_id": "old", "batch_id": 0}],
        s.table_uri("quarantined_events"))

    send(s, [Event("e1", "d1", at(12, 0), 1.0), Event("e2", "d1", at(12, 10), 3.0), Event("e3", "d2", at(12, 5), 2.0),
             Event("e4", "d3", at(13, 0), 1.0)])  # closes d1's and d2's sessions
    produce(s, [(b"d7", json.dumps({"device_id": "d7", "event_id": "x1", "event_time": "2026-11-22T12:00:00Z"}).encode()),
                (b"d8", b"not json at all"),
                (b"d9", json.dumps({"device_id": 9, "event_id": "x2", "signal": 1.0,
                                    "event_time": "2026-11-22T12:00:00Z"}).encode())])
    run_job(spark, s, "ingest")
    run_job(spark, s, "sessions")

    status = table(s, "device_status").set_index("device_id")
    assert set(status.index) == {"d1", "d2", "d3"}
    assert status.session_end.equals(status.session_last_event_time)
    assert status.session_end["d1"] == _utc(at(12, 10))  # the sessions job's newer session of d1
    assert status.session_closed["d1"] and status.session_closed["d2"] and not status.session_closed["d3"]

    quarantined = table(s, "quarantined_events")
    assert quarantined.job.tolist() == quarantined.source_job.tolist() and set(quarantined.job) == {"ingest"}
    device_of = dict(zip(quarantined.offset.where(quarantined.topic != "old", -1), quarantined.device_id))
    assert sorted(device_of.values(), key=str) == sorted(["d7", None, None, None], key=str)  # d8 not JSON, d9 a number, the old row

    # every row written after the tables were made as before, the migration's fill included,
    # holds the value under both names in the change feed too
    for name, since, new, old in (("device_status", status_version, "session_end", "session_last_event_time"),
                                  ("quarantined_events", quarantine_version, "job", "source_job")):
        feed = pa.table(DeltaTable(s.table_uri(name)).load_cdf(starting_version=since + 1).read_all()).to_pylist()
        written = [row for row in feed if row["_change_type"] in ("insert", "update_postimage")]
        assert written and all(row[new] == row[old] for row in written), name
        assert {row[new] for row in written} >= ({_utc(at(11, 10)), _utc(at(12, 10))} if new == "session_end" else {"ingest"})
