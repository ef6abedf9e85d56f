"""sigflow's Delta tables outside Spark, through delta-rs: the one module that imports
``deltalake``. Reads (rows, files, commit history, versions), the small appends made without
Spark (pipeline metrics, a batch's late events, quality results, the restart audit) and the
repairs the on-call operations make (restores, deletes, compaction). The jobs' tables are
written through Spark (``sink``)."""

from __future__ import annotations

import atexit
import functools
import gc
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from spark_jobs.runtime.delta.commit_info import METADATA_KEY, CommitInfo
from spark_jobs.runtime.identifiers import checked

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.dataset as ds

    from spark_jobs.contracts.tables import MergePart


class CommitConflict(Exception):
    """Another writer committed what this commit read; the append may be tried again."""


# how long a merge into a table several jobs merge into is tried again while others commit
MERGE_PATIENCE_S = 60.0


def exists(uri: str) -> bool:
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(uri)


def open_table(uri: str, version: int | None = None):
    """The table (at ``version``, else the current one) as delta-rs's ``DeltaTable``. A
    current table that cannot be read raises ``log_damage.TableUnreadable``, naming it."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    try:
        return DeltaTable(uri, version=version)
    except TableNotFoundError:
        raise
    except DeltaError as error:
        if version is not None:  # an older version may be gone by design (its log entry expired)
            raise
        from spark_jobs.runtime.delta.log_damage import unreadable

        raise unreadable(uri, error) from error


def table_id(uri: str) -> str | None:
    """The id Delta gave the table when it was created (None: no table at ``uri``): a table
    deleted and created again under the same path has another."""
    from deltalake.exceptions import TableNotFoundError

    try:
        return open_table(uri).metadata().id
    except TableNotFoundError:
        return None


def create(uri: str, schema: pa.Schema, partition_by: list[str] | None, configuration: dict[str, str],
           description: str | None = None) -> None:
    """Create the table, once: raises when it exists, or when another writer created it
    meanwhile. delta-rs would otherwise retry a losing creation at the next version, a
    second CREATE TABLE over the other's (six threads at once left two to four)."""
    from deltalake import CommitProperties, DeltaTable

    DeltaTable.create(uri, schema=schema, partition_by=partition_by, mode="error", configuration=configuration,
                      description=description, commit_properties=CommitProperties(max_commit_retries=0))


def _metadata_commit() -> Any:
    """Retrying for a metadata-only commit. Drivers creating or migrating one table at once
    change its metadata at once: a commit that lost to another's is made again on the table
    as it now is."""
    import tenacity
    from deltalake.exceptions import CommitFailedError

    return tenacity.Retrying(retry=tenacity.retry_if_exception_type(CommitFailedError),
                             wait=tenacity.wait_random(0.05, 0.3), stop=tenacity.stop_after_attempt(5), reraise=True)


def add_constraint(uri: str, name: str, expression: str) -> bool:
    """Add the CHECK constraint ``name`` unless the table has it: whether this call added it
    (made again on the table as it now is after losing to another's metadata change)."""
    for attempt in _metadata_commit():
        with attempt:
            table = open_table(uri)
            if f"delta.constraints.{name.lower()}" in table.metadata().configuration:
                return False
            table.alter.add_constraint({name: expression})
    return True


def add_nullable_columns(uri: str, fields: list[pa.Field]) -> None:
    from deltalake import Field

    open_table(uri).alter.add_columns([Field.from_arrow(field.with_nullable(True)) for field in fields])


def set_properties(uri: str, properties: dict[str, str]) -> None:
    """Set table properties, sigflow's own among them (not Delta's, so not checked as Delta's
    are): a metadata-only commit, made again on the table as it now is after losing to
    another's metadata change."""
    set_missing_properties(uri, lambda _table: properties)


def set_missing_properties(uri: str, missing: Callable[[Any], dict[str, str]]) -> tuple[dict[str, str], Any]:
    """Set the properties ``missing`` finds the table lacking: what was set, and the table as
    this call left it. A commit that lost to another's metadata change is made again with
    what the table as it now is lacks, so drivers migrating one table at once each set only
    what is still missing."""
    for attempt in _metadata_commit():
        with attempt:
            table = open_table(uri)
            properties = missing(table)
            if properties:
                table.alter.set_table_properties(properties, raise_if_not_exists=False)
    return properties, table


def append(target: str | Any, rows: pa.Table, user_metadata: str | None = None,
           transaction: tuple[str, int] | None = None) -> None:
    """Append Arrow rows to ``target`` (a uri, or a table opened earlier: the commit then
    conflicts with every metadata change since that read, a fence's among them); with
    ``transaction`` (app id, version) under Delta's application transaction. Raises
    CommitConflict when another writer's commit conflicts with it."""
    from deltalake import CommitProperties, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    properties = CommitProperties(
        custom_metadata={"userMetadata": user_metadata} if user_metadata is not None else None,
        app_transactions=[Transaction(*transaction)] if transaction else None)
    try:
        write_deltalake(target, rows, mode="append", commit_properties=properties)
    except CommitFailedError as exc:
        raise CommitConflict(str(exc)) from exc


def merge_newer(uri: str, source: pa.Table, key: tuple[str, ...], parts: tuple[MergePart, ...],
                user_metadata: str) -> dict:
    """Merge ``source`` (one row per key) into the table on ``key``: a new key's row is
    inserted; for a known one, each part takes the source's values only where the source's
    is newer (``newest.newer_sql``), so merging the same rows again changes nothing. Delta's
    merge metrics.

    Several jobs merge their parts into one table: a merge that another job's merge
    committed first conflicts with is merged again on the table as that commit left it,
    which the newer rule makes safe."""
    import tenacity
    from deltalake import CommitProperties
    from deltalake.exceptions import CommitFailedError

    from spark_jobs.runtime.delta.newest import newer_sql

    updates = {column: f"CASE WHEN {newer_sql(part)} THEN s.{column} ELSE t.{column} END"
               for part in parts for column in part.columns}

    def merge() -> dict:
        return (open_table(uri).merge(source, " AND ".join(f"t.{c} = s.{c}" for c in key), source_alias="s",
                                      target_alias="t",
                                      commit_properties=CommitProperties(custom_metadata={"userMetadata": user_metadata}))
                .when_matched_update(updates, predicate=" OR ".join(newer_sql(part) for part in parts))
                .when_not_matched_insert_all()
                .execute())

    again = tenacity.Retrying(retry=tenacity.retry_if_exception_type(CommitFailedError),
                              wait=tenacity.wait_random_exponential(multiplier=0.1, max=2),
                              stop=tenacity.stop_after_delay(MERGE_PATIENCE_S), reraise=True)
    return again(merge)


def read_arrow(uri: str, columns: list[str] | None = None, where: ds.Expression | None = None,
               version: int | None = None) -> pa.Table:
    """A table (at ``version``, else the current one; or its columns and rows matching
    ``where``) as Arrow; empty if there is none.

    The scan is single-threaded on purpose. With pyarrow 26.0.1 and deltalake 1.6.6 the
    threaded Arrow scanner (``to_pyarrow_table()``, ``to_pandas()``, ``to_table()``) aborted
    the process at exit ("terminate called without an active exception", exit 134) in
    2 of 12 to 26 of 40 fresh processes, measured on a 6-row table; the
    single-threaded scan never did (docs/streaming-facts.md, tests/spark_jobs/runtime/delta/test_table_access.py).
    """
    import pyarrow as pa

    if not exists(uri):
        return pa.table({})
    data = dataset(uri, version)
    if where is None:
        return data.to_table(columns=columns, use_threads=False)
    parts = list(_matching_parts(data, columns, where))
    return pa.concat_tables(parts) if parts else data.schema.empty_table().select(columns or data.schema.names)


def scan(uri: str, columns: list[str] | None = None, where: ds.Expression | None = None,
         version: int | None = None) -> Iterator[pa.Table]:
    """The rows matching ``where`` file by file (at ``version``, else the current one), each
    file's as one Arrow table: memory follows the largest file, not the table."""
    if not exists(uri):
        return
    data = dataset(uri, version)
    if where is None:
        for fragment in data.get_fragments():
            yield fragment.to_table(schema=data.schema, columns=columns, use_threads=False)
        return
    yield from _matching_parts(data, columns, where)


def _matching_parts(data: ds.Dataset, columns: list[str] | None, where: ds.Expression) -> Iterator[pa.Table]:
    """Each file's rows matching ``where`` (a file its statistics rule out is not read).

    A file a delta-rs rewrite wrote (a delete or merge that kept some of a file's rows, or a
    compaction of such a file) holds its text columns as ``string_view``, where every other
    file and the table's schema say ``string``; Arrow then refuses a filter on such a column
    ("Function 'equal' has no kernel matching input types (string, string_view)", pyarrow
    26.0.1, deltalake 1.6.6: tests/spark_jobs/runtime/delta/test_table_access.py). Such a file
    is read whole in the table's types and filtered in memory."""
    from pyarrow.lib import ArrowNotImplementedError

    for fragment in data.get_fragments(filter=where):
        try:
            part = fragment.to_table(schema=data.schema, columns=columns, filter=where, use_threads=False)
        except ArrowNotImplementedError:
            part = fragment.to_table(schema=data.schema, use_threads=False).filter(where)
            part = part.select(columns) if columns is not None else part
        if part.num_rows:
            yield part


def dataset(uri: str, version: int | None = None) -> ds.Dataset:
    """The table's files (at ``version``, else the current ones) as an Arrow dataset. A
    local table is read through Arrow's own file system: with delta-rs's default (a Python
    file system handler), Arrow's read-ahead threads call back into Python, the setting in
    which the abort at exit has been reported upstream, and where reading through a native
    file system ended cleanly. Object stores keep delta-rs's handler (credentials,
    endpoints)."""
    from urllib.parse import urlparse

    import pyarrow.fs as pa_fs

    collect_before_exit()
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        root = os.path.abspath(parsed.path if parsed.scheme else uri)
        local = pa_fs.SubTreeFileSystem(root, pa_fs.LocalFileSystem())
        return open_table(uri, version).to_pyarrow_dataset(filesystem=local)
    return open_table(uri, version).to_pyarrow_dataset()


@functools.cache
def collect_before_exit() -> None:
    """One garbage collection as the process exits, while Arrow is still alive; called as
    each table's dataset is made. A fresh process still aborted once at exit ("terminate
    called without an active exception") in a clean-clone run, single-threaded scan and
    all. The cause reported for Arrow is scanner objects left in reference cycles until the
    interpreter's final collection, when their threads can no longer be joined; an atexit
    handler runs before that collection. Once per process rather than after each scan: a
    full collection takes 0.3 s in a process that has loaded Airflow and Great Expectations
    (measured), and a quality run scans each table several times (docs/streaming-facts.md)."""
    atexit.register(gc.collect)


def read_pandas(uri: str, columns: list[str] | None = None, where: ds.Expression | None = None) -> pd.DataFrame:
    """``read_arrow`` as pandas."""
    return read_arrow(uri, columns, where).to_pandas()


def count_matching(uri: str, where: ds.Expression | None = None) -> int:
    """Rows of the table matching ``where`` (all rows without it), scanned single-threaded
    like ``read_arrow``; 0 if there is no table."""
    if not exists(uri):
        return 0
    if where is None:
        return dataset(uri).count_rows(use_threads=False)
    return sum(part.num_rows for part in _matching_parts(dataset(uri), [], where))


def history(uri: str) -> list[dict]:
    return commit_metadata(uri) if exists(uri) else []


def version_left_by(uri: str, job: str, checkpoint_id: str, batch_id: int) -> int | None:
    """The table version this checkpoint's batch ``batch_id`` left: that of the newest commit
    of that batch or earlier, else the version before the checkpoint's first commit (a batch
    without rows for a table commits nothing to it). None when the checkpoint never
    committed to the table.

    Newest wins because a rewind re-writes batch ids: after rewinding to N the commits of
    batches above N that came before it are no longer part of the answer.
    """
    first_after = None
    for entry in history(uri):
        if entry.get("job") != job or entry.get("checkpoint_id", checkpoint_id) != checkpoint_id:
            continue
        if int(entry.get("batch_id", -1)) <= batch_id:
            return int(entry["version"])
        first_after = int(entry["version"])
    return None if first_after is None else first_after - 1


def has_its_files(uri: str, version: int) -> bool:
    """Whether every data file of ``version`` is still there. Vacuum deletes the files of
    versions older than its retention; a restore to such a version would fail half-way."""
    from deltalake.exceptions import DeltaError

    try:  # the row count opens every file's footer, and nothing more
        dataset(uri, version).count_rows(use_threads=False)
    except (FileNotFoundError, DeltaError):  # a file vacuumed, or the version's log entry expired
        return False
    return True


def table_version(uri: str) -> int | None:
    return open_table(uri).version() if exists(uri) else None


def restore(uri: str, version: int) -> None:
    open_table(uri).restore(version)


def _rows_of(uri: str, job: str | None, checkpoint_id: str | None, after_batch: int | None):
    """The rows of ``job`` (of its checkpoint ``checkpoint_id``, batches after
    ``after_batch``) as an Arrow filter and a delta-rs SQL predicate; None: every row.

    Rows without a checkpoint id were written before tables carried one, and count as the
    current checkpoint's, as every row did then. A table not yet migrated has no such rows.
    """
    import pyarrow.dataset as ds

    arrow, sql = [], []
    job = job and checked(job, "job name", uri)
    checkpoint_id = checkpoint_id and checked(checkpoint_id, "checkpoint id", uri)
    if job:
        arrow.append(ds.field("job") == job)
        sql.append(f"job = '{job}'")
    if checkpoint_id and "checkpoint_id" in {f.name for f in open_table(uri).schema().fields}:
        arrow.append((ds.field("checkpoint_id") == checkpoint_id) | ds.field("checkpoint_id").is_null())
        sql.append(f"(checkpoint_id = '{checkpoint_id}' OR checkpoint_id IS NULL)")
    if after_batch is not None:
        arrow.append(ds.field("batch_id") > after_batch)
        sql.append(f"batch_id > {after_batch}")
    if not arrow:
        return None, None
    condition = arrow[0]
    for more in arrow[1:]:
        condition = condition & more
    return condition, " AND ".join(sql)


STAMPS = ("checkpoint_id", "batch_id")


def every_row_stamped(uri: str) -> bool:
    """Whether every row of the table says which checkpoint's batch wrote it (``STAMPS``): true
    of a table created with the columns; one that gained them keeps older rows without (and
    device_events_raw's older rows have a batch_id but no checkpoint_id). Answered from the
    files' null counts; only files written without statistics are read."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    if not exists(uri):
        return True
    table = open_table(uri)
    if not set(STAMPS) <= {f.name for f in table.schema().fields}:
        return False
    actions = pa.table(table.get_add_actions(flatten=True))
    counts = [f"null_count.{column}" for column in STAMPS]
    if all(name in actions.column_names and actions.column(name).null_count == 0 for name in counts):
        return all((pc.sum(actions.column(name)).as_py() or 0) == 0 for name in counts)
    return count_matching(uri, ds.field("batch_id").is_null() | ds.field("checkpoint_id").is_null()) == 0


def count_rows(uri: str, job: str | None = None, after_batch: int | None = None,
               checkpoint_id: str | None = None) -> int:
    if not exists(uri):
        return 0
    return count_matching(uri, _rows_of(uri, job, checkpoint_id, after_batch)[0])


def delete_rows(uri: str, job: str | None = None, after_batch: int | None = None,
                checkpoint_id: str | None = None) -> None:
    if exists(uri):
        open_table(uri).delete(_rows_of(uri, job, checkpoint_id, after_batch)[1])


def commit_metadata(uri: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The sigflow record (``CommitInfo``) of each commit of a table (of its newest ``limit``
    commits), newest first, with the commit's version and timestamp; commits without one
    (another writer's, whatever their userMetadata says) are left out."""
    found = []
    for entry in open_table(uri).history(limit):
        info = CommitInfo.parse(entry.get(METADATA_KEY) or entry.get("userMetadata") or None)
        if info is not None:
            found.append({"version": entry.get("version"), "timestamp": entry.get("timestamp"),
                          **info.model_dump(exclude_none=True)})
    return found
