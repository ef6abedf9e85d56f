"""The sessions job's state function, called as Spark calls it for one device: with PySpark's
own GroupState, the watermark of the batch, and the device's events of that batch (or none,
when its timeout fires). The rule (docs/semantics.md, sessions): events no more than the gap
apart are one session, in any order and across batches; a session is written once the
watermark reaches its last event + gap, and not before. The end-to-end tests of the job
(test_sessions.py) prove the same rule through Spark, Kafka and Delta, restarts included."""

from __future__ import annotations

import json
from typing import NamedTuple

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import StringType, StructField, StructType

from spark_jobs.jobs.sessions import session_updater
from tests.helpers import at
from tests.oracle import MINUTE_MS

GAP_MS = 30 * MINUTE_MS
update = session_updater(GAP_MS)


class Call(NamedTuple):
    closed: list[tuple]  # (start, end, events, avg signal) per session written
    state: str | None  # what the device keeps for the next batch, None when removed
    timeout_ms: int  # when Spark is to call again without data


def call(state: str | None, watermark_ms: int, events: list[tuple[int, float]] = (), timed_out=False) -> Call:
    group_state = GroupState(
        Row(open_sessions=state) if state is not None else None, 0, watermark_ms,
        GroupStateTimeout.EventTimeTimeout, timed_out, True,
        state is not None, False, False, GroupState.NO_TIMESTAMP,
        b"", StructType([StructField("open_sessions", StringType())]),
    )
    batches = [] if timed_out else [pd.DataFrame({
        "device_id": "D", "event_time": [pd.Timestamp(t, unit="ms", tz="UTC") for t, _ in events],
        "signal": [signal for _, signal in events],
    })]
    out = list(update(("D",), iter(batches), group_state))
    closed = [
        (int(r.session_start.timestamp() * 1000), int(r.session_end.timestamp() * 1000), r.event_count, r.avg_signal)
        for frame in out for r in frame.itertuples()
    ]
    held = group_state.get[0] if group_state.exists else None
    return Call(closed, held, json.loads(group_state.json())["timeoutTimestamp"])


def test_an_out_of_order_event_in_a_later_batch_bridges_two_open_sessions():
    """8:10 -> 8:45 is more than the gap, but a watermark of 8:35 has not reached 8:10 + gap,
    so both stay open; 8:40 arrives on time in the next batch and joins them into one."""
    first = call(None, 0, [(at(8, 0), 1.0), (at(8, 10), 1.0), (at(8, 45), 1.0)])
    assert first.closed == []
    assert first.timeout_ms == at(8, 10) + GAP_MS - 1  # Spark calls once the watermark is past it
    second = call(first.state, at(8, 35), [(at(8, 40), 5.0)])
    assert second.closed == []
    assert second.timeout_ms == at(8, 45) + GAP_MS - 1  # one session now, ending 8:45
    closing = call(second.state, at(9, 50), timed_out=True)
    assert closing.closed == [(at(8, 0), at(8, 45), 4, 2.0)]
    assert closing.state is None  # nothing of the device is kept once its sessions are written


def test_an_older_event_beyond_the_gap_opens_its_own_session_which_closes_on_its_own():
    """Under a 2-hour watermark delay 9:00 is on time after 10:00-10:10; an hour before that
    session it is a session of its own, not an extension back to 9:00, and it closes first."""
    first = call(None, 0, [(at(10, 0), 1.0), (at(10, 10), 3.0)])
    second = call(first.state, at(8, 10), [(at(9, 0), 7.0)])
    assert second.closed == [] and second.timeout_ms == at(9, 0) + GAP_MS - 1
    at_930 = call(second.state, at(9, 30), timed_out=True)
    assert at_930.closed == [(at(9, 0), at(9, 0), 1, 7.0)]
    assert at_930.timeout_ms == at(10, 10) + GAP_MS - 1
    at_1040 = call(at_930.state, at(10, 40), timed_out=True)
    assert at_1040.closed == [(at(10, 0), at(10, 10), 2, 2.0)] and at_1040.state is None


def test_a_silence_of_exactly_the_gap_continues_the_session_and_one_second_more_ends_it():
    exactly = call(None, 0, [(at(10, 0), 1.0), (at(10, 30), 3.0)])
    one_more = call(None, 0, [(at(10, 0), 1.0), (at(10, 30, 1), 3.0)])
    assert call(exactly.state, at(11, 30), timed_out=True).closed == [(at(10, 0), at(10, 30), 2, 2.0)]
    assert call(one_more.state, at(11, 30, 1), timed_out=True).closed == [
        (at(10, 0), at(10, 0), 1, 1.0), (at(10, 30, 1), at(10, 30, 1), 1, 3.0),
    ]


def test_a_session_is_written_when_the_watermark_reaches_last_event_plus_gap_not_a_millisecond_before():
    """At that watermark no on-time event can join it any more: one at last + gap or before
    is late (docs/semantics.md), one after it is more than the gap away."""
    opened = call(None, 0, [(at(10, 0), 1.0)])
    before = call(opened.state, at(10, 30) - 1, [(at(10, 30), 2.0)])  # on time, extends it
    assert before.closed == [] and before.timeout_ms == at(11, 0) - 1
    assert call(before.state, at(11, 0) - 1, timed_out=True).closed == []
    assert call(before.state, at(11, 0), timed_out=True).closed == [(at(10, 0), at(10, 30), 2, 1.5)]
