"""`sigflow tables rebuild device_status`: device_status written again from the tables its
parts come from.

Three jobs merge their parts into device_status, so no job's recover rebuilds it: lost, it is
made again empty by the next run of a job writing it, and a device is back once it sends
again. Yet each part is the newest, per device, of rows a job keeps whole in a table of its
own: ingest's valid events and alerts (device_events, device_alerts), windowed-averages'
final tumbling windows (device_signal_averages), the sessions job's closed sessions
(device_sessions). The rebuild applies each job's own function from its rows to its part
(the one its batches apply) to the whole table, narrows them to each device's newest in Spark,
and merges them by the rule the batches merge by: a part changes only where the table's is
older. So it may run while the jobs run, and run again changes nothing.

What the tables do not hold is not rebuilt: an open session (device_sessions holds closed
ones), back at the sessions job's next write of it; a window keeps the values
device_signal_averages holds now, a reconcile's correction included.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import (
    DEVICE_ALERTS,
    DEVICE_EVENTS,
    DEVICE_SESSIONS,
    DEVICE_SIGNAL_AVERAGES,
    DEVICE_STATUS,
    TableSpec,
)
from spark_jobs.errors import SigflowError
from spark_jobs.jobs import ingest, sessions, windowed_averages
from spark_jobs.runtime.checkpoint import tables_kept
from spark_jobs.runtime.delta import table_access
from spark_jobs.runtime.delta.newest import newest_candidates
from spark_jobs.runtime.delta.sink import DeltaSink, merge_newest, with_kept_names

REBUILDS = tuple(tables_kept.REBUILD_COMMANDS)


class Part(NamedTuple):
    name: str
    sources: tuple[TableSpec, ...]  # the tables it comes from
    job: str  # the job that writes them
    rows_of: Callable[..., DataFrame]  # that job's function from their rows to the part's
    columns: tuple[str, ...]  # one of them set: a device has the part


PARTS = (
    Part("event and alert", (DEVICE_EVENTS, DEVICE_ALERTS), "ingest", ingest.device_status, ("event_id", "alert_id")),
    Part("window", (DEVICE_SIGNAL_AVERAGES,), "windowed-averages", windowed_averages.final_tumbling_windows,
         ("window_start",)),
    Part("session", (DEVICE_SESSIONS,), "sessions", sessions.session_status, ("session_start",)),
)


@dataclass(frozen=True)
class Rebuilt:
    table: str
    parts: tuple[str, ...]  # a line per part: where it came from, how many devices it holds
    inserted: int
    updated: int

    def lines(self) -> list[str]:
        return [*self.parts, f"{self.table} rebuilt: {self.inserted:,} rows inserted, {self.updated:,} updated "
                f"(a part changes only where the table held an older one)"]


def rebuild(spark: SparkSession, settings: Settings, table: str) -> Rebuilt:
    """Write ``table`` (device_status) again from the tables its parts come from."""
    if table not in REBUILDS:
        raise SigflowError(f"no rebuild of {table}", f"rebuilt from other tables: {', '.join(REBUILDS)}; "
                           "a job's own table is rebuilt by its recover (docs/runbooks/table-damaged.md)")
    # one read of each: a damaged one is named (TableUnreadable) before Spark reads it
    present = [part for part in PARTS
               if all(table_access.table_id(settings.table_uri(spec.name)) for spec in part.sources)]
    rows = None
    if present:
        frames = [part.rows_of(*(spark.read.format("delta").load(settings.table_uri(spec.name))
                                 for spec in part.sources)) for part in present]
        union = frames[0]
        for frame in frames[1:]:
            union = union.unionByName(frame, allowMissingColumns=True)
        union = with_kept_names(union, DEVICE_STATUS)
        rows = newest_candidates(union, DEVICE_STATUS.merge_key, DEVICE_STATUS.merge_parts).toArrow()
    said = []
    for part in PARTS:
        names = " and ".join(spec.name for spec in part.sources)
        if part not in present:
            said.append(f"{table}: {part.name} part: none, {names} not created yet ({part.job} has not run)")
            continue
        held = pc.count_distinct(rows.filter(_any_valid(rows, part.columns))["device_id"]).as_py()
        said.append(f"{table}: {part.name} part from {names}: {held:,} devices")
    if rows is None:
        return Rebuilt(table, tuple(said), 0, 0)
    DeltaSink(spark, settings).ensure_table(DEVICE_STATUS)
    merged = merge_newest(settings.table_uri(table), rows, DEVICE_STATUS, json.dumps(
        {"sigflow_rebuild": {"from": [spec.name for part in present for spec in part.sources]}}))
    return Rebuilt(table, tuple(said), merged.inserted, merged.updated)


def _any_valid(rows, columns: tuple[str, ...]):
    mask = pc.is_valid(rows[columns[0]])
    for column in columns[1:]:
        mask = pc.or_(mask, pc.is_valid(rows[column]))
    return mask
