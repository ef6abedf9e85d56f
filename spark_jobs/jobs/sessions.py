"""Job ``sessions``: per-device activity sessions with arbitrary state -> device_sessions, and
each device's latest session, open or closed, -> device_status.

A session is a run of a device's events with no silence longer than ``session_gap`` of event
time. Events arrive out of order and across batches, so a device may have several open
sessions at once: an event that falls within the gap of two of them bridges them into one.
A session is written once, when it can no longer change: when the watermark reaches
``last_event_time + gap``. No on-time event can join it after that, because any event not
behind the watermark is more than the gap after its last event (docs/semantics.md, sessions).

Why ``applyInPandasWithState`` with an event-time timeout: it is the stable API of the two
(``transformWithStateInPandas`` needs the RocksDB state store provider and is younger), and
one timeout per device (its earliest open session's end) is all this needs.

The first-batch trap (docs/first-batch-trap.md): in the first micro-batch the watermark is
0, so a timeout of ``watermark + gap`` would be 1970-01-01 00:30 and fire at the next batch,
closing every session after one event. Closing is therefore decided from the event times
the state holds (``last_event_time + gap``) against the watermark, which is right in the
first batch, in any later batch and after a restart, because it never depends on when the
batch ran.
"""

from __future__ import annotations

import json
from typing import Iterator, NamedTuple

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from spark_jobs.config import StreamingSettings
from spark_jobs.contracts.tables import DEVICE_SESSIONS, DEVICE_STATUS
from spark_jobs.jobs import JOB_TABLES
from spark_jobs.jobs.base import BatchContext, StreamingJob
from spark_jobs.jobs.event_time import (
    DEDUP_BY_DEVICE,
    behind_watermark,
    drop_repeats,
    valid_events,
    with_event_watermark,
)

# One device's open sessions, ordered by start, as a JSON list of Session fields. Not typed
# arrays: PySpark 4.2's worker cannot read an ARRAY field back from a state schema
# (KeyError 'elementType' in ArrayType.fromJson, measured).
STATE_SCHEMA = "open_sessions STRING"
OUTPUT_SCHEMA = DEVICE_SESSIONS.job_ddl
CLOSED_BY_GAP = "no event for the session gap"


class Session(NamedTuple):
    start_ms: int
    last_ms: int
    event_count: int
    signal_sum: float
    signal_min: float
    signal_max: float

    @classmethod
    def of_event(cls, t_ms: int, signal: float) -> "Session":
        return cls(t_ms, t_ms, 1, signal, signal, signal)

    def merged(self, other: "Session") -> "Session":
        return Session(
            min(self.start_ms, other.start_ms), max(self.last_ms, other.last_ms),
            self.event_count + other.event_count, self.signal_sum + other.signal_sum,
            min(self.signal_min, other.signal_min), max(self.signal_max, other.signal_max),
        )


def merge_sessions(sessions: list[Session], gap_ms: int) -> list[Session]:
    """Sessions ordered by start, with every two separated by no more than the gap merged."""
    merged: list[Session] = []
    for session in sorted(sessions):
        if merged and session.start_ms - merged[-1].last_ms <= gap_ms:
            merged[-1] = merged[-1].merged(session)
        else:
            merged.append(session)
    return merged


def _from_state(value: tuple) -> list[Session]:
    return [Session(*fields) for fields in json.loads(value[0])]


def _to_state(sessions: list[Session]) -> tuple:
    return (json.dumps([list(s) for s in sessions]),)


def _arrivals(batches: Iterator[pd.DataFrame], gap_ms: int) -> list[Session]:
    """One device's events of a batch as sessions: cut where two in time order are more than
    the gap apart, each run summed with numpy (a Python object per event cost a third of
    the state function's time, docs/benchmarks.md)."""
    frames = list(batches)
    events = frames[0] if len(frames) == 1 else pd.concat(frames)
    # naive times in the session's time zone, UTC (runtime/spark.py)
    times = events["event_time"].to_numpy(dtype="datetime64[ms]").astype("int64")
    signals = events["signal"].to_numpy(dtype="float64")
    order = np.argsort(times, kind="stable")
    times, signals = times[order], signals[order]
    starts = np.flatnonzero(np.concatenate(([True], np.diff(times) > gap_ms)))
    ends = np.append(starts[1:], len(times))
    return [Session(int(times[a]), int(times[b - 1]), int(b - a), float(total), float(low), float(high))
            for a, b, total, low, high in zip(starts, ends, np.add.reduceat(signals, starts),
                                              np.minimum.reduceat(signals, starts),
                                              np.maximum.reduceat(signals, starts), strict=True)]


def _closed_rows(device_id: str, closed: list[Session]) -> pd.DataFrame:
    """device_sessions rows, built by column (one pandas frame a call, not a row at a time)."""
    return pd.DataFrame({
        "device_id": [device_id] * len(closed),
        # naive, in the session's time zone (UTC)
        "session_start": np.array([s.start_ms for s in closed], dtype="datetime64[ms]"),
        "session_end": np.array([s.last_ms for s in closed], dtype="datetime64[ms]"),
        "event_count": np.array([s.event_count for s in closed], dtype="int64"),
        "avg_signal": np.array([s.signal_sum / s.event_count for s in closed], dtype="float64"),
        "min_signal": np.array([s.signal_min for s in closed], dtype="float64"),
        "max_signal": np.array([s.signal_max for s in closed], dtype="float64"),
        "closed_reason": [CLOSED_BY_GAP] * len(closed),
    })


def _open_row(device_id: str, latest: Session) -> pd.DataFrame:
    """The device's latest open session as a row of the output, without a closed_reason:
    device_status shows it, device_sessions never holds it."""
    row = _closed_rows(device_id, [latest])
    row["closed_reason"] = [None]
    return row


def session_updater(gap_ms: int, timeout_from: str = "event_time", with_open: bool = False):
    """The per-device state function. ``timeout_from="watermark"`` is the naive variant
    (timeout = current watermark + gap, and a timeout closes everything), kept only to show
    the first-batch trap in tests. ``with_open`` adds, at each call that leaves the device a
    session open, its latest open session (a row without closed_reason)."""
    naive = timeout_from == "watermark"

    def update(key: tuple, batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        (device_id,) = key
        watermark = state.getCurrentWatermarkMs()
        sessions = _from_state(state.get) if state.exists else []
        if not state.hasTimedOut:
            sessions = merge_sessions(sessions + _arrivals(batches, gap_ms), gap_ms)
        if naive:
            closed, still_open = (sessions, []) if state.hasTimedOut else ([], sessions)
        else:
            closed = [s for s in sessions if s.last_ms + gap_ms <= watermark]
            still_open = [s for s in sessions if s.last_ms + gap_ms > watermark]
        if still_open:
            state.update(_to_state(still_open))
            # Spark fires an event-time timeout once the watermark is past the timestamp:
            # minus 1 ms makes it fire exactly when the earliest open session may close.
            earliest_end = min(s.last_ms for s in still_open) + gap_ms - 1
            state.setTimeoutTimestamp(watermark + gap_ms if naive else earliest_end)
        elif state.exists:
            state.remove()
        if closed:
            yield _closed_rows(device_id, closed)
        if with_open and still_open:
            yield _open_row(device_id, max(still_open, key=lambda session: session.last_ms))

    return update


def device_sessions(settings: StreamingSettings, events: DataFrame, timeout_from: str = "event_time") -> DataFrame:
    gap_ms = settings.session_gap.ms
    # the watermark the sessions' event-time timeouts fire on, and the lateness rule's
    watermarked = with_event_watermark(settings, events)
    return (
        drop_repeats(watermarked)
        .select("device_id", "event_time", "signal")
        .groupBy("device_id")
        .applyInPandasWithState(
            session_updater(gap_ms, timeout_from, with_open=True),
            outputStructType=OUTPUT_SCHEMA,
            stateStructType=STATE_SCHEMA,
            outputMode="append",
            timeoutConf=GroupStateTimeout.EventTimeTimeout,
        )
    )


def split(settings: StreamingSettings, rows: DataFrame, batch: BatchContext) -> dict[str, DataFrame]:
    """The closed sessions to device_sessions; every session the batch closed or left open to
    device_status, whose merge keeps each device's latest (runtime/delta/newest.py)."""
    return {
        DEVICE_SESSIONS.name: rows.where(F.col("closed_reason").isNotNull()),
        DEVICE_STATUS.name: rows.select(
            "device_id", "session_start", F.col("session_end").alias("session_last_event_time"),
            F.col("event_count").alias("session_event_count"), F.col("avg_signal").alias("session_avg_signal"),
            F.col("closed_reason").isNotNull().alias("session_closed")),
    }


SESSIONS = StreamingJob(
    name="sessions",
    summary="per-device activity sessions closed once the watermark passes last event + gap -> device_sessions; "
            "each device's latest session, open or closed -> device_status",
    topics=lambda settings: [settings.events_topic],
    build=lambda settings, records: device_sessions(settings, valid_events(settings, records)),
    split=split,
    tables=JOB_TABLES["sessions"],
    late_rule=behind_watermark,
    checkpoint_settings=("session_gap",),
    # 1: a single session's fields; 2: a device's open sessions as one JSON list; 3: events
    # deduplicated by device and id
    state_format=DEDUP_BY_DEVICE,
)
