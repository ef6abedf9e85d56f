"""What a Delta table gained since a version, read in bounded chunks, and what its own file
statistics say about all of it (row counts, each column's extremes): the reads of a check
whose cost follows the new rows, not the table.

What was gained is the data files in the current snapshot that the older one lacked. An
append adds files; a delete, update or restore adds the files it rewrote, so their rows
are read again; so does a compaction, whose files hold rows read before (docs/runbooks/dq-failure.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs.runtime.delta import table_access
from spark_jobs.runtime.delta.table_access import dataset

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds

log = logging.getLogger("sigflow.delta")
ROWS_IN_FILE = "rows_in_file"  # a file's row count, in file_statistics
CHUNK_ROWS = 200_000  # rows held at once by a reader that sums or counts


@dataclass(frozen=True)
class Increment:
    """The data files of ``version`` that ``since`` did not have (every file when ``since``
    is None), and how many rows they hold by their statistics."""

    uri: str
    version: int
    since: int | None
    files: frozenset[str]
    rows: int
    removed: bool = False  # some file of ``since`` is gone: rows were deleted or rewritten


def added_since(uri: str, since: int | None) -> Increment:
    """The table's current version against ``since``. A ``since`` the table cannot show (a
    newer version than it has, so it was created anew, or one whose log is gone) counts as
    none: every file is new."""
    table = table_access.open_table(uri)
    current = _files(table)
    older: set[str] = set()
    if since is not None and since > table.version():
        log.info("%s is at version %d, before %d: created anew, so read whole", uri, table.version(), since)
        since = None
    elif since is not None:
        try:
            older = set(_files(table_access.open_table(uri, since)))
        except Exception as error:  # a version vacuumed out of the log: read whole
            log.info("%s: version %d cannot be loaded (%s), so read whole", uri, since, error)
            since = None
    files = {path: rows for path, rows in current.items() if path not in older}
    return Increment(uri, table.version(), since, frozenset(files), sum(rows or 0 for rows in files.values()),
                     removed=bool(older - current.keys()))


def chunks(increment: Increment, rows: int, columns: list[str] | None = None,
           files: frozenset[str] | None = None, where: ds.Expression | None = None) -> Iterator[pa.Table]:
    """The increment's rows (or those of ``files`` of the same version; those matching
    ``where``), ``columns`` of them, as tables of at most ``rows`` rows each, one read
    ahead at most, so memory follows ``rows`` and never the table's size."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    wanted = increment.files if files is None else files
    whole = dataset(increment.uri, increment.version)
    fragments = [f for f in whole.get_fragments() if f.path in wanted]
    if not fragments:
        return
    part = ds.FileSystemDataset(fragments, whole.schema, whole.format, whole.filesystem)
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in part.to_batches(columns=columns, filter=where, batch_size=min(rows, 65_536), use_threads=False,
                                 batch_readahead=1, fragment_readahead=1):
        pending.append(batch)
        held += batch.num_rows
        while held >= rows:
            table = pa.Table.from_batches(pending).combine_chunks()
            yield table.slice(0, rows)
            rest = table.slice(rows)
            pending, held = rest.to_batches(), rest.num_rows
    if held:
        yield pa.Table.from_batches(pending, schema=part.schema if columns is None
                                    else pa.schema([part.schema.field(c) for c in columns]))


def older_files(increment: Increment) -> frozenset[str]:
    """The files of the increment's version that were there before it (what was checked)."""
    return frozenset(_files(table_access.open_table(increment.uri, increment.version))) - increment.files


def file_statistics(uri: str, columns: list[str], version: int | None = None) -> pa.Table:
    """One row per data file of the version (else the current one): ``rows_in_file``, then each of
    ``columns`` holding the file's largest value (null where the writer kept none)."""
    import pyarrow as pa

    actions = pa.table(table_access.open_table(uri, version).get_add_actions(flatten=True))
    out = {ROWS_IN_FILE: actions.column("num_records")}
    for column in columns:
        name = f"max.{column}"
        out[column] = actions.column(name) if name in actions.column_names else pa.nulls(actions.num_rows)
    return pa.table(out)


def _files(table) -> dict[str, int]:
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=False))
    return dict(zip(actions.column("path").to_pylist(), actions.column("num_records").to_pylist()))
