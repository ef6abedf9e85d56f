"""device_status against an oracle from the records sent: one row per device, its latest valid
event (largest event time; of two at the same time, the later one to reach Kafka) and its
latest alert by the same rule, devices known only from alerts included. Kept through a
restart, a replay of batches by a rewind and its re-run: a re-run finds nothing newer."""

from __future__ import annotations

from spark_jobs.ops import restart
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from tests.helpers import at, run_job, send, send_alert, single_partition_topics, table
from tests.oracle import Event


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
