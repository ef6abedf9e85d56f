"""Late events waiting for reconcile, per job, and when reconcile last decided on any: what
`sigflow status` and the Prometheus exporter show, read with delta-rs (no Spark)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow.dataset as ds

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import LATE_EVENTS, LATE_EVENTS_RECONCILED
from spark_jobs.jobs import RECONCILED_JOBS
from spark_jobs.runtime.delta.table_access import read_arrow

KEY = ["job", "topic", "partition", "offset"]


@dataclass
class LateBacklog:
    waiting: int = 0
    last_reconciled: datetime | None = None


def backlog(settings: Settings) -> dict[str, LateBacklog]:
    """Each job reconcile corrects: its late events not decided on yet, and the last decision's time."""
    jobs = ds.field("job").isin(list(RECONCILED_JOBS))
    late = read_arrow(settings.table_uri(LATE_EVENTS.name), KEY, jobs)
    decided = read_arrow(settings.table_uri(LATE_EVENTS_RECONCILED.name), [*KEY, "reconciled_at"], jobs)
    found = {job: LateBacklog() for job in RECONCILED_JOBS}
    if late.num_rows:
        waiting = late.group_by(KEY).aggregate([])
        if decided.num_rows:
            waiting = waiting.join(decided.select(KEY).group_by(KEY).aggregate([]), KEY, join_type="left anti")
        for row in waiting.group_by("job").aggregate([([], "count_all")]).to_pylist():
            found[row["job"]].waiting = row["count_all"]
    if decided.num_rows:
        for row in decided.group_by("job").aggregate([("reconciled_at", "max")]).to_pylist():
            found[row["job"]].last_reconciled = row["reconciled_at_max"]
    return found


def describe(entry: LateBacklog) -> str:
    last = f"last reconcile {entry.last_reconciled:%Y-%m-%dT%H:%M:%SZ}" if entry.last_reconciled else "never reconciled"
    return f"late events waiting for reconcile: {entry.waiting:,}; {last}"

