"""Job alert-join: inner matches at once, silent-device alerts once the watermark allows."""

import json

import pytest

from tests.helpers import (
    at,
    run_job,
    send,
    send_alert,
    single_partition_topics,
    table,
)
from tests.oracle import Event


def test_alert_gets_the_events_in_its_range_as_soon_as_both_arrive(spark, settings):
    s = single_partition_topics(settings)
    send(s, [Event("e1", "d1", at(12, 0), 1.0), Event("e2", "d1", at(12, 3), 2.0),
             Event("e3", "d1", at(12, 6), 3.0), Event("e4", "d9", at(12, 4), 9.0)])
    send_alert(s, "a1", "d1", at(12, 5))
    run_job(spark, s, "alert-join")
    context = table(s, "alert_signal_context")
    assert sorted(context.event_id) == ["e1", "e2"]  # [12:00, 12:05] of d1 only
    assert set(context.alert_id) == {"a1"}
    assert len(table(s, "alerts_without_telemetry")) == 0


def _silent_device_scenario(spark, s):
    send(s, [Event("e1", "d1", at(12, 0), 1.0)])
    send_alert(s, "silent", "d2", at(12, 5))  # no d2 event at all
    run_job(spark, s, "alert-join")
    assert len(table(s, "alerts_without_telemetry")) == 0  # not proven yet
    send(s, [Event("e2", "d1", at(12, 50), 1.0)])  # only the events side moves on
    run_job(spark, s, "alert-join")


def test_silent_device_alert_waits_for_the_slower_side_under_min_policy(spark, settings):
    s = single_partition_topics(settings, multiple_watermark_policy="min")
    _silent_device_scenario(spark, s)
    assert len(table(s, "alerts_without_telemetry")) == 0  # alerts' watermark holds it back
    # Both inputs must see data within one run: Spark checkpoints only the global watermark,
    # so a restarted query under `min` waits for every input (docs/streaming-facts.md).
    send_alert(s, "later", "d1", at(12, 50))
    send(s, [Event("e3", "d1", at(12, 51), 1.0)])
    run_job(spark, s, "alert-join")
    silent = table(s, "alerts_without_telemetry")
    assert silent.alert_id.tolist() == ["silent"]


def test_silent_device_alert_follows_the_faster_side_under_max_policy(spark, settings):
    s = single_partition_topics(settings, multiple_watermark_policy="max")
    _silent_device_scenario(spark, s)
    assert table(s, "alerts_without_telemetry").alert_id.tolist() == ["silent"]


def test_join_state_stays_bounded_while_both_streams_advance(spark, settings):
    s = single_partition_topics(settings)
    for step in range(3):  # 3 x 15 minutes of event time, an event a minute per device
        base = at(6, 0) + step * 15 * 60_000
        send(s, [Event(f"e{step}-{m}-{d}", f"d{d}", base + m * 60_000, 1.0) for m in range(15) for d in range(3)])
        for m in range(0, 15, 5):
            send_alert(s, f"a{step}-{m}", "d0", base + m * 60_000)
        run_job(spark, s, "alert-join")
    last = json.loads(table(s, "pipeline_metrics").sort_values("batch_id").progress_json.iloc[-1])
    join_rows = [op["numRowsTotal"] for op in last["stateOperators"] if op["operatorName"] == "symmetricHashJoin"]
    # buffered rows cover about the watermark delay plus the context range, not the hour
    assert len(join_rows) == 1 and 0 < join_rows[0] < 3 * 60 * 0.6
    # 9 alerts x 6 d0 events in [t - 5 min, t], except the first (06:00) which has one
    assert len(table(s, "alert_signal_context")) == 8 * 6 + 1


@pytest.mark.parametrize("policy, expected", [("min", [("a3", "e_late")]), ("max", [])])
def test_different_delays_per_side_and_the_policy_decide_what_is_late(spark, settings, policy, expected,
                                                                       late_events_found):
    """Events wait 2 minutes, alerts 20. Under `min` the slower side's watermark governs the
    join, so an event 10 minutes behind its own side is still joined; under `max` the faster
    side's governs, and both that event and an alert 8 minutes behind are dropped, and listed
    in late_events."""
    s = single_partition_topics(settings, watermark_delay="2 minutes", alert_watermark_delay="20 minutes",
                             multiple_watermark_policy=policy)
    send(s, [Event("e_new", "d1", at(12, 30), 1.0)])
    send_alert(s, "a_new", "d2", at(12, 30))
    run_job(spark, s, "alert-join")  # watermarks: events 12:28, alerts 12:10
    send(s, [Event("e_late", "d3", at(12, 20), 1.0)])
    send_alert(s, "a3", "d3", at(12, 22))
    send_alert(s, "keep-inputs-moving", "d1", at(12, 31))
    send(s, [Event("e_more", "d1", at(12, 31), 1.0)])
    run_job(spark, s, "alert-join")
    context = table(s, "alert_signal_context")
    pairs = sorted(zip(context.alert_id, context.event_id))
    assert [p for p in pairs if p[0] == "a3"] == expected
    dropped = table(s, "pipeline_metrics").rows_dropped_by_watermark.sum()
    late = table(s, "late_events")
    # late_events lists exactly what Spark counted as dropped, from both sides
    assert sorted(late.event_id) == (["a3", "e_late"] if policy == "max" else [])
    assert len(late) == dropped
    assert set(late.topic) == ({s.streaming.events_topic, s.streaming.alerts_topic} if policy == "max" else set())
    # each row says which kind of record it is: a3 was sent as an alert, e_late as an event
    assert sorted(zip(late.event_id, late.record_kind)) == (
        [("a3", "alert"), ("e_late", "event")] if policy == "max" else [])


def test_a_re_sent_event_joins_each_alert_once(spark, settings):
    """The same event sent twice in one batch and again in the next: one row per
    (alert, event) pair, and the repeats are counted as duplicates."""
    s = single_partition_topics(settings)
    e1, e2 = Event("e1", "d1", at(12, 0), 1.0), Event("e2", "d1", at(12, 2), 2.0)
    send(s, [e1, e1, e2])
    send_alert(s, "a1", "d1", at(12, 4))
    run_job(spark, s, "alert-join")
    send(s, [e2, Event("e3", "d1", at(12, 3), 3.0)])
    send_alert(s, "a2", "d1", at(12, 5))
    run_job(spark, s, "alert-join")
    context = table(s, "alert_signal_context")
    assert sorted(zip(context.alert_id, context.event_id)) == [
        ("a1", "e1"), ("a1", "e2"), ("a1", "e3"), ("a2", "e1"), ("a2", "e2"), ("a2", "e3"),
    ]
    assert table(s, "pipeline_metrics").duplicates_dropped.sum() == 2


def test_a_re_sent_alert_is_one_alert(spark, settings):
    """An at-least-once producer re-sends alerts: an alert_id is one alert. A copy in the same
    batch or in a later one adds no context row and no second 'without telemetry' row."""
    s = single_partition_topics(settings)
    send(s, [Event("e1", "d1", at(12, 0), 1.0), Event("e2", "d1", at(12, 2), 2.0)])
    send_alert(s, "a1", "d1", at(12, 4))
    send_alert(s, "a1", "d1", at(12, 4))
    send_alert(s, "silent", "d2", at(12, 5))
    run_job(spark, s, "alert-join")
    send_alert(s, "a1", "d1", at(12, 4))  # re-sent after its first copy was joined
    send_alert(s, "silent", "d2", at(12, 5))
    send(s, [Event("e3", "d1", at(12, 50), 3.0)])
    send_alert(s, "later", "d1", at(12, 50))
    run_job(spark, s, "alert-join")
    context = table(s, "alert_signal_context")
    assert sorted(zip(context.alert_id, context.event_id)) == [("a1", "e1"), ("a1", "e2"), ("later", "e3")]
    assert table(s, "alerts_without_telemetry").alert_id.tolist() == ["silent"]
