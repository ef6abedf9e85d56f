"""`sigflow tables`: every table a reader can read, with its version, its rows (from its files'
statistics: no row is read), whether its change feed is on, and for a job's table how fresh
and how complete it is, from table_status (the same rows a reader without sigflow reads)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import ALL_TABLES, TABLE_STATUS
from spark_jobs.jobs import RECONCILED_JOBS, writers_of
from spark_jobs.ops import late_backlog
from spark_jobs.runtime.checkpoint import tables_kept
from spark_jobs.runtime.delta import log_damage, table_access
from spark_jobs.runtime.delta.increments import added_since

CHANGE_FEED = "delta.enableChangeDataFeed"


@dataclass(frozen=True)
class Writing:
    """How far one job has written a table, from its newest table_status row."""

    job: str
    batch_time: datetime | None = None  # every record in Kafka before it is in the table
    final_through: datetime | None = None  # rows whose final column is at or before it: no more from the stream
    late_waiting: int | None = None  # late events of the job reconcile has not decided on (a corrected table)
    corrections_from: datetime | None = None  # rows whose final column is before it: no correction either

    def describe(self, table: str) -> str:
        if self.batch_time is None:
            return "no batch yet"
        spec = ALL_TABLES[table]
        final = (f"final through {self.final_through:%Y-%m-%dT%H:%M:%SZ} by {spec.finality.column}"
                 if self.final_through and spec.finality
                 else "rows updated in place" if spec.merge_key
                 else "final as written" if spec.finality is None else "no watermark yet")
        text = f"has Kafka's records up to {self.batch_time:%Y-%m-%dT%H:%M:%SZ}, {final}"
        if self.late_waiting is not None:
            text += f", {self.late_waiting:,} late events waiting for reconcile"
        if self.corrections_from is not None:
            text += f", corrections possible from {self.corrections_from:%Y-%m-%dT%H:%M:%SZ}"
        return text


@dataclass(frozen=True)
class TableOverview:
    name: str
    version: int | None  # None: not created yet
    rows: int = 0
    change_feed: bool = False
    writers: tuple[Writing, ...] = ()
    damage: str = ""  # why it cannot be read, when it cannot
    lost: str = ""  # what became of it since its job wrote it, when it is not that table any more

    def line(self) -> str:
        if self.damage:
            return f"{self.name}: CANNOT BE READ: {self.damage} (see {log_damage.RUNBOOK})"
        if self.lost:
            return f"{self.name}: LOST: it {self.lost}, its rows with it (see {log_damage.RUNBOOK})"
        if self.version is None:
            return f"{self.name}: not created yet (sigflow_deploy or the job's first run creates it)"
        parts = [f"version {self.version}", f"{self.rows:,} rows", f"change feed {'on' if self.change_feed else 'OFF'}"]
        if len(self.writers) == 1:
            parts += [f"written by {self.writers[0].job}", self.writers[0].describe(self.name)]
        elif self.writers:
            parts.append("written by " + "; ".join(
                f"{writing.job} ({writing.describe(self.name)})" for writing in self.writers))
        else:  # no job's batches complete it (late_events, pipeline_metrics, table_status, ...)
            parts.append(f"no completeness to report, rows final {ALL_TABLES[self.name].final}")
        return f"{self.name}: " + ", ".join(parts)


def overview(settings: Settings) -> list[TableOverview]:
    """Every table's overview; one that cannot be read says so in its place, and the others
    are still shown (without the completeness table_status or late_events would give, if
    it is one of those)."""
    try:
        latest = _latest_status(settings)
    except log_damage.TableUnreadable:
        latest = {}
    try:
        backlog = late_backlog.backlog(settings)
    except log_damage.TableUnreadable:
        backlog = {}
    lost = tables_kept.lost_tables(settings)
    found = []
    for name in ALL_TABLES:
        uri = settings.table_uri(name)
        if name in lost:
            found.append(TableOverview(name, None, lost=lost[name]))
            continue
        if not table_access.exists(uri):
            found.append(TableOverview(name, None))
            continue
        try:
            table = table_access.open_table(uri)
        except log_damage.TableUnreadable as unreadable:
            found.append(TableOverview(name, None, damage=unreadable.finding))
            continue
        writers = tuple(_writing(settings, name, job, latest.get((name, job), {}), backlog.get(job))
                        for job in writers_of(name))
        found.append(TableOverview(
            name, table.version(), added_since(uri, None).rows,
            table.metadata().configuration.get(CHANGE_FEED) == "true", writers))
    return found


def _writing(settings: Settings, table: str, job: str, status: dict,
             backlog: late_backlog.LateBacklog | None) -> Writing:
    spec = ALL_TABLES[table]
    if not spec.corrected or job not in RECONCILED_JOBS or backlog is None:
        return Writing(job, status.get("batch_time"), status.get("final_through"))
    return Writing(job, status.get("batch_time"), status.get("final_through"), backlog.waiting,
                   late_backlog.corrections_from(spec, status.get("final_through"), backlog, settings.streaming))


def _latest_status(settings: Settings) -> dict[tuple[str, str], dict]:
    """The newest table_status row of each table and job writing it."""
    rows = table_access.read_arrow(settings.table_uri(TABLE_STATUS.name),
                                   ["table_name", "job", "batch_time", "final_through", "recorded_at"]).to_pylist()
    latest: dict[tuple[str, str], dict] = {}
    for row in rows:
        key = (row["table_name"], row["job"])
        if key not in latest or row["recorded_at"] > latest[key]["recorded_at"]:
            latest[key] = row
    return latest
