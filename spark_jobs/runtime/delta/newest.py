"""Which of two rows of a key is newer, per part of a table kept current by merge
(``TableSpec.merge_parts``): the larger (<part>_time, <part>_kafka_timestamp, <part>_offset),
compared in that order. One rule, written twice: as Arrow, to keep a batch's newest row per
key before the merge, and as the merge's SQL condition against the table's row."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def order(part: str) -> tuple[str, str, str]:
    """The columns a part's rows are ordered by, most significant first."""
    return f"{part}_time", f"{part}_kafka_timestamp", f"{part}_offset"


def newer_sql(part: str, source: str = "s", target: str = "t") -> str:
    """The merge condition: the source row's part is newer than the target's (a source row
    without the part's time is never newer)."""
    (s0, s1, s2), (t0, t1, t2) = ([f"{alias}.{column}" for column in order(part)] for alias in (source, target))
    return (f"({s0} IS NOT NULL AND ({t0} IS NULL OR {s0} > {t0} OR ({s0} = {t0} AND "
            f"({s1} > {t1} OR ({s1} = {t1} AND {s2} > {t2})))))")


def newest_per_key(rows: pa.Table, key: tuple[str, ...], parts) -> pa.Table:
    """One row per key: for each part (name, columns), the columns of the key's newest row
    that has the part's time (null where none has). A batch collected to the driver is
    reduced here instead of by a Spark aggregation: for ingest's device_status, a shuffle
    and a join per batch cost a 5,000-record batch about a quarter of its time
    (docs/benchmarks.md)."""
    newest = None
    for name, columns in parts:
        part = rows.select([*key, *columns]).filter(pc.is_valid(rows[order(name)[0]]))
        part = part.take(pc.sort_indices(part, [(column, "ascending") for column in key]
                                         + [(column, "descending") for column in order(name)]))
        newest_part = part.filter(_first_of_each_key(part, key))
        newest = newest_part if newest is None else newest.join(newest_part, list(key), join_type="full outer")
    return newest


def _first_of_each_key(rows: pa.Table, key: tuple[str, ...]) -> pa.Array:
    """True where a row of rows sorted by key starts its key."""
    if rows.num_rows == 0:
        return pa.array([], pa.bool_())
    changed = None
    for column in key:
        values = rows[column].combine_chunks()
        # a null key (never, by the table's key constraint) compares as a change
        differs = pc.fill_null(pc.not_equal(values.slice(1), values.slice(0, len(values) - 1)), True)
        changed = differs if changed is None else pc.or_(changed, differs)
    return pa.concat_arrays([pa.array([True]), changed])
