"""Job sessions: a session closes only when the watermark passes its last event + gap, from
batch 0 on; until then an on-time event, in any order and any later batch, extends or
bridges the device's open sessions (docs/semantics.md, sessions). End to end here: the
first-batch trap, restarts, state size; the edge cases of the rule (bridging, an older
session, exactly the gap) call the state function directly (test_session_state.py)."""

import dataclasses
import json
import random
from datetime import datetime, timezone

from spark_jobs.jobs.event_time import valid_events
from spark_jobs.jobs.sessions import SESSIONS, device_sessions
from spark_jobs.ops.operator_state import read_state
from tests.helpers import (
    at,
    cli_env,
    run_job,
    send,
    sigflow_here,
    single_partition,
    table,
)
from tests.oracle import MINUTE_MS, Event, EventTimeOracle

GAP_MS = 30 * MINUTE_MS


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")

# One micro-batch per step, delay 10 min, gap 30 min: the acceptance scenario of the first-batch trap.
FIRST_BATCH_TRAP_STEPS = [
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


def play(spark, settings, steps, job=SESSIONS):
    for step in steps:
        send(settings, step)
        run_job(spark, settings, job)  # each run restarts from the checkpoint


def expected_sessions(steps, delay_ms: int) -> list[tuple]:
    """The rule, independently of Spark: drop the late events (at or behind the watermark
    of the batch before), cut each device's remaining events wherever the silence exceeds
    the gap, and keep the sessions the final watermark has passed by the gap."""
    oracle = EventTimeOracle(delay_ms=delay_ms)
    for step in steps:  # each step is one available-now run: its batch, then a no-data batch
        oracle.run_batch(step)
        oracle.run_no_data_batch()
    by_device: dict[str, list[int]] = {}
    for event in oracle.kept:
        by_device.setdefault(event.device_id, []).append(event.t_ms)
    sessions = []
    for device, times in by_device.items():
        times.sort()
        start = previous = times[0]
        count = 0
        for t in times:
            if t - previous > GAP_MS:
                sessions.append((device, start, previous, count))
                start, count = t, 0
            previous, count = t, count + 1
        sessions.append((device, start, previous, count))
    return sorted(s for s in sessions if s[2] + GAP_MS <= oracle.watermark_ms)


def test_first_batch_trap_scenario_closes_exactly_the_expected_sessions(spark, settings, capsys, monkeypatch):
    s = single_partition(settings)
    play(spark, s, FIRST_BATCH_TRAP_STEPS)
    assert closed_sessions(s) == EXPECTED  # B's 12:00 session is still open
    assert expected_sessions(FIRST_BATCH_TRAP_STEPS, 10 * MINUTE_MS) == EXPECTED
    rows = table(s, "device_sessions").sort_values("device_id")
    assert rows.avg_signal.tolist() == [2.0, 3.0]

    # What the state holds, read from the checkpoint: B's open session, closing at 12:00 + gap;
    # of the ids, only those the watermark (12:00 - 10 min) has not passed by the delay.
    state = {op.operator: op for op in read_state(spark, s, "sessions").operators}
    assert state["applyInPandasWithState"].shown == [
        f"device B: session {iso(at(12, 0))} .. {iso(at(12, 0))}, 1 event(s), "
        f"closes when the watermark reaches {iso(at(12, 30))}"]
    assert [json.loads(line.split(" value ")[0][4:])["event_id"] for line in state["dedupeWithinWatermark"].shown] == ["b3"]
    first = read_state(spark, s, "sessions", device="A", batch_id=0).operators
    assert [op.shown for op in first if op.operator == "applyInPandasWithState"] == [[
        f"device A: session {iso(at(10, 0))} .. {iso(at(10, 0))}, 1 event(s), "
        f"closes when the watermark reaches {iso(at(10, 30))}"]]
    for name, value in cli_env(s).items():
        if name.startswith("SIGFLOW_") or name == "KAFKA_BOOTSTRAP_SERVERS":
            monkeypatch.setenv(name, value)
    assert sigflow_here(["checkpoint", "inspect", "sessions", "--state", "--device", "A"]) == 0
    sessions_id = state["applyInPandasWithState"].operator_id
    assert f"applyInPandasWithState #{sessions_id}: 0 row(s)" in capsys.readouterr().out  # A's closed


def test_naive_watermark_timeout_fails_the_same_scenario(spark, settings):
    """Regression: a timeout of watermark + gap closes sessions after a single event."""
    s = single_partition(settings)
    naive = dataclasses.replace(
        SESSIONS, name="sessions-naive",
        build=lambda st, records: device_sessions(st, valid_events(st, records), timeout_from="watermark"),
    )
    play(spark, s, FIRST_BATCH_TRAP_STEPS, naive)
    naive_closed = closed_sessions(s)
    assert naive_closed != EXPECTED
    assert ("A", at(10, 0), at(10, 0), 1) in naive_closed


def test_random_out_of_order_batches_with_restarts_match_the_rule(spark, settings):
    """Three devices, events shuffled over five batches (each run a restart), some behind
    the watermark: the closed sessions equal the rule applied to the events kept."""
    s = single_partition(settings)
    rng = random.Random(17)
    events = [
        Event(f"r{d}-{i}", f"R{d}", at(6, 0) + rng.randrange(0, 4 * 60) * MINUTE_MS, float(i))
        for d in range(3) for i in range(25)
    ]
    rng.shuffle(events)
    steps = [events[i::5] for i in range(5)] + [[Event("end", "R0", at(23, 0), 0.0)]]
    play(spark, s, steps)
    expected = expected_sessions(steps, 10 * MINUTE_MS)
    assert len(expected) >= 6  # the draw makes several sessions per device
    assert closed_sessions(s) == expected


def test_state_holds_only_open_sessions_while_devices_come_and_go(spark, settings):
    s = single_partition(settings)
    for step in range(4):  # every 35 minutes, five new devices talk for 10 minutes
        base = at(6, 0) + step * 35 * 60_000
        send(s, [Event(f"s{step}-{d}-{m}", f"dev{step}-{d}", base + m * 120_000, float(m))
                 for d in range(5) for m in range(6)])
        run_job(spark, s, "sessions")
    # 35 minutes apart, a cohort's last event is 25 minutes before the next one's first; the
    # watermark (the newest event - 10 minutes) has passed the two oldest cohorts' end + gap
    held = {op.operator: op for op in read_state(spark, s, "sessions").operators}["applyInPandasWithState"]
    assert sorted(line.split(":")[0] for line in held.shown) == [
        f"device dev{step}-{d}" for step in (2, 3) for d in range(5)]
    closed = table(s, "device_sessions")
    assert sorted(set(closed.device_id)) == [f"dev{step}-{d}" for step in (0, 1) for d in range(5)]
    assert (closed.event_count == 6).all()
