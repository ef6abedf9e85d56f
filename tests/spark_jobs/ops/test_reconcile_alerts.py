"""sigflow reconcile counts alert-join's late records: a late event joins the alerts whose
range it is in (and takes back an alert reported without telemetry), a late alert joins the
events of its range (or is reported without telemetry). After the stream and a reconcile,
alert_signal_context and alerts_without_telemetry equal what the join's rule gives from every
alert and event, on time or late within late_horizon, each counted once (docs/semantics.md,
late events counted). The expectation is computed here from the records alone."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from deltalake import DeltaTable

from spark_jobs.ops import late_backlog, reconcile
from tests.helpers import at, run_job, send, send_alert, single_partition_topics, table
from tests.oracle import MINUTE_MS, Event

DELAY_MS, CONTEXT_MS = 10 * MINUTE_MS, 5 * MINUTE_MS
HORIZON = "4 hours"


@dataclass(frozen=True)
class Alert:
    alert_id: str
    device_id: str
    t_ms: int


def every_minute(device: str, start_ms: int, end_ms: int) -> list[Event]:
    return [Event(f"{device}-{t}", device, t, float(t // MINUTE_MS % 11)) for t in range(start_ms, end_ms + 1, MINUTE_MS)]


# d1 reports every minute from 10:00 to 12:00; d2 and d3 report nothing; d4's one reading
# and alert are at 06:03. Both watermarks end at 11:50.
ON_TIME_EVENTS = every_minute("d1", at(10, 0), at(12, 0)) + [Event("d4-early", "d4", at(6, 3), 4.0)]
ON_TIME_ALERTS = [Alert("a1", "d1", at(10, 30)),  # six readings in its range
                  Alert("a2", "d2", at(11, 0)),  # none: without telemetry, until d2's late reading
                  Alert("a7", "d4", at(6, 3)),
                  Alert("a9", "d1", at(11, 52)),  # not final yet: its range ends after the watermark
                  Alert("a8", "d1", at(12, 0))]
LATE_EVENTS = [Event("late-d1", "d1", at(10, 27, 30), 50.0),  # a second in a1's range
               Event("late-d2", "d2", at(10, 58), 60.0),  # takes a2 back from the silent ones
               Event("late-wait", "d1", at(11, 48), 70.0),  # in a9's range: waits until a9 is final
               Event("old-d4", "d4", at(6, 2), 9.0)]  # beyond the horizon: a7 keeps its one reading
LATE_ALERTS = [Alert("a3", "d1", at(10, 45)),  # joins six readings
               Alert("a4", "d3", at(10, 50)),  # a silent device
               Alert("a1", "d1", at(10, 30)),  # a copy re-sent
               Alert("a6", "d1", at(6, 0))]  # beyond the horizon
BEYOND = {"old-d4", "a6"}
ADVANCE_EVENTS = [Event("d1-adv", "d1", at(13, 0), 1.0)]
ADVANCE_ALERTS = [Alert("a10", "d1", at(13, 0))]  # watermarks -> 12:50


def expected(events: list[Event], alerts: list[Alert], final_ms: int) -> tuple[set, set]:
    """(the (alert, event) pairs, the alerts without telemetry) of the alerts final at ``final_ms``:
    each event and alert counted once, its first copy."""
    first_events = {}
    for e in events:
        if e.event_id not in BEYOND:
            first_events.setdefault((e.device_id, e.event_id), e)
    first_alerts = {}
    for a in alerts:
        if a.alert_id not in BEYOND and a.t_ms <= final_ms:
            first_alerts.setdefault(a.alert_id, a)
    pairs = {(a.alert_id, e.event_id) for a in first_alerts.values() for e in first_events.values()
             if e.device_id == a.device_id and a.t_ms - CONTEXT_MS <= e.t_ms <= a.t_ms}
    silent = {a for a in first_alerts if not any(p[0] == a for p in pairs)}
    return pairs, silent


def tables(s, final_ms: int) -> tuple[set, set]:
    context = table(s, "alert_signal_context")
    assert not context.duplicated(["alert_id", "event_id"]).any()
    final = context[context.alert_time.map(lambda t: t.timestamp() * 1000 <= final_ms)]
    return set(zip(final.alert_id, final.event_id)), set(table(s, "alerts_without_telemetry").alert_id)


def play(spark, s, events: list[Event], alerts: list[Alert]) -> None:
    send(s, events)
    for a in alerts:
        send_alert(s, a.alert_id, a.device_id, a.t_ms)
    for job in ("ingest", "alert-join"):
        run_job(spark, s, job)


def versions(s) -> dict[str, int]:
    return {name: DeltaTable(s.table_uri(name)).version() for name in ("alert_signal_context", "alerts_without_telemetry")}


@pytest.mark.slow
def test_late_events_and_alerts_join_their_alerts_and_events_once_the_alerts_are_final(spark, settings):
    s = single_partition_topics(settings, late_horizon=HORIZON)
    play(spark, s, ON_TIME_EVENTS, ON_TIME_ALERTS)
    play(spark, s, LATE_EVENTS, LATE_ALERTS)
    events, alerts = ON_TIME_EVENTS + LATE_EVENTS, ON_TIME_ALERTS + LATE_ALERTS
    late = table(s, "late_events")
    assert sorted(late[late.job == "alert-join"].event_id) == sorted(
        [e.event_id for e in LATE_EVENTS] + [a.alert_id for a in LATE_ALERTS])  # the stream dropped them all
    assert tables(s, at(11, 50)) != expected(events, alerts, at(11, 50))

    first = reconcile.run(spark, s, ["alert-join"]).jobs[0]
    assert (first.waiting, first.counted, first.beyond_horizon) == (len(late[late.job == "alert-join"]), 5, 2)
    assert first.still_waiting == 1  # late-wait: a9's range reaches past the watermark
    assert tables(s, at(11, 50)) == expected(events, alerts, at(11, 50))
    context = table(s, "alert_signal_context")
    added = context[context.revision == 1]
    assert sorted(zip(added.alert_id, added.event_id)) == sorted(
        [("a1", "late-d1"), ("a2", "late-d2")] + [("a3", e.event_id) for e in ON_TIME_EVENTS
                                                   if e.device_id == "d1" and at(10, 40) <= e.t_ms <= at(10, 45)])
    assert (context.revision == 0).sum() == len(context) - len(added) and added.corrected_at.notna().all()
    silent = table(s, "alerts_without_telemetry")
    assert dict(zip(silent.alert_id, silent.revision)) == {"a4": 1}  # a2 taken back, a4 inserted

    play(spark, s, ADVANCE_EVENTS, ADVANCE_ALERTS)
    second = reconcile.run(spark, s, ["alert-join"]).jobs[0]
    assert (second.waiting, second.counted, second.still_waiting) == (1, 1, 0)
    events, alerts = events + ADVANCE_EVENTS, alerts + ADVANCE_ALERTS
    assert tables(s, at(12, 50)) == expected(events, alerts, at(12, 50))
    assert ("a9", "late-wait") in tables(s, at(12, 50))[0]

    before = versions(s)
    again = reconcile.run(spark, s, ["alert-join"]).jobs[0]
    assert again.waiting == 0 and versions(s) == before  # nothing to do, no commit
    assert late_backlog.backlog(s)["alert-join"].waiting == 0


@pytest.mark.slow
def test_a_late_event_waits_for_an_alert_at_the_watermark_which_the_stream_has_not_decided_yet(spark, settings):
    """An alert exactly at the watermark is not final in the stream: Spark reports it without
    telemetry only once the watermark is past it. A late event in its range counted then
    would pair with an alert the stream later reports as silent, in both tables at once."""
    s = single_partition_topics(settings, late_horizon=HORIZON)
    play(spark, s, [Event("d1-a", "d1", at(12, 10), 1.0)], [Alert("edge", "d2", at(12, 0)), Alert("keep", "d1", at(12, 10))])
    play(spark, s, [Event("late-d2", "d2", at(11, 55), 5.0), Event("d1-b", "d1", at(12, 10, 1), 1.0)], [])
    late = table(s, "late_events")
    assert late[late.job == "alert-join"].event_id.tolist() == ["late-d2"]  # the watermark is 12:00
    assert reconcile.run(spark, s, ["alert-join"]).jobs[0].still_waiting == 1

    play(spark, s, ADVANCE_EVENTS, ADVANCE_ALERTS)  # the stream reports edge without telemetry
    assert reconcile.run(spark, s, ["alert-join"]).jobs[0].counted == 1
    pairs, silent = tables(s, at(12, 50))
    assert ("edge", "late-d2") in pairs and not silent & {alert for alert, _ in pairs}


@pytest.mark.slow
def test_late_readings_in_no_alerts_range_are_counted_without_a_change(spark, settings):
    """Late readings none of whose ranges holds an alert (a device that never alerted, a time
    before its alert's range) change no row: reconcile decides on them and commits nothing."""
    s = single_partition_topics(settings, late_horizon=HORIZON)
    play(spark, s, ON_TIME_EVENTS, ON_TIME_ALERTS)
    far = [Event("late-d5", "d5", at(10, 58), 1.0), Event("late-d1-early", "d1", at(10, 10, 30), 2.0)]
    play(spark, s, far, [])
    late = table(s, "late_events")
    assert sorted(late[late.job == "alert-join"].event_id) == sorted(e.event_id for e in far)
    before = versions(s)
    decided = reconcile.run(spark, s, ["alert-join"]).jobs[0]
    assert (decided.waiting, decided.counted, decided.still_waiting) == (2, 2, 0)
    assert versions(s) == before
    assert tables(s, at(11, 50)) == expected(ON_TIME_EVENTS + far, ON_TIME_ALERTS, at(11, 50))
