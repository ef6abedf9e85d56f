"""Exactly-once Delta writes: micro-batches with delta-spark, the few rows a driver holds
(pipeline_metrics, a batch's late events) with delta-rs.

Every commit records its app id (the checkpoint's id) and batch id in its metadata, with the
batch's Kafka end offsets and watermark (``sigflow checkpoint recover`` rebuilds a lost
checkpoint from them). A batch that can be a replay is checked against them and appended
under Delta's application transaction (txnAppId = app id, txnVersion = batch id), so a
batch that committed to Delta but not to Spark's commit log is not written twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

import pyarrow as pa
import tenacity
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import TableSpec
from spark_jobs.runtime.checkpoint.tables_kept import (
    RUNBOOK,
    TableLost,
    rebuild_command,
)
from spark_jobs.runtime.delta import fence, schema, table_access
from spark_jobs.runtime.delta.commit_info import CommitInfo
from spark_jobs.runtime.delta.newest import newest_per_key
from spark_jobs.runtime.delta.properties import table_properties
from spark_jobs.runtime.delta.table_access import commit_metadata

log = logging.getLogger("sigflow.delta")


class DeltaSink:
    """Writes micro-batches to Delta tables with delta-spark, once per (app id, batch id)."""

    def __init__(self, spark: SparkSession, settings: Settings):
        self.spark = spark
        self.settings = settings
        self.table_ids: dict[str, str] = {}  # the run's own tables, by the ids its start recorded

    def hold_ids(self, ids: Mapping[str, str]) -> None:
        """The ids of the tables only this run's job writes, as its start recorded them: an
        append that lands in a table of another id stops the job (``_append``)."""
        self.table_ids = dict(ids)

    def uri(self, spec: TableSpec) -> str:
        return self.settings.table_uri(spec.name)

    def ensure_table(self, spec: TableSpec) -> str:
        """Create the table when missing, or add the columns it lacks, and keep its retention
        as the settings say: what was done. Created by delta-rs, in a tenth of the time of
        Spark's CREATE TABLE, with the version checksum a first Spark append reads
        (``version_checksum``; docs/streaming-facts.md)."""
        return schema.create_table(self.uri(spec), spec, table_properties(self.settings, spec))

    def committed_version(self, spec: TableSpec, app_id: str) -> int | None:
        """The highest version the table's application transaction of ``app_id`` holds."""
        return table_access.open_table(self.uri(spec)).transaction_version(app_id)

    def committed_batch(self, spec: TableSpec, app_id: str) -> int | None:
        """The highest batch of ``app_id`` the table holds: from its application transaction,
        or from the sigflow metadata of commits made without one (newest first, so the
        search ends at this app id's latest commit)."""
        recorded = self.committed_version(spec, app_id)
        found = None
        for limit in (50, None):  # the whole history only when the newest 50 hold none of it
            metadata = commit_metadata(self.uri(spec), limit)
            found = next((int(m["batch_id"]) for m in metadata
                          if m.get("app_id") == app_id and m.get("batch_id") is not None), None)
            if found is not None or limit is None:
                break
        return max((v for v in (recorded, found) if v is not None), default=None)

    def _already_committed(self, spec: TableSpec, app_id: str, version: int, done: int | None) -> bool:
        if done is not None and done >= version:
            log.info("%s: batch %s already committed by %s, skipped", spec.name, version, app_id)
            return True
        return False

    def append(self, df: DataFrame, spec: TableSpec, info: CommitInfo, replay_possible: bool = True,
               still_held: Callable[[], None] = lambda: None) -> int | None:
        """Append one batch's rows. Returns the rows written, or None when already written.

        Only a batch that an earlier run planned can be a replay: it is checked against the
        table and appended under Delta's application transaction (whose lookup rebuilds the
        table's state, about 0.5 s of driver CPU). A batch this run planned itself is new by
        construction, since the checkpoint's lease admits one run at a time: it is appended
        without the lookup, its (app id, batch id) in the commit's metadata, where the replay
        check of a later run finds it (docs/semantics.md).

        A commit a takeover's fence failed (``fence.py``) landed nothing: ``still_held``
        raises when this run lost its lease (the fence was against it), else the append is
        made again (another job's fence of a table both append to)."""
        for attempt in _commit_again(tenacity.retry_if_exception(fence.is_fenced_commit), attempts=5):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    still_held()
                    log.info("%s: a fence failed batch %s's commit, this run still holds its lease: appending "
                             "again", spec.name, info.batch_id)
                if not replay_possible:
                    return self._append(df, spec, info, transaction=False)
                if self._already_committed(spec, info.app_id, info.batch_id,
                                           self.committed_batch(spec, info.app_id)):
                    return None
                return self._append(df, spec, info, transaction=True)

    def append_held(self, rows: pa.Table, spec: TableSpec, info: CommitInfo, replay_possible: bool = True,
                    still_held: Callable[[], None] = lambda: None) -> int | None:
        """Append one batch's rows the driver holds (its late events) with delta-rs, once, as
        ``append`` does: the rows written, None when already written, and no commit for none.

        A Spark append of 1,000 such rows took twice the CPU of collecting them and
        appending through delta-rs (docs/benchmarks.md), most of it in Delta's write job and
        its transaction. A commit that conflicts (a fence, another job's rewind deleting its
        rows from the table) is made again on the table as it now is while this run holds its
        lease; ``still_held`` raises when it lost it."""
        if rows.num_rows == 0:
            return 0
        rows = rows.select(list(spec.columns)).cast(schema.arrow_schema(spec))
        for attempt in _commit_again(tenacity.retry_if_exception_type(table_access.CommitConflict)):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    still_held()
                table = table_access.open_table(self.uri(spec))  # the commit's read: a fence after it fails it
                if replay_possible and self._already_committed(spec, info.app_id, info.batch_id,
                                                               self.committed_batch(spec, info.app_id)):
                    return None
                table_access.append(table, rows, info.user_metadata(),
                                    (info.app_id, info.batch_id) if replay_possible else None)
        return rows.num_rows

    def merge(self, df: DataFrame, spec: TableSpec, info: CommitInfo) -> int:
        """Merge one batch's rows into a table kept current by key (``spec.merge_key``): the
        rows it inserted or updated. The batch's rows (several per key: ingest's are its valid
        records, a bounded batch's narrow columns; a job that writes some of the table's parts
        gives their columns alone) are collected and reduced to the newest per
        key on the driver, then merged through delta-rs, whose merge skips the Spark job and
        the state rebuild of a Spark merge; a replay's merge finds nothing newer and changes
        nothing."""
        return merge_newest(self.uri(spec), df.toArrow(), spec, info.user_metadata()).changed

    def rows_written_before(self, spec: TableSpec, info: CommitInfo) -> int:
        """The rows an earlier attempt of this batch committed (a replay writes none, but its
        pipeline_metrics row reports the batch's real output): 0 when no longer in the
        table's recent history."""
        return _committed(self.uri(spec), info.user_metadata()).rows or 0

    def _append(self, df: DataFrame, spec: TableSpec, info: CommitInfo, transaction: bool) -> int | None:
        """One Spark append carrying ``info`` (under Delta's application transaction when
        ``transaction``): the rows it wrote, None when the transaction was already applied."""
        uri, commit_info = self.uri(spec), info.user_metadata()
        writer = df.write.format("delta").mode("append").option("userMetadata", commit_info)
        if transaction:
            writer = writer.option("txnAppId", info.app_id).option("txnVersion", info.batch_id)
        writer.save(uri)
        committed = _committed(uri, commit_info)
        if committed.version == 0:  # the run made its tables before this: the append made it again
            raise TableLost(
                f"table {spec.name} was gone when batch {info.batch_id} appended to it: Delta made it again, "
                "holding that batch's rows alone, and the job stopped there",
                f"rebuild it: `{rebuild_command(info.job)}` ({RUNBOOK})")
        if committed.version is not None and self.table_ids.get(spec.name, committed.table_id) != committed.table_id:
            raise TableLost(
                f"table {spec.name} was deleted and created again while {info.job} ran: batch {info.batch_id} "
                "appended to the new table, which lacks the rows of the batches before, and the job stopped there",
                f"rebuild it: `{rebuild_command(info.job)}` ({RUNBOOK})")
        return committed.rows

    def append_unwritten(self, rows: list[dict[str, Any]], spec: TableSpec, app_id: str, info: CommitInfo,
                         batch_of: Callable[[dict[str, Any]], int]) -> int | None:
        """Append those of ``rows``, held by the driver (a run's pipeline_metrics or
        table_status rows), whose batch, ``batch_of``, is past the one the table's application
        transaction of ``app_id`` holds (the transaction ``append`` commits under), under a
        transaction of the newest of them, with delta-rs. Returns the rows written, or None
        when every one was written before.

        A Spark write of a few rows cost one to two seconds per batch, most of it Delta
        rebuilding the table state to look up the transaction (docs/streaming-facts.md);
        delta-rs reads the transaction from the log it has already loaded. Each attempt reads
        the table once, for the transaction and the append alike: a read replays the JSON
        commits since the table's last checkpoint, up to 99, and the three reads a batch made
        of each table took 36 to 51 ms of CPU each (docs/benchmarks.md)."""
        # delta-rs takes an append for a read of every file, so another writer's delete (a
        # rewind removing one job's rows from pipeline_metrics) fails it, though its rows
        # depend on nothing it read (Spark's Delta lets such a blind append through). Each
        # attempt reads the table afresh and checks the transaction again.
        for attempt in _commit_again(tenacity.retry_if_exception_type(table_access.CommitConflict)):
            with attempt:
                table = table_access.open_table(self.uri(spec))
                done = table.transaction_version(app_id)
                unwritten = [row for row in rows if done is None or batch_of(row) > done]
                if not unwritten:
                    log.info("%s: batches to %s already committed by %s, skipped", spec.name, done, app_id)
                    return None
                table_access.append(table, pa.Table.from_pylist(unwritten, schema=schema.arrow_schema(spec)),
                                    info.user_metadata(), (app_id, max(batch_of(row) for row in unwritten)))
        return len(unwritten)


def _commit_again(retry: tenacity.retry_base, attempts: int = 10) -> tenacity.Retrying:
    """Attempts at a commit that ``retry`` says may be made again (another writer's commit
    won), each after a short random pause so writers that collided do not collide again."""
    return tenacity.Retrying(retry=retry, wait=tenacity.wait_random(0.05, 0.5),
                             stop=tenacity.stop_after_attempt(attempts), reraise=True)


class Merged(NamedTuple):
    inserted: int
    updated: int

    @property
    def changed(self) -> int:
        return self.inserted + self.updated


def with_kept_names(frame: DataFrame | None, spec: TableSpec) -> DataFrame | None:
    """The rows with each renamed column's value under its former name too (``KeptName``),
    for appends and merges alike, where the job gave the new name."""
    if frame is None or not spec.kept_names:
        return frame
    kept = {k.old: F.col(k.new) for k in spec.kept_names if k.new in frame.columns and k.old not in frame.columns}
    return frame.withColumns(kept) if kept else frame


def merge_newest(uri: str, rows: pa.Table, spec: TableSpec, user_metadata: str) -> Merged:
    """Merge ``rows`` (any number per key, any of the table's columns) into a table kept
    current by key: each key's newest row per part (``newest_per_key``), each part of the
    table's row taking it only where it is newer; the rows inserted and updated."""
    if rows.num_rows == 0:
        return Merged(0, 0)
    arrow_schema = schema.arrow_schema(spec)
    rows = _every_column(rows, arrow_schema)
    rows = newest_per_key(rows, spec.merge_key, spec.merge_parts).select(list(spec.columns)).cast(arrow_schema)
    metrics = table_access.merge_newer(uri, rows, spec.merge_key, spec.merge_parts, user_metadata)
    return Merged(int(metrics.get("num_target_rows_inserted", 0)), int(metrics.get("num_target_rows_updated", 0)))


class _Commit(NamedTuple):
    rows: int | None
    version: int | None
    table_id: str  # of the table the commit was looked for in


def _committed(uri: str, commit_info: str) -> _Commit:
    """The rows our commit wrote, from its commit info (no second Spark job to count them),
    and its version; None for both when there is no such commit: Delta found the transaction
    already applied. Other drivers may have committed since (shared tables): ours carries
    our metadata."""
    table = table_access.open_table(uri)
    for entry in table.history(20):
        if entry.get("userMetadata") == commit_info:
            return _Commit(int(entry.get("operationMetrics", {}).get("numOutputRows", 0)), entry.get("version"),
                           table.metadata().id)
    return _Commit(None, None, table.metadata().id)


def _every_column(rows: pa.Table, arrow_schema: pa.Schema) -> pa.Table:
    """``rows`` with each of the table's columns in its order: null where the job gave none."""
    return pa.table({field.name: rows[field.name].cast(field.type) if field.name in rows.column_names
                     else pa.nulls(rows.num_rows, field.type) for field in arrow_schema}, schema=arrow_schema)
