"""Late events waiting for reconcile, per job, and when reconcile last decided on any: what
`sigflow status`, `sigflow tables` and the Prometheus exporter show, read with delta-rs (no
Spark); and from where a table's rows may still be corrected."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pyarrow.dataset as ds

from spark_jobs.config import Settings
from spark_jobs.config.groups import StreamingSettings
from spark_jobs.contracts.tables import LATE_EVENTS, LATE_EVENTS_RECONCILED, TableSpec
from spark_jobs.jobs import RECONCILED_JOBS
from spark_jobs.runtime.delta.table_access import read_arrow

KEY = ["job", "topic", "partition", "offset"]


@dataclass
class LateBacklog:
    waiting: int = 0
    last_reconciled: datetime | None = None
    # the earliest time of a waiting late event reconcile will count (within late_horizon)
    earliest_counted: datetime | None = None


def backlog(settings: Settings) -> dict[str, LateBacklog]:
    """Each job reconcile corrects: its late events not decided on yet, and the last decision's time."""
    jobs = ds.field("job").isin(list(RECONCILED_JOBS))
    late = read_arrow(settings.table_uri(LATE_EVENTS.name), [*KEY, "event_time", "watermark"], jobs)
    decided = read_arrow(settings.table_uri(LATE_EVENTS_RECONCILED.name), [*KEY, "reconciled_at"], jobs)
    found = {job: LateBacklog() for job in RECONCILED_JOBS}
    if late.num_rows:
        waiting = late.group_by(KEY).aggregate([("event_time", "min"), ("watermark", "min")])
        if decided.num_rows:
            waiting = waiting.join(decided.select(KEY).group_by(KEY).aggregate([]), KEY, join_type="left anti")
        for row in waiting.group_by("job").aggregate([([], "count_all")]).to_pylist():
            found[row["job"]].waiting = row["count_all"]
        for row in waiting.to_pylist():
            if _within_horizon(row["event_time_min"], row["watermark_min"], settings.streaming):
                entry = found[row["job"]]
                if entry.earliest_counted is None or row["event_time_min"] < entry.earliest_counted:
                    entry.earliest_counted = row["event_time_min"]
    if decided.num_rows:
        for row in decided.group_by("job").aggregate([("reconciled_at", "max")]).to_pylist():
            found[row["job"]].last_reconciled = row["reconciled_at_max"]
    return found


def _tumbling_end(time: datetime, streaming: StreamingSettings) -> datetime:
    length_us = int(streaming.tumbling_window.seconds * 1_000_000)
    since_epoch_us = (time - datetime(1970, 1, 1, tzinfo=time.tzinfo)) // timedelta(microseconds=1)
    return time + timedelta(microseconds=length_us - since_epoch_us % length_us)


def _within_horizon(event_time: datetime, watermark: datetime, streaming: StreamingSettings) -> bool:
    """Reconcile's horizon rule (docs/semantics.md): lateness from the end of the tumbling window."""
    return (watermark - _tumbling_end(event_time, streaming)).total_seconds() <= streaming.late_horizon.seconds


def corrections_from(spec: TableSpec, final_through: datetime | None, entry: LateBacklog,
                     streaming: StreamingSettings) -> datetime | None:
    """The earliest value of the table's final column a correction may still change: the
    late events waiting, and those still to come (dropped at a watermark at least today's,
    so within the horizon only if no more than late_horizon before it, from the start of
    their tumbling window). A late event at t changes a window ending after t, an alert at
    or after t, a session ending no earlier than t less the gap (one it bridges). None when
    the stream has not made its rows final yet."""
    if spec.finality is None or final_through is None:
        return None
    # final_through is already the watermark less the table's wait: the late events to come
    # are bounded from it, the waiting ones from their own times
    coming = final_through - timedelta(seconds=streaming.late_horizon.seconds + streaming.tumbling_window.seconds)
    if entry.earliest_counted is None:
        return coming
    wait = getattr(streaming, spec.finality.wait).seconds if spec.finality.wait else 0
    return min(coming, entry.earliest_counted - timedelta(seconds=wait))


def describe(entry: LateBacklog) -> str:
    last = f"last reconcile {entry.last_reconciled:%Y-%m-%dT%H:%M:%SZ}" if entry.last_reconciled else "never reconciled"
    return f"late events waiting for reconcile: {entry.waiting:,}; {last}"

