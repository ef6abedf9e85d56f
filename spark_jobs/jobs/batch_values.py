"""A micro-batch's own values (its id, its time) as columns whose generated code is the same
in every batch.

Spark writes an integer or timestamp literal into the Java code it generates for a plan, so a
projection stamping ``F.lit(batch_id)`` is new code in every batch: Janino compiles it again,
and the JVM runs each batch's rows through a class it has never compiled, then compiles that
class too. A string literal is kept in the plan's reference array instead; but Spark folds a
cast of a constant back into a literal (even one it pushed into a ``CASE`` branch), so the
value's string is cast after a ``coalesce`` with a null Spark cannot compute while planning
(the partition's id is never negative): the same code whatever the value
(docs/streaming-facts.md, "Code generated anew").

Use these in projections, and in a condition only where no scan could take it (a column the
plan computes): a condition Spark cannot evaluate is also one it does not push into a table's
scan, so a filter on a table's own column keeps ``F.lit``.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def batch_bigint(value: int) -> Column:
    """``value`` as a BIGINT column, the same generated code for any value."""
    never = F.when(F.spark_partition_id() < 0, F.lit(None).cast("string"))
    return F.coalesce(never, F.lit(str(int(value)))).cast("bigint")


def batch_timestamp(epoch_ms: int) -> Column:
    """The instant ``epoch_ms`` (milliseconds since the epoch) as a TIMESTAMP column, the
    same generated code for any instant."""
    return F.timestamp_millis(batch_bigint(epoch_ms))
