"""Job ``sessions``: per-device activity sessions with arbitrary state -> device_sessions.

A session ends when a device sends nothing for ``session_gap`` of event time. It is written
once, when closed: by a new event more than the gap after its last one (same batch), or by
the event-time timeout once the watermark passes ``last_event_time + gap``.

Why ``applyInPandasWithState`` with an event-time timeout: it is the stable API of the two
(``transformWithStateInPandas`` needs the RocksDB state store provider and is younger), and
one timeout per device is all a session needs.

The first-batch trap (docs/first-batch-trap.md): in the first micro-batch the watermark is
0, so a timeout of ``watermark + gap`` would be 1970-01-01 00:30 and fire at the next batch,
closing every session after one event. The timeout is therefore derived from the event times
the state has seen (``last_event_time + gap``), which is right in the first batch, in any
later batch and after a restart, because it never depends on when the batch ran.
"""

from __future__ import annotations

from typing import Iterator

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from spark_jobs.config import Settings, duration_seconds
from spark_jobs.jobs.base import StreamingJob
from spark_jobs.jobs.event_time import behind_watermark, deduplicate, valid_events
from spark_jobs.tables import DEVICE_SESSIONS

STATE_SCHEMA = "start_ms LONG, last_ms LONG, event_count LONG, signal_sum DOUBLE, signal_min DOUBLE, signal_max DOUBLE"
OUTPUT_SCHEMA = DEVICE_SESSIONS.ddl
CLOSED_BY_GAP = "no event for the session gap"
CLOSED_BY_NEW_EVENT = "next event came after the session gap"


def _closed(device_id: str, s: tuple, reason: str) -> dict:
    start_ms, last_ms, count, total, low, high = s
    return {
        "device_id": device_id,
        "session_start": pd.Timestamp(start_ms, unit="ms", tz="UTC"),
        "session_end": pd.Timestamp(last_ms, unit="ms", tz="UTC"),
        "event_count": count,
        "avg_signal": total / count,
        "min_signal": low,
        "max_signal": high,
        "closed_reason": reason,
    }


def session_updater(gap_ms: int, timeout_from: str = "event_time"):
    """The per-device state function. ``timeout_from="watermark"`` is the naive variant
    (timeout = current watermark + gap), kept only to show the first-batch trap in tests."""

    def update(key: tuple, batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        (device_id,) = key
        closed: list[dict] = []
        if state.hasTimedOut:
            closed.append(_closed(device_id, state.get, CLOSED_BY_GAP))
            state.remove()
        else:
            session = state.get if state.exists else None
            events = pd.concat(list(batches)).sort_values("event_time")
            times = pd.to_datetime(events["event_time"], utc=True).dt.as_unit("ms").astype("int64").tolist()
            for t_ms, signal in zip(times, events["signal"].tolist(), strict=True):
                if session is not None and t_ms > session[1] + gap_ms:
                    closed.append(_closed(device_id, session, CLOSED_BY_NEW_EVENT))
                    session = None
                if session is None:
                    session = (t_ms, t_ms, 1, signal, signal, signal)
                else:
                    start, last, count, total, low, high = session
                    session = (min(start, t_ms), max(last, t_ms), count + 1, total + signal,
                               min(low, signal), max(high, signal))
            watermark = state.getCurrentWatermarkMs()
            timeout = session[1] + gap_ms if timeout_from == "event_time" else watermark + gap_ms
            if timeout <= watermark:  # already past its gap (a late-arriving session)
                closed.append(_closed(device_id, session, CLOSED_BY_GAP))
                if state.exists:
                    state.remove()
            else:
                state.update(session)
                state.setTimeoutTimestamp(timeout)
        if closed:
            yield pd.DataFrame(closed)

    return update


def device_sessions(settings: Settings, events: DataFrame, timeout_from: str = "event_time") -> DataFrame:
    gap_ms = int(duration_seconds(settings.session_gap, "session_gap") * 1000)
    return (
        deduplicate(settings, events)
        .select("device_id", "event_time", "signal")
        .groupBy("device_id")
        .applyInPandasWithState(
            session_updater(gap_ms, timeout_from),
            outputStructType=OUTPUT_SCHEMA,
            stateStructType=STATE_SCHEMA,
            outputMode="append",
            timeoutConf=GroupStateTimeout.EventTimeTimeout,
        )
    )


SESSIONS = StreamingJob(
    name="sessions",
    summary="per-device activity sessions closed after an event-time gap -> device_sessions",
    topics=lambda settings: [settings.events_topic],
    build=lambda settings, records: device_sessions(settings, valid_events(records)),
    split=lambda settings, rows, batch: {DEVICE_SESSIONS.name: rows},
    tables=(DEVICE_SESSIONS,),
    late_rule=behind_watermark,
    checkpoint_settings=("session_gap",),
)
