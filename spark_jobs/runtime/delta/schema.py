"""A table's schema in place: created when missing, migrated additively when the contract
grew. Deploy does it before any job runs (``create_table``, delta-rs, no Spark needed), and
a job once more before its first batch (``DeltaSink.ensure_table``, the same), so a job
started right after a contract change writes to a table that has its columns; reconcile's
tables are made by Spark (``ensure_with_spark``). Nothing here writes rows but a migration's
backfill."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pyarrow as pa
from pyarrow import fs as pafs
from pyspark.sql import SparkSession

from spark_jobs.contracts.tables import (
    FORMER_DEFAULTS,
    KEY_CONSTRAINT,
    TableSpec,
    key_constraint,
)
from spark_jobs.errors import SigflowError, first_line
from spark_jobs.runtime.checkpoint import storage
from spark_jobs.runtime.delta import table_access, version_checksum
from spark_jobs.runtime.delta.log_damage import LOG_FOLDER
from spark_jobs.runtime.waiting import wait_until

log = logging.getLogger("sigflow.delta")
# How long a job that found a table's location mid-creation waits for the creating job's
# first commit: a driver among six starting on 2 cores can take seconds between the two.
CREATOR_WAIT_S = 30.0


def arrow_schema(spec: TableSpec) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spec.schema, timezone="UTC")


def commented_arrow_schema(spec: TableSpec) -> pa.Schema:
    """The table's schema with each column's meaning as its comment (what a table is created with)."""
    meanings = spec.column_meanings
    return pa.schema([field.with_metadata({"comment": meanings[field.name]}) if meanings[field.name] else field
                      for field in arrow_schema(spec)])


def _commented_struct(spec: TableSpec):
    from pyspark.sql.types import StructField, StructType

    meanings = spec.column_meanings
    return StructType([StructField(field.name, field.dataType, field.nullable,
                                   {"comment": meanings[field.name]} if meanings[field.name] else {})
                       for field in spec.schema.fields])


def ensure_with_spark(spark: SparkSession, uri: str, spec: TableSpec, properties: dict[str, str] | None = None) -> str:
    """Create with delta-spark when missing, else migrate: what was done. ``properties``
    (the settings' retention) join the creating commit, or are set where a table differs."""
    return _ensure(uri, spec, lambda: _create_with_spark(spark, uri, spec, properties or {}), properties or {})


def _create_with_spark(spark: SparkSession, uri: str, spec: TableSpec, properties: dict[str, str]) -> None:
    """delta-spark's CREATE TABLE: a commit with the schema and no write job (about half
    the time of an empty DataFrame's write, docs/streaming-facts.md); it writes the
    version's checksum as every commit does, so the first batch finds the table warm."""
    from delta.tables import DeltaTable

    builder = (DeltaTable.createIfNotExists(spark).location(uri).addColumns(_commented_struct(spec))
               .comment(spec.description))
    # delta-spark takes the key constraint as a property of the creating commit
    constraint = {f"delta.constraints.{KEY_CONSTRAINT}": key_constraint(spec)} if spec.key else {}
    for key, value in {**spec.properties, **properties, **constraint}.items():
        builder = builder.property(key, value)
    if spec.partition_by:
        builder = builder.partitionedBy(*spec.partition_by)
    builder.execute()


def create_table(uri: str, spec: TableSpec, properties: dict[str, str] | None = None) -> str:
    """Create the table with its schema when missing, or migrate it, without Spark (delta-rs):
    what was done. `sigflow_deploy` does this before any job runs. A table it created gets
    its newest version's checksum, which Spark's first append to it reads
    (``version_checksum``)."""
    done = _ensure(uri, spec, lambda: _create_with_delta_rs(uri, spec, properties or {}), properties or {})
    if done == "created":
        version_checksum.write_for_new_table(uri)
    return done


def _create_with_delta_rs(uri: str, spec: TableSpec, properties: dict[str, str]) -> None:
    # delta-rs refuses a property of its own (sigflow.*) in the creating commit: version 1 sets them
    wanted = {**spec.properties, **properties}
    delta = {key: value for key, value in wanted.items() if key.startswith("delta.")}
    table_access.create(uri, commented_arrow_schema(spec), list(spec.partition_by) or None, delta,
                        spec.description)
    if len(delta) < len(wanted):
        table_access.set_properties(uri, {key: value for key, value in wanted.items() if key not in delta})


def _ensure(uri: str, spec: TableSpec, create: Callable[[], None], properties: dict[str, str]) -> str:
    if not _table_exists(uri):
        try:
            if _holds_data_files(uri):  # Spark's CREATE TABLE refuses such a location; delta-rs would not
                raise FileExistsError(f"{uri} holds files but no Delta table")
            create()
        except Exception as exc:
            # Jobs start at once and share tables: another driver may have committed
            # version 0 between our check and our create (on object storage the log store
            # refuses a second version 0 instead of ignoring it), or be writing it: then
            # the location already holds its log's directory, and Delta refuses to create a
            # table in a location that holds files but no table yet. Its version 0 follows.
            if not wait_until(lambda: _table_exists(uri), timeout_s=CREATOR_WAIT_S, every_s=0.25):
                raise _not_a_table(uri, spec, exc) from exc
            log.debug("%s: created by another job at the same moment", spec.name)
        else:
            # delta-rs refuses a constraint in its creating commit: version 1 adds it
            _add_key_constraint(uri, spec, logged=False)
            return "created"
    return migrate_table(uri, spec, properties)


def _not_a_table(uri: str, spec: TableSpec, exc: Exception) -> SigflowError:
    return SigflowError(
        f"table {spec.name} cannot be created at {uri}, and no other job's creation of it finished "
        f"within {CREATOR_WAIT_S:.0f} s: {first_line(exc)[:300]}",
        "where the location holds files but no Delta table (a copy made by hand, a creation cut off "
        "before its first commit), move them aside, then try again: the next run or deploy creates the table",
    )


def _table_exists(uri: str) -> bool:
    return table_access.exists(uri)


def _holds_data_files(uri: str) -> bool:
    """Whether the location holds a file outside its log: one a table made there would stand
    beside without holding, and a vacuum of it would delete. What a creation cut off left in
    the log is no such file (delta-rs' ``mode="error"`` settles creations at once)."""
    fs, root = storage.filesystem(uri)
    log_folder = f"{root.rstrip('/')}/{LOG_FOLDER}/"
    found = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    return any(info.type == pafs.FileType.File and not info.path.startswith(log_folder) for info in found)


def migrate_table(uri: str, spec: TableSpec, properties: dict[str, str] | None = None) -> str:
    """Additive migration: the spec's columns the table lacks are added (nullable, as every
    column is) and filled by the spec's backfill expressions, and the spec's ``properties`` the
    table does not set are set (a value an operator chose stays; a value sigflow set
    before, ``FORMER_DEFAULTS``, is not one), as are ``properties`` (the
    settings' retention) where the table holds another value. Nothing is dropped or
    retyped: readers of older versions keep working, and so does a rewind to a version
    before it."""
    unset, table = table_access.set_missing_properties(uri, lambda read: _unset_properties(read, spec, properties or {}))
    if unset:
        log.info("%s: set %s", spec.name, ", ".join(f"{k}={v}" for k, v in unset.items()))
    done = "exists" + "".join(f", set {key}={value}" for key, value in unset.items())
    # the constraint after the columns: it may name a key column this migration adds; the
    # comments last, for the columns added too
    return done + _add_columns(uri, spec, table) + _add_key_constraint(uri, spec) + _describe(uri, spec)


def _add_columns(uri: str, spec: TableSpec, table) -> str:
    """The spec's columns the table lacks, added and backfilled: what was done."""
    present = {field.name for field in table.schema().fields}
    missing = [field for field in arrow_schema(spec) if field.name not in present]
    if not missing:
        return ""
    try:
        table_access.add_nullable_columns(uri, missing)
    except Exception:
        # quality's tasks run at once, each migrating dq_results: the one that lost found
        # the columns added by another
        if {field.name for field in missing} - {field.name for field in table_access.open_table(uri).schema().fields}:
            raise
        return ""
    added = [field.name for field in missing]
    fills = {column: sql for column, sql in spec.migration_backfill if column in added}
    filled = ""
    if fills:
        metrics = table_access.open_table(uri).update(
            updates=fills, predicate=" OR ".join(f"{column} IS NULL" for column in fills))
        filled = f", {metrics.get('num_updated_rows', 0):,} rows filled"
    log.info("%s: added column(s) %s%s", spec.name, ", ".join(added), filled)
    return f", added column(s) {', '.join(added)}{filled}"


def _describe(uri: str, spec: TableSpec) -> str:
    """The table's description and each column's comment set where the table holds other
    words (a table made before them, or a meaning reworded): what was done. Each is a
    metadata commit of its own; jobs starting at once may set the same words, so a commit
    that fails is tried again on the table as it then is."""
    import tenacity

    def differing(table) -> tuple[bool, dict[str, str]]:
        present = {field.name: (field.metadata or {}).get("comment") for field in table.schema().fields}
        columns = {column: words for column, words in spec.column_meanings.items()
                   if words and column in present and present[column] != words}
        return table.metadata().description != spec.description, columns

    for attempt in tenacity.Retrying(wait=tenacity.wait_random(0.05, 0.5), stop=tenacity.stop_after_attempt(5),
                                     reraise=True):
        with attempt:
            said: list[str] = []  # the columns described (a retry counts afresh)
            described: list[str] = []  # "the table", once its description is set
            table = table_access.open_table(uri)
            description, columns = differing(table)
            if description:
                table.alter.set_table_description(spec.description)
                described.append("the table")
            for column, words in columns.items():
                table_access.open_table(uri).alter.set_column_metadata(column, {"comment": words})
                said.append(column)
    if not said and not described:
        return ""
    log.info("%s: described %s", spec.name, ", ".join(said + described))
    return f", described {len(said)} column(s)" + "".join(f" and {what}" for what in described)


def _unset_properties(table, spec: TableSpec, properties: dict[str, str]) -> dict[str, str]:
    configuration = table.metadata().configuration

    def unset(key: str, value: str) -> bool:
        held = configuration.get(key)
        return held is None or (held != value and held in FORMER_DEFAULTS.get(key, ()))

    return {**{key: value for key, value in spec.properties.items() if unset(key, value)},
            **{key: value for key, value in properties.items() if configuration.get(key) != value}}


def _add_key_constraint(uri: str, spec: TableSpec, logged: bool = True) -> str:
    """Add the table's ``KEY_CONSTRAINT`` where it lacks it: what was done, for the migration's
    line. Delta first checks every row, so a table already holding a null key keeps going
    without it and says so (sigflow quality's key checks find those rows)."""
    if not spec.key or _has_key_constraint(table_access.open_table(uri)):
        return ""
    required = spec.required
    try:
        if not table_access.add_constraint(uri, KEY_CONSTRAINT, key_constraint(spec)):
            return ""  # a second driver creating or migrating the same table at once added it
    except Exception:
        if _has_key_constraint(table_access.open_table(uri)):
            return ""  # a second driver migrating the same table at once added it
        nulls = table_access.count_matching(uri, _any_null(required))
        if not nulls:
            raise
        log.warning("%s: key constraint not added: %d row(s) with a null key; sigflow quality lists them",
                    spec.name, nulls)
        return f", key constraint not added: {nulls:,} row(s) with a null key in {', '.join(required)}"
    if logged:  # a migration's line; a table's creation says nothing more
        log.info("%s: added constraint %s", spec.name, KEY_CONSTRAINT)
    return f", added constraint {KEY_CONSTRAINT}"


def _has_key_constraint(table) -> bool:
    return f"delta.constraints.{KEY_CONSTRAINT.lower()}" in table.metadata().configuration


def _any_null(columns: tuple[str, ...]):
    import pyarrow.dataset as ds

    condition = ds.field(columns[0]).is_null()
    for column in columns[1:]:
        condition = condition | ds.field(column).is_null()
    return condition
