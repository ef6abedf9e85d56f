"""Exactly-once Delta writes: micro-batches with delta-spark, the few rows a driver holds
(pipeline_metrics) with delta-rs; and table creation and additive migration for operators
(delta-rs, no Spark needed).

Every commit records its app id (the checkpoint's id) and batch id in its metadata, with the
batch's Kafka end offsets and watermark (``sigflow checkpoint recover`` rebuilds a lost
checkpoint from them). A batch that can be a replay is checked against them and appended
under Delta's application transaction (txnAppId = app id, txnVersion = batch id), so a
batch that committed to Delta but not to Spark's commit log is not written twice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import TABLE_PROPERTIES, TableSpec
from spark_jobs.runtime.delta_tables import METADATA_KEY, commit_metadata

log = logging.getLogger("sigflow.delta")


def arrow_schema(spec: TableSpec) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spec.schema, timezone="UTC")


class DeltaSink:
    """Writes micro-batches to Delta tables with delta-spark, once per (app id, batch id)."""

    def __init__(self, spark: SparkSession, settings: Settings):
        self.spark = spark
        self.settings = settings

    def uri(self, spec: TableSpec) -> str:
        return self.settings.table_uri(spec.name)

    def ensure_table(self, spec: TableSpec) -> str:
        """Create the table when missing, or add the columns it lacks: what was done."""
        return _ensure(self.uri(spec), spec, lambda: self._create(spec))

    def _create(self, spec: TableSpec) -> None:
        """delta-spark's CREATE TABLE: a commit with the schema and no write job (about half
        the time of an empty DataFrame's write, docs/streaming-facts.md); it writes the
        version's checksum as every commit does, so the first batch finds the table warm."""
        from delta.tables import DeltaTable

        builder = DeltaTable.createIfNotExists(self.spark).location(self.uri(spec)).addColumns(spec.schema)
        for key, value in TABLE_PROPERTIES.items():
            builder = builder.property(key, value)
        if spec.partition_by:
            builder = builder.partitionedBy(*spec.partition_by)
        builder.execute()

    def committed_version(self, spec: TableSpec, app_id: str) -> int | None:
        """The highest version the table's application transaction of ``app_id`` holds."""
        from deltalake import DeltaTable

        return DeltaTable(self.uri(spec)).transaction_version(app_id)

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

    def append(
        self, df: DataFrame, spec: TableSpec, app_id: str, batch_id: int, metadata: dict[str, Any],
        replay_possible: bool = True,
    ) -> int | None:
        """Append one batch's rows. Returns the rows written, or None when already written.

        Only a batch that an earlier run planned can be a replay: it is checked against the
        table and appended under Delta's application transaction (whose lookup rebuilds the
        table's state, about 0.5 s of driver CPU). A batch this run planned itself is new by
        construction, since the checkpoint's lease admits one run at a time: it is appended
        without the lookup, its (app id, batch id) in the commit's metadata, where the replay
        check of a later run finds it (docs/semantics.md)."""
        commit_info = json.dumps({METADATA_KEY: metadata})
        if not replay_possible:
            return self._append(df, spec, None, batch_id, commit_info)
        if self._already_committed(spec, app_id, batch_id, self.committed_batch(spec, app_id)):
            return None
        return self._append(df, spec, app_id, batch_id, commit_info)

    def rows_written_before(self, spec: TableSpec, metadata: dict[str, Any]) -> int:
        """The rows an earlier attempt of this batch committed (a replay writes none, but its
        pipeline_metrics row reports the batch's real output): 0 when no longer in the
        table's recent history."""
        return _rows_committed(self.uri(spec), json.dumps({METADATA_KEY: metadata})) or 0

    def _append(self, df: DataFrame, spec: TableSpec, app_id: str | None, batch_id: int, commit_info: str) -> int | None:
        uri = self.uri(spec)
        writer = df.write.format("delta").mode("append").option("userMetadata", commit_info)
        if app_id is not None:
            writer = writer.option("txnAppId", app_id).option("txnVersion", batch_id)
        writer.save(uri)
        return _rows_committed(uri, commit_info)

    def append_rows(
        self, rows: list[dict[str, Any]], spec: TableSpec, app_id: str, version: int, metadata: dict[str, Any]
    ) -> int | None:
        """Append rows the driver already holds (a run's pipeline_metrics rows, or none: the
        commit of a batch with no rows for a table) with delta-rs, under the same
        application transaction as ``append``. Returns the rows written, or
        None when (app id, version) is already in the table.

        A Spark write of a few rows cost one to two seconds per batch, most of it Delta
        rebuilding the table state to look up the transaction (docs/streaming-facts.md);
        delta-rs reads the transaction from the log it has already loaded."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        if self._already_committed(spec, app_id, version, self.committed_version(spec, app_id)):
            return None
        write_deltalake(
            self.uri(spec), pa.Table.from_pylist(rows, schema=arrow_schema(spec)), mode="append",
            commit_properties=CommitProperties(
                custom_metadata={"userMetadata": json.dumps({METADATA_KEY: metadata})},
                app_transactions=[Transaction(app_id, version)]),
        )
        return len(rows)


def _rows_committed(uri: str, commit_info: str) -> int | None:
    """The rows our commit wrote, from its commit info (no second Spark job to count them);
    None when there is no such commit: Delta found the transaction already applied.
    Other drivers may have committed since (shared tables): ours carries our metadata."""
    from deltalake import DeltaTable

    for entry in DeltaTable(uri).history(20):
        if entry.get("userMetadata") == commit_info:
            return int(entry.get("operationMetrics", {}).get("numOutputRows", 0))
    return None


def create_table(uri: str, spec: TableSpec) -> str:
    """Create the table with its schema when missing, or migrate it, without Spark (delta-rs):
    what was done. `sigflow_deploy` does this before any job runs."""
    return _ensure(uri, spec, lambda: _create_with_delta_rs(uri, spec))


def _create_with_delta_rs(uri: str, spec: TableSpec) -> None:
    from deltalake import DeltaTable

    DeltaTable.create(uri, schema=arrow_schema(spec), partition_by=list(spec.partition_by) or None, mode="ignore",
                      configuration=TABLE_PROPERTIES)


def _ensure(uri: str, spec: TableSpec, create: Callable[[], None]) -> str:
    if not _table_exists(uri):
        try:
            create()
            return "created"
        except Exception:
            # Jobs start at once and share tables: another driver may have committed
            # version 0 between our check and our create, and on object storage the log
            # store refuses a second version 0 instead of ignoring it.
            if not _table_exists(uri):
                raise
            log.debug("%s: created by another job at the same moment", spec.name)
    return migrate_table(uri, spec)


def _table_exists(uri: str) -> bool:
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(uri)


def migrate_table(uri: str, spec: TableSpec) -> str:
    """Additive migration: the spec's columns the table lacks are added (nullable, as every
    column is) and filled by the spec's backfill expressions, and ``TABLE_PROPERTIES`` the
    table does not set are set (a value an operator chose stays). Nothing is dropped or
    retyped: readers of older versions keep working, and so does a rewind to a version
    before it."""
    from deltalake import DeltaTable, Field

    table = DeltaTable(uri)
    unset = _unset_properties(table)
    if unset:
        try:
            table.alter.set_table_properties(unset)
        except Exception:
            table = DeltaTable(uri)
            if _unset_properties(table):  # not a second driver migrating the same table at once
                raise
        log.info("%s: set %s", spec.name, ", ".join(f"{k}={v}" for k, v in unset.items()))
    done = "exists" + "".join(f", set {key}={value}" for key, value in unset.items())
    present = {field.name for field in table.schema().fields}
    missing = [field for field in arrow_schema(spec) if field.name not in present]
    if not missing:
        return done
    table.alter.add_columns([Field.from_arrow(field.with_nullable(True)) for field in missing])
    added = [field.name for field in missing]
    fills = {column: sql for column, sql in spec.backfill if column in added}
    filled = ""
    if fills:
        metrics = DeltaTable(uri).update(
            updates=fills, predicate=" OR ".join(f"{column} IS NULL" for column in fills))
        filled = f", {metrics.get('num_updated_rows', 0):,} rows filled"
    log.info("%s: added column(s) %s%s", spec.name, ", ".join(added), filled)
    return f"{done}, added column(s) {', '.join(added)}{filled}"


def _unset_properties(table) -> dict[str, str]:
    configuration = table.metadata().configuration
    return {key: value for key, value in TABLE_PROPERTIES.items() if key not in configuration}
