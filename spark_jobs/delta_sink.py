"""Exactly-once Delta writes for micro-batches, with delta-spark or delta-rs.

Every commit carries an application transaction (app id = the checkpoint's id, version =
the batch id). A batch replayed after a crash finds its version already in the table and
writes nothing, so a batch that committed to Delta but not to Spark's commit log is not
written twice. Commit metadata also records the batch's Kafka end offsets and watermark;
``sigflow checkpoint recover`` rebuilds a lost checkpoint from them.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from spark_jobs.config import Settings
from spark_jobs.engines import Engines
from spark_jobs.tables import TableSpec

log = logging.getLogger("sigflow.delta")
METADATA_KEY = "sigflow"


def arrow_schema(spec: TableSpec) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spec.schema, timezone="UTC")


class DeltaSink:
    def __init__(self, spark: SparkSession, settings: Settings, engines: Engines):
        self.spark = spark
        self.settings = settings
        self.native = engines.delta_writer == "delta-spark"
        self.storage_options: dict[str, str] | None = None

    def uri(self, spec: TableSpec) -> str:
        return self.settings.table_uri(spec.name)

    # ---- tables ------------------------------------------------------------------------
    def ensure_table(self, spec: TableSpec) -> bool:
        """Create the table with its schema when missing. Returns True if it was created."""
        from deltalake import DeltaTable

        uri = self.uri(spec)
        if DeltaTable.is_deltatable(uri, storage_options=self.storage_options):
            return False
        if self.native:
            empty = self.spark.createDataFrame([], spec.schema)
            empty.write.format("delta").mode("ignore").partitionBy(*spec.partition_by).save(uri)
        else:
            create_table(uri, spec, self.storage_options)
        return True

    def committed_version(self, spec: TableSpec, app_id: str) -> int | None:
        from deltalake import DeltaTable

        table = DeltaTable(self.uri(spec), storage_options=self.storage_options)
        return table.transaction_version(app_id)

    # ---- writes ------------------------------------------------------------------------
    def append(
        self, df: DataFrame, spec: TableSpec, app_id: str, batch_id: int, metadata: dict[str, Any]
    ) -> int | None:
        """Append one batch's rows. Returns the rows written, or None when already written."""
        done = self.committed_version(spec, app_id)
        if done is not None and done >= batch_id:
            log.info("%s: batch %s already committed by %s, skipped", spec.name, batch_id, app_id)
            return None
        commit_info = json.dumps({METADATA_KEY: metadata})
        if self.native:
            rows = df.count()
            (
                df.write.format("delta")
                .mode("append")
                .option("txnAppId", app_id)
                .option("txnVersion", batch_id)
                .option("userMetadata", commit_info)
                .save(self.uri(spec))
            )
            return rows
        from deltalake import CommitProperties, Transaction, write_deltalake

        data = self._to_arrow(df, spec)
        write_deltalake(
            self.uri(spec),
            data,
            mode="append",
            storage_options=self.storage_options,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id, batch_id)],
                custom_metadata={METADATA_KEY: commit_info},
            ),
        )
        return data.num_rows

    def merge(
        self,
        df: DataFrame,
        spec: TableSpec,
        keys: list[str],
        app_id: str,
        batch_id: int,
        metadata: dict[str, Any],
    ) -> int | None:
        """Upsert one batch's rows by ``keys`` (for update-mode outputs); idempotent per batch."""
        done = self.committed_version(spec, app_id)
        if done is not None and done >= batch_id:
            return None
        predicate = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
        commit_info = json.dumps({METADATA_KEY: metadata})
        if self.native:
            from delta.tables import DeltaTable as SparkDeltaTable

            conf = self.spark.conf
            conf.set("spark.databricks.delta.write.txnAppId", app_id)
            conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
            conf.set("spark.databricks.delta.commitInfo.userMetadata", commit_info)
            try:
                rows = df.count()
                (
                    SparkDeltaTable.forPath(self.spark, self.uri(spec)).alias("t")
                    .merge(df.alias("s"), predicate)
                    .whenMatchedUpdateAll()
                    .whenNotMatchedInsertAll()
                    .execute()
                )
            finally:
                for key in ("txnAppId", "txnVersion", "commitInfo.userMetadata"):
                    conf.unset(f"spark.databricks.delta.{'write.' if key.startswith('txn') else ''}{key}")
            return rows
        from deltalake import CommitProperties, DeltaTable, Transaction

        data = self._to_arrow(df, spec)
        (
            DeltaTable(self.uri(spec), storage_options=self.storage_options)
            .merge(
                data,
                predicate=predicate,
                source_alias="s",
                target_alias="t",
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(app_id, batch_id)],
                    custom_metadata={METADATA_KEY: commit_info},
                ),
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        return data.num_rows

    @staticmethod
    def _to_arrow(df: DataFrame, spec: TableSpec) -> pa.Table:
        schema = arrow_schema(spec)
        table = df.select(*schema.names).toArrow()
        return table.cast(schema)

    # ---- reads -------------------------------------------------------------------------
    def history_metadata(self, spec: TableSpec) -> list[dict[str, Any]]:
        return commit_metadata(self.uri(spec), self.storage_options)


def create_table(uri: str, spec: TableSpec, storage_options: dict[str, str] | None = None) -> bool:
    """Create the table with its schema when missing (delta-rs). True if it was created."""
    from deltalake import DeltaTable

    if DeltaTable.is_deltatable(uri, storage_options=storage_options):
        return False
    DeltaTable.create(
        uri, schema=arrow_schema(spec), partition_by=list(spec.partition_by) or None,
        mode="ignore", storage_options=storage_options,
    )
    return True


def commit_metadata(uri: str, storage_options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """sigflow metadata of each commit of a table, newest first (version included)."""
    from deltalake import DeltaTable

    table = DeltaTable(uri, storage_options=storage_options)
    found = []
    for entry in table.history():
        raw = entry.get(METADATA_KEY) or (entry.get("userMetadata") or None)
        if not raw:
            continue
        parsed = json.loads(raw) if isinstance(raw, str) else raw
        meta = parsed.get(METADATA_KEY, parsed) if isinstance(parsed, dict) else None
        if isinstance(meta, dict):
            found.append({"version": entry.get("version"), **meta})
    return found
