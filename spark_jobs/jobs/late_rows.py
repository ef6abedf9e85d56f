"""A batch's late rows: the records a stateful job's operators drop because the watermark has
passed them, told apart in the stream's own plan as it reads them.

Spark counts the rows its stateful operators drop as late but keeps none of them. A job
declares which of its rows are late (``LateRule``: at or behind the watermark on one time
column) and its plan carries an observation (Spark's ``Dataset.observe``) that collects each
such row as the batch reads it. The watermark those operators drop by is not in the plan: the
batch's driver puts it in a local property (``LATE_WATERMARK_PROPERTY``) that every task of
the batch carries, read by a function of the parser's JAR (``flat_records.at_or_behind_batch_
watermark``). The observation also counts the rows it could not judge (no property): then it
is not the batch's answer, and the same rule, with the watermark as a value, selects the late
rows of the batch's records read again (``LateRule.selected``), as it does without the JAR.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.contracts import flat_records
from spark_jobs.jobs.batch_values import batch_timestamp

LATE_WATERMARK_PROPERTY = "sigflow.late_watermark_ms"
OBSERVATION_PREFIX = "sigflow_late_"
# one late row as observed and as selected: late_events' columns, its time in microseconds
# (exact through the observation's JSON)
ROW_FIELDS = ("record_kind", "event_id", "device_id", "event_time_us", "signal", "missed", "topic", "partition",
              "offset")


@dataclass(frozen=True)
class LateRule:
    """Rows whose ``time`` is at or behind the watermark, as late_events rows of ``record_kind``
    (``id`` as their event_id, ``signal`` where the rows have one)."""

    record_kind: str
    time: str
    id: str
    missed: str
    signal: str | None = "signal"

    def row(self, late: Column) -> Column:
        """A row's late_events fields where ``late`` holds, else null."""
        signal = F.col(self.signal) if self.signal else F.lit(None).cast("double")
        fields = (F.lit(self.record_kind), F.col(self.id), F.col("device_id"), F.unix_micros(self.time), signal,
                  F.lit(self.missed), F.col("topic"), F.col("partition"), F.col("offset"))
        return F.when(late, F.struct(*(f.alias(n) for f, n in zip(fields, ROW_FIELDS))))

    def observed(self, rows: DataFrame) -> DataFrame:
        """``rows`` with this rule's observation of each batch's late rows; ``rows`` as they
        are where the JVM lacks the parser's JAR."""
        late = flat_records.at_or_behind_batch_watermark(F.unix_micros(self.time), LATE_WATERMARK_PROPERTY)
        if late is None:
            return rows
        return rows.observe(OBSERVATION_PREFIX + self.record_kind, F.collect_list(self.row(late)).alias("rows"),
                            F.count_if(late.isNull()).alias("unjudged"))

    def selected(self, rows: DataFrame, watermark_ms: int) -> DataFrame:
        """The late rows of ``rows`` (a batch read again), judged by ``watermark_ms`` (as the
        same code whatever it is: batch_values)."""
        late = self.row(F.col(self.time) <= batch_timestamp(watermark_ms)).alias("late")
        return rows.select(late).where(F.col("late").isNotNull()).select("late.*")
