"""Job sessions: closed only when the watermark passes last event + gap, from batch 0 on."""

import dataclasses
import json

from spark_jobs.jobs.event_time import valid_events
from spark_jobs.jobs.sessions import SESSIONS, device_sessions
from tests.helpers import at, run_job, send, single_partition, table
from tests.oracle import Event

# Section 6 of the shared semantics: one micro-batch per step, delay 10 min, gap 30 min.
SECTION_6_STEPS = [
    [Event("a1", "A", at(10, 0), 1.0), Event("b1", "B", at(10, 0), 2.0)],
    [Event("b2", "B", at(10, 20), 4.0)],
    [Event("a2", "A", at(10, 25), 3.0)],
    [Event("b3", "B", at(12, 0), 8.0)],
]
EXPECTED = [("A", at(10, 0), at(10, 25), 2), ("B", at(10, 0), at(10, 20), 2)]


def closed_sessions(settings):
    rows = table(settings, "device_sessions").sort_values(["device_id", "session_start"])
    return [
        (r.device_id, int(r.session_start.timestamp() * 1000), int(r.session_end.timestamp() * 1000), r.event_count)
        for r in rows.itertuples()
    ]


def play_section_6(spark, settings, job=SESSIONS):
    for step in SECTION_6_STEPS:
        send(settings, step)
        run_job(spark, settings, job)  # each run restarts from the checkpoint


def test_section_6_scenario_closes_exactly_the_expected_sessions(spark, settings):
    s = single_partition(settings)
    play_section_6(spark, s)
    assert closed_sessions(s) == EXPECTED  # B's 12:00 session is still open
    rows = table(s, "device_sessions").sort_values("device_id")
    assert rows.avg_signal.tolist() == [2.0, 3.0]
    assert set(rows.closed_reason) == {"no event for the session gap", "next event came after the session gap"}


def test_naive_watermark_timeout_fails_the_same_scenario(spark, settings):
    """Regression: a timeout of watermark + gap closes sessions after a single event."""
    s = single_partition(settings)
    naive = dataclasses.replace(
        SESSIONS, name="sessions-naive",
        build=lambda st, records: device_sessions(st, valid_events(records), timeout_from="watermark"),
    )
    play_section_6(spark, s, naive)
    naive_closed = closed_sessions(s)
    assert naive_closed != EXPECTED
    assert ("A", at(10, 0), at(10, 0), 1) in naive_closed


def test_new_event_after_the_gap_closes_and_reopens_in_the_same_batch(spark, settings):
    s = single_partition(settings)
    send(s, [Event("x1", "D", at(8, 0), 1.0), Event("x2", "D", at(8, 10), 1.0), Event("x3", "D", at(9, 0), 5.0)])
    run_job(spark, s, "sessions")
    assert closed_sessions(s) == [("D", at(8, 0), at(8, 10), 2)]


def test_state_holds_only_open_sessions_while_devices_come_and_go(spark, settings):
    s = single_partition(settings)
    for step in range(4):  # every 40 minutes, five new devices talk for 10 minutes
        base = at(6, 0) + step * 40 * 60_000
        send(s, [Event(f"s{step}-{d}-{m}", f"dev{step}-{d}", base + m * 120_000, float(m))
                 for d in range(5) for m in range(6)])
        run_job(spark, s, "sessions")
    last = json.loads(table(s, "pipeline_metrics").sort_values("batch_id").progress_json.iloc[-1])
    session_state = [op["numRowsTotal"] for op in last["stateOperators"] if "WithState" in op["operatorName"]]
    assert len(session_state) == 1 and 0 < session_state[0] <= 2 * 5  # newest two cohorts of 20
    closed = table(s, "device_sessions")
    assert sorted(set(closed.device_id)) == [f"dev{step}-{d}" for step in (0, 1) for d in range(5)]
    assert (closed.event_count == 6).all()
