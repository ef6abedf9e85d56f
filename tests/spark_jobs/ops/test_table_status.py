"""table_status says how complete a table is, for readers without sigflow: a row per batch per
table, rows or none, and a table's newest row of a job is a promise the stream keeps: no window
ending at or before its final_through is written afterwards, whatever arrives."""

from __future__ import annotations

from datetime import datetime, timezone

from spark_jobs.ops.table_overview import overview
from tests.helpers import at, run_job, send, sigflow, single_partition, table
from tests.oracle import Event

AVERAGES = "device_signal_averages"


def _latest(s, name: str):
    status = table(s, "table_status")
    return status[status.table_name == name].sort_values("recorded_at").iloc[-1]


def test_the_newest_status_of_a_table_is_kept_by_every_later_batch(spark, settings):
    s = single_partition(settings)
    send(s, [Event(f"a{n}", f"d{n % 2}", at(12, 0) + n * 60_000, float(n)) for n in range(30)])
    run_job(spark, s, "windowed-averages")
    promised = _latest(s, AVERAGES)
    final_through = promised.final_through.to_pydatetime()
    assert final_through == datetime(2026, 11, 22, 12, 19, tzinfo=timezone.utc)  # newest event 12:29, 10 min delay
    status = table(s, "table_status")
    ours = status[status.table_name == AVERAGES]
    metrics = table(s, "pipeline_metrics")
    assert sorted(ours.batch_id) == sorted(metrics[metrics.job == "windowed-averages"].batch_id)  # every batch
    assert 0 in set(ours.rows_written)  # the first batch closes no window: its row is there all the same
    assert ours.rows_written.sum() == len(table(s, AVERAGES))

    # late ones for windows already final, on-time ones for later windows
    send(s, [Event(f"late{n}", "d0", at(12, 1) + n * 1000, 99.0) for n in range(5)]
         + [Event(f"b{n}", f"d{n % 2}", at(12, 30) + n * 60_000, float(n)) for n in range(30)])
    run_job(spark, s, "windowed-averages")
    later = table(s, AVERAGES)
    later = later[later.batch_id > promised.batch_id]
    assert len(later) > 0
    assert (later.window_end > final_through).all(), later[later.window_end <= final_through]
    assert _latest(s, AVERAGES).final_through.to_pydatetime() > final_through


def test_sigflow_tables_lists_every_table_with_its_change_feed_and_completeness(spark, settings):
    s = single_partition(settings)
    send(s, [Event(f"a{n}", "d1", at(12, 0) + n * 60_000, float(n)) for n in range(20)])
    run_job(spark, s, "windowed-averages")
    by_name = {table.name: table for table in overview(s)}
    averages = by_name[AVERAGES]
    (writing,) = averages.writers
    assert averages.change_feed and writing.job == "windowed-averages"
    assert averages.rows == len(table(s, AVERAGES))
    assert writing.final_through == _latest(s, AVERAGES).final_through.to_pydatetime()
    assert by_name["device_sessions"].version is None  # its job never ran here
    printed = sigflow(s, "tables")
    assert printed.returncode == 0, printed.stderr
    lines = {line.split(":", 1)[0]: line for line in printed.stdout.splitlines()}
    assert "change feed on" in lines[AVERAGES]
    assert f"final through {writing.final_through:%Y-%m-%dT%H:%M:%SZ}" in lines[AVERAGES]
    # a table whose parts three jobs merge says how far each has written it
    assert "written by ingest (no batch yet); windowed-averages (has Kafka's records up to" in lines["device_status"]
    assert lines["device_status"].endswith("; sessions (no batch yet)")
    # a table no job's batches complete says when its rows are final instead
    for name in ("late_events", "pipeline_metrics", "table_status"):
        assert "no completeness to report, rows final when written" in lines[name], lines[name]


def test_a_batch_capped_by_max_offsets_per_trigger_claims_no_completeness_it_lacks(spark, settings):
    """batch_time promises that every record in Kafka before it has reached the table. A batch
    max_offsets_per_trigger cut short (every catch-up after an outage) has not read them all:
    its row keeps the last time that held, never its own trigger time."""
    import json

    import pandas as pd

    s = single_partition(settings).replace(max_offsets_per_trigger=10)

    def status_with_ends():
        status = table(s, "table_status")
        status = status[status.table_name == "device_events"]
        metrics = table(s, "pipeline_metrics")
        ends = {row.batch_id: int(json.loads(row.progress_json)["sources"][0]["endOffset"][s.streaming.events_topic]["0"])
                for row in metrics[metrics.job == "ingest"].itertuples()}
        return [(ends[row.batch_id], row.batch_time) for row in status.sort_values("batch_id").itertuples()]

    first_sent = datetime.now(timezone.utc)
    send(s, [Event(f"a{n}", "d1", at(12, 0) + n * 1000, float(n)) for n in range(30)])
    all_sent = datetime.now(timezone.utc)
    run_job(spark, s, "ingest")
    rows = status_with_ends()
    assert [end for end, _ in rows][:3] == [10, 20, 30]
    for end, batch_time in rows:
        if end < 30:  # records sent before it were still in Kafka only
            assert pd.isna(batch_time) or batch_time.to_pydatetime() <= first_sent, (end, batch_time)
        else:
            assert batch_time.to_pydatetime() >= all_sent

    promised = rows[-1][1]
    again_sent = datetime.now(timezone.utc)
    send(s, [Event(f"b{n}", "d1", at(13, 0) + n * 1000, float(n)) for n in range(30)])
    run_job(spark, s, "ingest")
    later = status_with_ends()[len(rows):]
    capped = [batch_time for end, batch_time in later if end < 60]
    assert len(capped) == 2
    # the catch-up keeps the promise made before it, which still holds
    assert all(t == promised and t.to_pydatetime() <= again_sent for t in capped)
    assert later[-1][0] == 60 and later[-1][1].to_pydatetime() > again_sent
