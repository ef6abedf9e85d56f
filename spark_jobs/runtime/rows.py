"""Whether a DataFrame has a row, asked without compiling classes for each question.

``DataFrame.isEmpty`` plans a one-row limit. Over a union (quarantined_events' rows of events
and of alerts, the windowed outputs) Spark pushes the limit into each of its parts, in their
generated code, and names each limit's counter from a JVM-wide sequence (``BaseLimitExec``):
every call's code is new, and Janino compiles it again, two classes a part (measured,
docs/streaming-facts.md). Taking one row from the frame's own plan runs the same tasks with
code that is the same from batch to batch, which Spark's code cache holds.
"""

from __future__ import annotations

from pyspark.sql import DataFrame


def has_rows(frame: DataFrame) -> bool:
    """True when ``frame`` holds at least one row; only as many partitions are read as
    finding one takes, as ``isEmpty`` does (``SparkPlan.executeTake``)."""
    plan = frame.select()._jdf.queryExecution().executedPlan()  # no column: nothing to ship
    return len(plan.executeTake(1)) > 0
