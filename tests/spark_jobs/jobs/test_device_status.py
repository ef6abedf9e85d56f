"""device_status against an oracle from the records sent: one row per device, its latest valid
event (largest event time; of two at the same time, the later one to reach Kafka) and its
latest alert by the same rule, devices known only from alerts included; its last final
tumbling window and its latest session, open or closed. Kept through a restart, a replay of
batches by a rewind and its re-run: a re-run finds nothing newer. Lost, written again by
`sigflow tables rebuild device_status` from the tables its parts come from."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from spark_jobs.ops import rebuild, restart
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.delta.log_damage import TableUnreadable
from tests.helpers import at, run_job, send, send_alert, single_partition_topics, table
from tests.oracle import MINUTE_MS, Event, EventTimeOracle

GAP_MS = 30 * MINUTE_MS  # the session_gap setting's default


def _oracle(events: list[Event], alerts: list[tuple[str, str, int, str]]) -> dict[str, tuple]:
    """Each device's newest (event id, signal) and (alert id, severity), by time, then by the
    order sent (one partition: the order they reached Kafka)."""
    latest: dict[str, dict] = {}
    for order, e in enumerate(events):
        seen = latest.setdefault(e.device_id, {})
        if "event" not in seen or (e.t_ms, order) > seen["event"][0]:
            seen["event"] = ((e.t_ms, order), (e.event_id, e.signal))
    for order, (alert_id, device, t_ms, severity) in enumerate(alerts):
        seen = latest.setdefault(device, {})
        if "alert" not in seen or (t_ms, order) > seen["alert"][0]:
            seen["alert"] = ((t_ms, order), (alert_id, severity))
    return {device: (seen.get("event", (None, (None, None)))[1], seen.get("alert", (None, (None, None)))[1])
            for device, seen in latest.items()}


def _status(s) -> dict[str, tuple]:
    rows = table(s, "device_status")
    assert rows.device_id.is_unique
    return {r.device_id: ((r.event_id, None if r.signal != r.signal else r.signal), (r.alert_id, r.severity))
            for r in rows.itertuples()}


def _send_alerts(s, alerts) -> None:
    for alert_id, device, t_ms, severity in alerts:
        send_alert(s, alert_id, device, t_ms, severity)


def test_device_status_is_each_devices_latest_event_and_alert_through_restarts_and_a_rewind(spark, settings):
    s = single_partition_topics(settings)
    first = [Event("a1", "d1", at(12, 5), 1.0), Event("a2", "d1", at(12, 1), 2.0),  # out of order
             Event("a3", "d2", at(12, 3), 3.0), Event("a4", "d2", at(12, 3), 4.0),  # a tie: the later one wins
             Event("a5", "d3", at(12, 0), 5.0)]
    first_alerts = [("x1", "d1", at(12, 2), "warning"), ("x2", "d9", at(12, 4), "critical")]  # d9: alerts only
    send(s, first)
    _send_alerts(s, first_alerts)
    run_job(spark, s, "ingest")
    assert _status(s) == _oracle(first, first_alerts)
    after_first = Checkpoint(s.checkpoint_uri("ingest")).last_committed()

    second = [Event("b1", "d1", at(12, 4), 6.0),  # older than d1's newest: not taken
              Event("b2", "d2", at(12, 3), 7.0),  # ties d2's newest and arrived later: taken
              Event("a5", "d3", at(12, 0), 5.0),  # a re-sent copy
              Event("b3", "d3", at(12, 9), 8.0), Event("b4", "d4", at(12, 1), 9.0)]
    second_alerts = [("x3", "d1", at(12, 1), "critical"),  # older than d1's alert: not taken
                     ("x4", "d9", at(12, 6), "info"), ("x5", "d2", at(12, 7), "critical")]
    send(s, second)
    _send_alerts(s, second_alerts)
    run_job(spark, s, "ingest")
    everything = _oracle(first + second, first_alerts + second_alerts)
    assert _status(s) == everything

    plan = restart.plan_rewind(s, "ingest", to_batch=after_first)
    assert not plan.refusals, plan.describe()
    assert not any("device_status" in step for step in plan.steps)
    plan.apply()
    assert _status(s) == everything  # a rewind leaves it
    run_job(spark, s, "ingest")
    assert _status(s) == everything  # the re-run finds nothing newer

    # lost, then made again by ingest's next run holding only what came since; the rebuild
    # writes every device's newest again from device_events and device_alerts
    shutil.rmtree(s.table_uri("device_status"))
    third = [Event("c1", "d1", at(12, 8), 10.0), Event("c2", "d5", at(12, 2), 11.0)]
    send(s, third)
    run_job(spark, s, "ingest")
    assert set(_status(s)) == {"d1", "d5"}
    rebuilt = rebuild.rebuild(spark, s, "device_status")
    assert _status(s) == _oracle(first + second + third, first_alerts + second_alerts)
    # d1's row gains its alert (the table made again had none), d5's is as new as it gets
    assert (rebuilt.inserted, rebuilt.updated) == (len(_status(s)) - 2, 1), rebuilt.lines()
    assert ("device_status: window part: none, device_signal_averages not created yet (windowed-averages has "
            "not run)") in rebuilt.lines()
    again = rebuild.rebuild(spark, s, "device_status")
    assert (again.inserted, again.updated) == (0, 0), again.lines()  # nothing older left to change


def _windows_and_sessions_oracle(runs: list[list[Event]], closed_only: bool = False) -> dict[str, tuple]:
    """Each device's last final tumbling window (start, end, events, mean signal) and its
    latest session (start, last event, events, mean signal, closed), by the rules alone: late
    events (at or behind the batch before's watermark) and repeats dropped; a window final
    once the watermark reaches its end; a session the run of events no more than the gap
    apart, closed once the watermark reaches its last event plus the gap (``closed_only``: its
    latest closed session). Each run is an available-now run: its batch, then a no-data batch."""
    oracle = EventTimeOracle()
    for events in runs:
        oracle.run_batch(events)
        oracle.run_no_data_batch()
    windows: dict[str, tuple] = {}
    for (device, kind, start, end), signals in oracle.emitted.items():
        if kind == "tumbling" and (device not in windows or start > windows[device][0]):
            windows[device] = (start, end, len(signals), round(sum(signals) / len(signals), 6))
    sessions: dict[str, tuple] = {}
    for device in {e.device_id for e in oracle.kept}:
        kept = sorted((e.t_ms, e.signal) for e in oracle.kept if e.device_id == device)
        runs_of_events = [[kept[0]]]
        for event in kept[1:]:
            if event[0] - runs_of_events[-1][-1][0] <= GAP_MS:
                runs_of_events[-1].append(event)
            else:
                runs_of_events.append([event])
        for session in reversed(runs_of_events):
            last = session[-1][0]
            closed = last + GAP_MS <= oracle.watermark_ms
            if closed or not closed_only:
                sessions[device] = (session[0][0], last, len(session),
                                    round(sum(sig for _, sig in session) / len(session), 6), closed)
                break
    return {device: (windows.get(device), sessions.get(device)) for device in windows.keys() | sessions.keys()}


def _windows_and_sessions(s) -> dict[str, tuple]:
    rows = table(s, "device_status")
    assert rows.device_id.is_unique

    def ms(value) -> int:
        return int(value.timestamp() * 1000)

    return {r.device_id: (
        None if pd.isna(r.window_start) else
        (ms(r.window_start), ms(r.window_end), r.window_event_count, round(r.window_avg_signal, 6)),
        None if pd.isna(r.session_start) else
        (ms(r.session_start), ms(r.session_end), r.session_event_count,
         round(r.session_avg_signal, 6), bool(r.session_closed)),
    ) for r in rows.itertuples()}


def test_device_status_holds_each_devices_last_final_window_and_latest_session_through_restarts_and_a_rewind(
        spark, settings):
    """windowed-averages and sessions each merge their part into the row ingest keeps: three
    writers, one row per device, each part by its own rule."""
    s = single_partition_topics(settings)
    jobs = ("ingest", "windowed-averages", "sessions")
    first = [Event("a1", "d1", at(12, 0), 1.0), Event("a2", "d1", at(12, 3), 3.0),
             Event("a3", "d1", at(12, 7), 5.0), Event("a2", "d1", at(12, 3), 3.0),  # a re-sent copy
             Event("a4", "d2", at(12, 1), 2.0),
             Event("a5", "d3", at(12, 30), 4.0)]  # the watermark moves to 12:20: d1 and d2 have final windows
    send(s, first)
    for job in jobs:
        run_job(spark, s, job)
    assert _windows_and_sessions(s) == _windows_and_sessions_oracle([first])
    rewind_to = {job: Checkpoint(s.checkpoint_uri(job)).last_committed() for job in jobs[1:]}

    second = [Event("b1", "d1", at(12, 5), 9.0),  # behind the watermark (12:20): late, counted nowhere here
              Event("b2", "d3", at(12, 42), 6.0), Event("b3", "d3", at(12, 44), 8.0),  # d3's session goes on, open
              Event("b4", "d1", at(12, 46), 7.0),  # d1: a new session, open; its old one stays closed in device_sessions
              Event("b5", "d4", at(12, 50), 1.0)]  # a new device; the watermark moves to 12:40: d2 closes
    send(s, second)
    for job in jobs:
        run_job(spark, s, job)
    everything = _windows_and_sessions_oracle([first, second])
    assert everything["d1"][1][4] is False and everything["d2"][1][4] is True  # the scenario has both kinds
    assert _windows_and_sessions(s) == everything
    assert len(table(s, "device_status")) == 4

    for job, to_batch in rewind_to.items():
        plan = restart.plan_rewind(s, job, to_batch=to_batch)
        assert not plan.refusals, plan.describe()
        plan.apply()
    assert _windows_and_sessions(s) == everything  # a rewind leaves it
    for job in jobs[1:]:
        run_job(spark, s, job)
    assert _windows_and_sessions(s) == everything  # the re-runs find nothing newer

    # a recover of sessions from Kafka's earliest offsets: the parts the other jobs wrote stay,
    # and the re-run from the start finds nothing newer than its own part holds
    events_and_alerts = _status(s)
    plan = restart.plan_recover(s, "sessions", recover_from="earliest", force=True)
    assert not plan.refusals, plan.describe()
    assert not any(re.search(r"\bdevice_status\b", step) for step in plan.steps), plan.describe()
    plan.apply()
    run_job(spark, s, "sessions")
    assert _windows_and_sessions(s) == everything and _status(s) == events_and_alerts

    # lost and rebuilt: the windows and every closed session again; a device whose latest
    # session is open has its last closed one (device_sessions holds no open session) until
    # the sessions job writes the open one again, at that device's next event
    shutil.rmtree(s.table_uri("device_status"))
    rebuild.rebuild(spark, s, "device_status")
    recovered = _windows_and_sessions_oracle([first + second], closed_only=True)  # device_sessions as recovered
    assert recovered["d1"][1][0] != everything["d1"][1][0] and recovered["d3"][1] is None  # both kinds
    assert _windows_and_sessions(s) == {device: (window, recovered.get(device, (None, None))[1])
                                        for device, (window, _) in everything.items()}
    assert _status(s) == events_and_alerts
    third = [Event("c1", "d3", at(12, 48), 2.0)]
    send(s, third)
    run_job(spark, s, "sessions")
    assert _windows_and_sessions(s)["d3"][1] == _windows_and_sessions_oracle([first + second, third])["d3"][1]

    # a table a part comes from, damaged: named, with its runbook, before anything is read or written
    newest = max((Path(s.table_uri("device_sessions")) / "_delta_log").glob("*.json"))
    newest.write_bytes(newest.read_bytes()[:50])
    before = _windows_and_sessions(s)
    with pytest.raises(TableUnreadable) as refused:
        rebuild.rebuild(spark, s, "device_status")
    assert refused.value.message.startswith(f"table device_sessions cannot be read: its log entry {newest.name} ")
    assert _windows_and_sessions(s) == before
