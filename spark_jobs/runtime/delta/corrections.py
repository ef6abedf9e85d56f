"""Corrections to a result table, in one Delta MERGE: rows updated in place where their
values changed (``revision`` + 1, ``corrected_at``), rows inserted where the stream wrote
none, rows deleted that a correction replaces (sessions a late event bridged). A row whose
recounted values equal what it holds is not touched, so correcting twice changes nothing.

A streaming job appends to the same table meanwhile: Delta refuses a MERGE whose files an
append changed under it (``ConcurrentAppendException``), and the MERGE is run again on the
table as it then is (tenacity). Appends never wait for it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import tenacity
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType

from spark_jobs.contracts.tables import TableSpec
from spark_jobs.runtime.delta import fence
from spark_jobs.runtime.rows import has_rows

log = logging.getLogger("sigflow.reconcile")

ACTION = "_action"
UPSERT, DELETE = "upsert", "delete"
INSERTED_REVISION = "_revision"
# Recounted doubles differ from the stream's in their last bits (another summing order):
# a value is changed only when it differs by more than this, relative to its size.
RELATIVE_TOLERANCE = 1e-9


@dataclass
class Corrected:
    updated: int = 0
    inserted: int = 0
    deleted: int = 0

    @property
    def rows(self) -> int:
        return self.updated + self.inserted + self.deleted


def _concurrent(error: BaseException) -> bool:
    """An append or a takeover's fence (a metadata change) committed under the MERGE."""
    return ("Concurrent" in type(error).__name__ or "ConcurrentAppend" in str(error)[:2000]
            or fence.is_fenced_commit(error))


def _differs(spec: TableSpec, key: tuple[str, ...]) -> str:
    doubles = {field.name for field in spec.job_schema.fields if isinstance(field.dataType, DoubleType)}
    tests = []
    for column in spec.job_schema.fieldNames():
        if column in key:
            continue
        if column in doubles:
            tests.append(f"(abs(t.{column} - s.{column}) > {RELATIVE_TOLERANCE} * greatest(1D, abs(s.{column}))"
                         f" OR (t.{column} IS NULL) <> (s.{column} IS NULL))")
        else:
            tests.append(f"NOT (t.{column} <=> s.{column})")
    return " OR ".join(tests)


def apply(spark: SparkSession, uri: str, spec: TableSpec, key: tuple[str, ...], rows: DataFrame,
          replaced: DataFrame | None, stamps: dict[str, object], corrected_at: datetime) -> Corrected:
    """Merge recounted ``rows`` (the table's job columns; ``_revision``: an inserted row's
    revision) and delete the ``replaced`` keys, in one commit. ``stamps`` are the
    ``WRITTEN_BY`` values an inserted row gets."""
    from delta.tables import DeltaTable

    values = spec.job_schema.fieldNames()
    source = rows.withColumn(ACTION, F.lit(UPSERT))
    if INSERTED_REVISION not in rows.columns:
        source = source.withColumn(INSERTED_REVISION, F.lit(1))
    if replaced is not None:
        gone = replaced.select(*key).join(rows.select(*key), list(key), "left_anti")
        filler = {column: F.lit(None).cast(spec.job_schema[column].dataType)
                  for column in values if column not in key}
        source = source.unionByName(
            gone.withColumns(filler).withColumns({ACTION: F.lit(DELETE), INSERTED_REVISION: F.lit(None).cast("int")}))
    stamp = {"checkpoint_id": F.lit(stamps["checkpoint_id"]), "batch_id": F.lit(stamps["batch_id"]).cast("bigint"),
             "corrected_at": F.lit(corrected_at).cast("timestamp")}
    inserted = {column: F.col(f"s.{column}") for column in values}
    inserted |= {"checkpoint_id": stamp["checkpoint_id"], "batch_id": stamp["batch_id"],
                 "revision": F.col(f"s.{INSERTED_REVISION}"), "corrected_at": stamp["corrected_at"]}
    updated = {column: F.col(f"s.{column}") for column in values if column not in key}
    updated |= {"revision": F.coalesce(F.col("t.revision"), F.lit(0)) + 1, "corrected_at": stamp["corrected_at"]}
    on = " AND ".join(f"t.{column} = s.{column}" for column in key)
    target = DeltaTable.forPath(spark, uri).toDF()
    # only the rows that change go to the MERGE: one that changes nothing would still commit
    changing = (source.alias("s").join(target.alias("t"), [F.col(f"t.{c}") == F.col(f"s.{c}") for c in key], "left")
                .where(f"(s.{ACTION} = '{UPSERT}' AND (t.{key[0]} IS NULL OR {_differs(spec, key)}))"
                       f" OR (s.{ACTION} = '{DELETE}' AND t.{key[0]} IS NOT NULL)")
                .select("s.*")).localCheckpoint()
    if not has_rows(changing):
        return Corrected()

    @tenacity.retry(retry=tenacity.retry_if_exception(_concurrent), stop=tenacity.stop_after_attempt(8),
                    wait=tenacity.wait_random_exponential(multiplier=0.5, max=8), reraise=True,
                    before_sleep=lambda state: log.info("%s: a job wrote meanwhile; merging again", spec.name))
    def merge():
        return (DeltaTable.forPath(spark, uri).alias("t").merge(changing.alias("s"), on)
                .whenMatchedDelete(condition=f"s.{ACTION} = '{DELETE}'")
                .whenMatchedUpdate(condition=f"s.{ACTION} = '{UPSERT}' AND ({_differs(spec, key)})", set=updated)
                .whenNotMatchedInsert(condition=f"s.{ACTION} = '{UPSERT}'", values=inserted)
                .execute().first())

    metrics = merge()
    return Corrected(updated=int(metrics.num_updated_rows or 0), inserted=int(metrics.num_inserted_rows or 0),
                     deleted=int(metrics.num_deleted_rows or 0))
