"""table_status says how complete a table is, for readers without sigflow: a row per batch per
table, rows or none, and a table's newest row of a job is a promise the stream keeps: no window
ending at or before its final_through is written afterwards, whatever arrives."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from spark_jobs.ops.table_overview import overview
from tests.helpers import (
    at,
    run_job,
    send,
    send_alert,
    sigflow,
    single_partition,
    single_partition_topics,
    table,
)
from tests.oracle import MINUTE_MS, Event

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
    assert f"final through {writing.final_through:%Y-%m-%dT%H:%M:%SZ} by window_end" in lines[AVERAGES]
    # no late event waits: a correction can come only from one still to arrive, counted if
    # within late_horizon of its tumbling window's end (7 days, 5 minutes: the defaults)
    assert ", 0 late events waiting for reconcile" in lines[AVERAGES]
    horizon = writing.final_through - timedelta(days=7, minutes=5)
    assert f"corrections possible from {horizon:%Y-%m-%dT%H:%M:%SZ}" in lines[AVERAGES]
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


def _sessions_by_rule(events: list[Event], through_ms: int) -> set[tuple[str, int, int]]:
    """(device, start, last event) of every session whose last event is at or before
    ``through_ms``: a run of a device's events with no silence longer than the gap."""
    found = set()
    for device in {e.device_id for e in events}:
        times = sorted(e.t_ms for e in events if e.device_id == device)
        start = times[0]
        for before, after in zip(times, times[1:] + [None]):
            if after is None or after - before > 30 * MINUTE_MS:
                if before <= through_ms:
                    found.add((device, start, before))
                start = after
    return found


def test_a_session_is_final_when_its_session_end_is_at_or_before_final_through(spark, settings):
    """device_sessions' final_through is compared with session_end as it stands, no gap to add:
    every session the rule closes by then is there, and none ending by then comes later, not
    from late events that would have extended one nor from a restart."""
    s = single_partition(settings)
    on_time = ([Event(f"d1-{m}", "d1", at(12, m), 1.0) for m in (0, 10, 20)]
               + [Event("d2-a", "d2", at(12, 0), 2.0), Event("d2-b", "d2", at(12, 40), 2.0)]  # 40 min apart: two
               + [Event(f"d3-{n}", "d3", at(13, 0) + n * 5 * MINUTE_MS, 3.0) for n in range(13)]  # 13:00 to 14:00
               + [Event("d4", "d4", at(13, 20), 4.0), Event("d5", "d5", at(13, 21), 5.0)])
    send(s, on_time)
    run_job(spark, s, "sessions")
    status = _latest(s, "device_sessions")
    first = status.final_through.to_pydatetime()
    # the watermark is the newest event less the delay, 13:50; a session is final once it
    # reaches its last event plus the gap: d4's, ending 13:20 exactly, is; d5's, 13:21, is not
    assert (status.final_column, first) == ("session_end", datetime(2026, 11, 22, 13, 20, tzinfo=timezone.utc))
    first_ms = int(first.timestamp() * 1000)
    written = {(r.device_id, _ms(r.session_start), _ms(r.session_end)) for r in table(s, "device_sessions").itertuples()}
    assert written == _sessions_by_rule(on_time, first_ms)

    # late readings that would have extended d1's and d4's sessions, then time moves on
    later = [Event("d1-late", "d1", at(12, 45), 1.0), Event("d4-late", "d4", at(13, 30), 4.0),
             Event("d3-next", "d3", at(15, 0), 3.0)]
    send(s, later)
    run_job(spark, s, "sessions")
    now = table(s, "device_sessions")
    kept = {(r.device_id, _ms(r.session_start), _ms(r.session_end)) for r in now.itertuples()}
    assert {row for row in kept if row[2] <= first_ms} == written  # nothing added or changed at or before
    second = _latest(s, "device_sessions").final_through.to_pydatetime()
    assert kept == _sessions_by_rule(on_time + later[2:], int(second.timestamp() * 1000))


def _ms(value) -> int:
    return int(value.timestamp() * 1000)


def test_an_alert_is_final_when_its_alert_time_is_at_or_before_final_through(spark, settings):
    """Spark writes an alert without telemetry once the watermark is past its alert_time, not at
    it: the alert tables are final through one microsecond before the watermark, and every
    alert at or before that has all its rows, context pairs or its no-telemetry row, whatever
    arrives later."""
    s = single_partition_topics(settings)
    events = [Event(f"e{m}", "d1", at(12, m), 1.0) for m in range(0, 31, 5)]  # events' watermark 12:20
    alerts = [("a1", "d1", at(12, 10)), ("a2", "d9", at(12, 15)),  # d9 sends nothing
              ("a3", "d9", at(12, 20)),  # at the watermark exactly
              ("a4", "d8", at(12, 40))]  # moves the alerts' watermark to 12:30
    send(s, events)
    for alert in alerts:
        send_alert(s, *alert)
    run_job(spark, s, "alert-join")
    status = {name: _latest(s, name) for name in ("alert_signal_context", "alerts_without_telemetry")}
    assert {row.final_column for row in status.values()} == {"alert_time"}
    first = {row.final_through.to_pydatetime() for row in status.values()}
    assert first == {datetime(2026, 11, 22, 12, 20, tzinfo=timezone.utc) - timedelta(microseconds=1)}
    (first,) = first
    first_ms = first.timestamp() * 1000

    def by_rule(alert_rows):  # (alert, event) pairs in [alert_time - 5 min, alert_time]; none: (alert, None)
        rows = set()
        for alert_id, device, alert_ms in alert_rows:
            if alert_ms <= first_ms:
                matched = [e.event_id for e in events if e.device_id == device and alert_ms - 5 * MINUTE_MS <= e.t_ms <= alert_ms]
                rows |= {(alert_id, event_id) for event_id in matched} or {(alert_id, None)}
        return rows

    def written():
        context = table(s, "alert_signal_context")
        without = table(s, "alerts_without_telemetry")
        return ({(r.alert_id, r.event_id, _ms(r.alert_time)) for r in context.itertuples()}
                | {(r.alert_id, None, _ms(r.alert_time)) for r in without.itertuples()})

    final = {(alert, event) for alert, event, alert_ms in written() if alert_ms <= first_ms}
    assert final == by_rule(alerts)
    # d9's readings arrive late, one in a2's range, one at a3's time: nothing final changes
    send(s, [Event("e-d9", "d9", at(12, 20), 9.0), Event("e-late", "d9", at(12, 14), 9.0)])
    run_job(spark, s, "alert-join")
    assert {(alert, event) for alert, event, alert_ms in written() if alert_ms <= first_ms} == final
