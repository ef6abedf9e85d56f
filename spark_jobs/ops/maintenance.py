"""Daily upkeep of the Delta tables and checkpoints; never changes what a table holds,
except quarantined records and table_status rows past their retention, and device_events_raw
rows past ``raw_retention`` when it is not ``forever`` (its default: raw is what a job is
recomputed from once Kafka's retention has passed).

* compact: small files (one per table per micro-batch) merged by delta-rs ``optimize.compact``;
* vacuum: files no table version younger than ``vacuum_retention`` needs are deleted;
  a retention under ``vacuum_retention_floor`` is refused, and one that is not whole hours
  (what delta-rs takes) is rounded up, never down to 0;
* quarantine: records older than ``quarantine_retention`` are deleted;
* raw: records sent longer ago than ``raw_retention`` are deleted (never, by default);
  compaction keeps the rows, so a replay reads the same records;
* table_status: rows older than ``table_status_retention`` are deleted, each table's and job's newest
  kept (it says how complete the table is however long ago its job last ran);
* checkpoints: offset and commit entries beyond the last ``checkpoint_batches_retained``.

delta-rs is used in both modes: it reads and writes the same Delta protocol as delta-spark,
needs no Spark, and runs inside an Airflow task.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from spark_jobs.config import Settings
from spark_jobs.config.values import FOREVER
from spark_jobs.contracts.tables import (
    ALL_TABLES,
    DEVICE_EVENTS_RAW,
    QUARANTINED_EVENTS,
    TABLE_STATUS,
)
from spark_jobs.errors import ConfigError
from spark_jobs.jobs.registry import JOBS
from spark_jobs.ops import status
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.delta import table_access
from spark_jobs.runtime.delta.table_access import count_matching

log = logging.getLogger("sigflow.maintenance")


@dataclass
class TableUpkeep:
    table: str
    files_before: int
    files_after: int
    files_vacuumed: int
    rows_pruned: int = 0

    def line(self) -> str:
        pruned = f", {self.rows_pruned:,} rows past retention deleted" if self.rows_pruned else ""
        return (f"{self.table}: {self.files_before} -> {self.files_after} data files, "
                f"{self.files_vacuumed} old files vacuumed{pruned}")


def run(settings: Settings, dry_run: bool = False) -> list[str]:
    """Maintain every table and checkpoint; one line per thing done (or that would be)."""
    lines = []
    retention_hours = vacuum_retention_hours(settings)
    for name in ALL_TABLES:
        uri = settings.table_uri(name)
        if not table_access.exists(uri):
            continue
        table = table_access.open_table(uri)
        before = len(table.file_uris())
        pruned = 0
        if name == QUARANTINED_EVENTS.name:
            pruned = _prune_older(table, "ingest_time", settings.operations.quarantine_retention.seconds, dry_run)
        if name == DEVICE_EVENTS_RAW.name and settings.operations.raw_retention != FOREVER:
            pruned = _prune_older(table, "kafka_timestamp", settings.operations.raw_retention.seconds, dry_run)
        if name == TABLE_STATUS.name:
            pruned = _prune_table_status(settings, table, dry_run)
        if not dry_run:
            table.optimize.compact()
        vacuumed = table.vacuum(
            retention_hours=retention_hours, dry_run=dry_run, enforce_retention_duration=False,
        )
        after = len(table_access.open_table(uri).file_uris())
        lines.append(TableUpkeep(name, before, after, len(vacuumed), pruned).line())
    for job in JOBS:
        lines.append(_prune_checkpoint(settings, job, dry_run))
    if dry_run:
        lines.append("dry run: nothing changed")
    return [line for line in lines if line]


def vacuum_retention_hours(settings: Settings) -> int:
    """``vacuum_retention`` in the whole hours delta-rs takes, rounded up so it only ever
    keeps more; refused under ``vacuum_retention_floor``."""
    retention, floor = settings.operations.vacuum_retention, settings.operations.vacuum_retention_floor
    if retention.seconds < floor.seconds:
        raise ConfigError(
            f"vacuum_retention {retention} is under its floor of {floor}: vacuum would delete files "
            "that running batches, readers and rewinds still need",
            "set SIGFLOW_VACUUM_RETENTION to at least the floor (docs/configuration.md)",
        )
    return math.ceil(retention.seconds / 3600)


def _prune_older(table, column: str, seconds: float, dry_run: bool) -> int:
    """Delete the rows whose ``column`` is more than ``seconds`` ago; how many there were."""
    import pyarrow.dataset as ds

    cutoff = datetime.now(timezone.utc) - timedelta(seconds=seconds)
    old = count_matching(table.table_uri, ds.field(column) < cutoff)
    if old and not dry_run:
        table.delete(f"{column} < '{cutoff.strftime('%Y-%m-%d %H:%M:%S')}'")
    return old


def _prune_table_status(settings: Settings, table, dry_run: bool) -> int:
    """Delete table_status rows older than its retention, but not the newest row of a table
    and a job writing it."""
    cutoff = datetime.now(timezone.utc) - timedelta(seconds=settings.operations.table_status_retention.seconds)
    rows = table_access.read_pandas(table.table_uri, ["table_name", "job", "recorded_at"])
    if rows.empty:
        return 0
    newest = rows.groupby(["table_name", "job"]).recorded_at.max()
    # per table and job, rows before the older of the cutoff and its newest row
    bounds = {key: min(cutoff, at.to_pydatetime()) for key, at in newest.items()}
    old = sum(int(((rows.table_name == name) & (rows.job == job) & (rows.recorded_at < bound)).sum())
              for (name, job), bound in bounds.items())
    if old and not dry_run:
        table.delete(" OR ".join(
            f"(table_name = {_quoted(name)} AND job = {_quoted(job)} AND recorded_at < "
            f"'{bound.strftime('%Y-%m-%d %H:%M:%S.%f')}')" for (name, job), bound in bounds.items()))
    return old


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _prune_checkpoint(settings: Settings, job: str, dry_run: bool) -> str:
    checkpoint = Checkpoint(settings.checkpoint_uri(job))
    batches = checkpoint.offset_batches()
    if len(batches) <= settings.operations.checkpoint_batches_retained:
        return ""
    keep_from = batches[-settings.operations.checkpoint_batches_retained]
    if status.running_pid(settings, job) is not None:
        return f"checkpoint {job}: running, left to Spark's own cleanup"
    removed = len([b for b in batches if b < keep_from]) if dry_run else checkpoint.prune_before(keep_from)
    return f"checkpoint {job}: {removed} batch log entries before batch {keep_from} pruned"
