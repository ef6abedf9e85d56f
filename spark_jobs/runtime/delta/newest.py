"""Which of two rows of a key is newer, per part of a table kept current by merge
(``TableSpec.merge_parts``): the larger of the part's order columns, compared in order. One
rule, written twice: as Arrow, to keep a batch's newest row per key before the merge, and as
the merge's SQL condition against the table's row. ``newest_candidates`` narrows rows too
many for a driver to the few among which the Arrow rule then chooses."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.contracts.tables import MergePart


def newer_sql(part: MergePart, source: str = "s", target: str = "t") -> str:
    """The merge condition: the source row's part is newer than the target's (a source row
    without the part's first order column is never newer; a target without it always older)."""
    first, *rest = part.order
    condition = ""
    for column in reversed(rest):  # s.c1 > t.c1 OR (s.c1 = t.c1 AND (...)), innermost last
        greater = f"{source}.{column} > {target}.{column}"
        condition = greater if not condition else f"{greater} OR ({source}.{column} = {target}.{column} AND ({condition}))"
    newer_first = f"{source}.{first} > {target}.{first}"
    if condition:
        newer_first += f" OR ({source}.{first} = {target}.{first} AND ({condition}))"
    return f"({source}.{first} IS NOT NULL AND ({target}.{first} IS NULL OR {newer_first}))"


def newest_per_key(rows: pa.Table, key: tuple[str, ...], parts: tuple[MergePart, ...]) -> pa.Table:
    """One row per key: for each part, the columns of the key's newest row that has the
    part's first order column (null where none has). A batch collected to the driver is
    reduced here instead of by a Spark aggregation: for ingest's device_status, a shuffle
    and a join per batch cost a 5,000-record batch about a quarter of its time
    (docs/benchmarks.md)."""
    newest = None
    for merge_part in parts:
        part = rows.select([*key, *merge_part.columns]).filter(pc.is_valid(rows[merge_part.order[0]]))
        part = part.take(pc.sort_indices(part, [(column, "ascending") for column in key]
                                         + [(column, "descending") for column in merge_part.order]))
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


def newest_candidates(rows: DataFrame, key: tuple[str, ...], parts: tuple[MergePart, ...]) -> DataFrame:
    """Of each part ``rows`` hold, each key's rows with the largest order columns (a tie keeps
    them all): the rows among which ``newest_per_key`` chooses, few enough to collect, where
    ``rows`` are a whole table's."""
    narrowed = []
    for part in (part for part in parts if part.order[0] in rows.columns):
        order = [F.col(column).desc_nulls_last() for column in part.order]
        ranked = rows.select(*key, *part.columns).where(F.col(part.order[0]).isNotNull())
        narrowed.append(ranked.withColumn("_rank", F.rank().over(Window.partitionBy(*key).orderBy(*order)))
                        .where(F.col("_rank") == 1).drop("_rank"))
    result = narrowed[0]
    for part_rows in narrowed[1:]:
        result = result.unionByName(part_rows, allowMissingColumns=True)
    return result
