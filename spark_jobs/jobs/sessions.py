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
one timeout per bucket of devices (its earliest open session's end) is all this needs.

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
from spark_jobs.contracts.dictionary import CLOSED_BY_GAP
from spark_jobs.contracts.tables import DEVICE_SESSIONS, DEVICE_STATUS
from spark_jobs.jobs import JOB_TABLES
from spark_jobs.jobs.base import BatchContext, StreamingJob
from spark_jobs.jobs.event_time import (
    behind_watermark,
    drop_repeats,
    observed_events,
    with_event_watermark,
)

# Devices' sessions are kept per bucket of devices (a hash of device_id): the state function
# is called once per bucket that has events or a due timeout, and works on all its devices at
# once with numpy. Called per device, its fixed cost (a pandas frame in and out, the state's
# row) made a batch's cost grow with the fleet: 3.2 s for 1,000 devices, 9.4 s for 10,000 at
# the same rate (docs/benchmarks.md). Changing the count changes the state's layout
# (STATE_FORMAT).
SESSION_BUCKETS = 64
# A bucket's open sessions, as a JSON object of columns (OPEN's names, one list each). Not typed
# arrays: PySpark 4.2's worker cannot read an ARRAY field back from a state schema
# (KeyError 'elementType' in ArrayType.fromJson, measured).
STATE_SCHEMA = "open_sessions STRING"
OPEN = ("device_id", "start_ms", "last_ms", "event_count", "signal_sum", "signal_min", "signal_max")
OUTPUT_SCHEMA = DEVICE_SESSIONS.job_ddl
# 1: a single session's fields; 2: a device's open sessions as one JSON list; 3: events
# deduplicated by device and id; 4: the open sessions of a bucket of devices
STATE_FORMAT = 4


class Session(NamedTuple):
    """One open session, as `sigflow checkpoint inspect --state` shows it."""

    device_id: str
    start_ms: int
    last_ms: int
    event_count: int
    signal_sum: float
    signal_min: float
    signal_max: float


def open_sessions(state_value: str) -> list[Session]:
    """The open sessions a bucket's state holds."""
    columns = json.loads(state_value)
    return [Session(*fields) for fields in zip(*(columns[name] for name in OPEN), strict=True)]


def merge_sessions(sessions: pd.DataFrame, gap_ms: int) -> pd.DataFrame:
    """Per device, sessions (a single event is one) no more than the gap apart merged into
    one: ordered by start, a session joins the run before it when it starts no more than the
    gap after the latest last event of that run."""
    if sessions.empty:
        return sessions
    sessions = sessions.sort_values(["device_id", "start_ms", "last_ms"], kind="stable", ignore_index=True)
    device = sessions["device_id"].to_numpy()
    start, last = sessions["start_ms"].to_numpy(), sessions["last_ms"].to_numpy()
    new_device = np.concatenate(([True], device[1:] != device[:-1]))
    reach = sessions["last_ms"].groupby(np.cumsum(new_device)).cummax().to_numpy()
    runs = np.flatnonzero(new_device | (start - np.concatenate(([start[0]], reach[:-1])) > gap_ms))
    return pd.DataFrame({
        "device_id": device[runs], "start_ms": start[runs], "last_ms": np.maximum.reduceat(last, runs),
        "event_count": np.add.reduceat(sessions["event_count"].to_numpy(), runs),
        "signal_sum": np.add.reduceat(sessions["signal_sum"].to_numpy(), runs),
        "signal_min": np.minimum.reduceat(sessions["signal_min"].to_numpy(), runs),
        "signal_max": np.maximum.reduceat(sessions["signal_max"].to_numpy(), runs),
    })


def _held(state: GroupState) -> pd.DataFrame:
    columns = json.loads(state.get[0]) if state.exists else {name: [] for name in OPEN}
    return pd.DataFrame({name: columns[name] for name in OPEN}).astype(
        {"start_ms": "int64", "last_ms": "int64", "event_count": "int64", "signal_sum": "float64",
         "signal_min": "float64", "signal_max": "float64"})


def _to_state(sessions: pd.DataFrame) -> tuple:
    return (json.dumps({name: sessions[name].tolist() for name in OPEN}),)


def _arrivals(batches: Iterator[pd.DataFrame]) -> pd.DataFrame:
    """The batch's events of the bucket, each a session of one event."""
    frames = list(batches)
    events = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    # naive times in the session's time zone, UTC (runtime/spark.py)
    times = events["event_time"].to_numpy(dtype="datetime64[ms]").astype("int64")
    signals = events["signal"].to_numpy(dtype="float64")
    return pd.DataFrame({"device_id": events["device_id"].to_numpy(), "start_ms": times, "last_ms": times,
                         "event_count": np.ones(len(times), dtype="int64"), "signal_sum": signals,
                         "signal_min": signals, "signal_max": signals})


def _output_rows(sessions: pd.DataFrame, closed_reason: str | None) -> pd.DataFrame:
    """Sessions as rows of the output (naive times, in the session's time zone, UTC)."""
    return pd.DataFrame({
        "device_id": sessions["device_id"].to_numpy(),
        "session_start": sessions["start_ms"].to_numpy().astype("datetime64[ms]"),
        "session_end": sessions["last_ms"].to_numpy().astype("datetime64[ms]"),
        "event_count": sessions["event_count"].to_numpy(),
        "avg_signal": sessions["signal_sum"].to_numpy() / sessions["event_count"].to_numpy(),
        "min_signal": sessions["signal_min"].to_numpy(),
        "max_signal": sessions["signal_max"].to_numpy(),
        "closed_reason": np.full(len(sessions), closed_reason, dtype=object),
    })


def _latest_per_device(sessions: pd.DataFrame) -> pd.DataFrame:
    """Each device's latest session: merged sessions of a device ordered by start are more
    than the gap apart, so the last by start is the one with the latest event."""
    device = sessions["device_id"].to_numpy()
    return sessions[np.concatenate((device[1:] != device[:-1], [True]))] if len(device) else sessions


def session_updater(gap_ms: int, timeout_from: str = "event_time", with_open: bool = False):
    """The state function of a bucket of devices. ``timeout_from="watermark"`` is the naive
    variant (timeout = current watermark + gap, and a timeout closes everything), kept only
    to show the first-batch trap in tests. ``with_open`` adds, for each device with events in
    the call that it leaves a session open, its latest open session (a row without
    closed_reason)."""
    naive = timeout_from == "watermark"

    def update(key: tuple, batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        watermark = state.getCurrentWatermarkMs()
        sessions = _held(state)
        arrived = pd.Series([], dtype=object)
        if not state.hasTimedOut:
            arrivals = _arrivals(batches)
            arrived = arrivals["device_id"]
            sessions = merge_sessions(pd.concat([sessions, arrivals], ignore_index=True), gap_ms)
        if naive:
            closing = np.full(len(sessions), state.hasTimedOut)
        else:
            closing = (sessions["last_ms"] + gap_ms <= watermark).to_numpy()
        closed, still_open = sessions[closing], sessions[~closing]
        if len(still_open):
            state.update(_to_state(still_open))
            # Spark fires an event-time timeout once the watermark is past the timestamp:
            # minus 1 ms makes it fire exactly when the earliest open session may close.
            earliest_end = int(still_open["last_ms"].min()) + gap_ms - 1
            state.setTimeoutTimestamp(watermark + gap_ms if naive else earliest_end)
        elif state.exists:
            state.remove()
        rows = [_output_rows(closed, CLOSED_BY_GAP)] if len(closed) else []
        # the open sessions that changed: those of the devices with events in this call (the
        # bucket's other devices' are as they were, and re-sending them cost a batch at
        # 100,000 devices a row per device)
        changed = still_open[still_open["device_id"].isin(arrived)] if with_open else still_open.iloc[:0]
        if len(changed):
            rows.append(_output_rows(_latest_per_device(changed), None))
        if rows:
            yield rows[0] if len(rows) == 1 else pd.concat(rows, ignore_index=True)

    return update


def device_sessions(settings: StreamingSettings, events: DataFrame, timeout_from: str = "event_time") -> DataFrame:
    gap_ms = settings.session_gap.ms
    # the watermark the sessions' event-time timeouts fire on, and the lateness rule's
    watermarked = with_event_watermark(settings, events)
    return (
        drop_repeats(watermarked)
        .select("device_id", "event_time", "signal",
                F.pmod(F.xxhash64("device_id"), F.lit(SESSION_BUCKETS)).alias("bucket"))
        .groupBy("bucket")
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
    return {DEVICE_SESSIONS.name: rows.where(F.col("closed_reason").isNotNull()), DEVICE_STATUS.name: session_status(rows)}


def session_status(sessions: DataFrame) -> DataFrame:
    """device_status's session part of each session, open or closed (``closed_reason`` null
    while open): a batch's, or device_sessions' rows."""
    return sessions.select(
        "device_id", "session_start", "session_end",
        F.col("event_count").alias("session_event_count"), F.col("avg_signal").alias("session_avg_signal"),
        F.col("closed_reason").isNotNull().alias("session_closed"))


SESSIONS = StreamingJob(
    name="sessions",
    summary="per-device activity sessions closed once the watermark passes last event + gap -> device_sessions; "
            "each device's latest session, open or closed -> device_status",
    topics=lambda settings: [settings.events_topic],
    build=lambda settings, records: device_sessions(settings, observed_events(settings, records)),
    split=split,
    tables=JOB_TABLES["sessions"],
    late_rule=behind_watermark,
    checkpoint_settings=("session_gap",),
    state_format=STATE_FORMAT,
)
