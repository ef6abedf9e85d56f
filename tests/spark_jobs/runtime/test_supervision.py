"""How a failed query is explained to the operator: one line naming what broke."""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from spark_jobs.runtime.supervision import explain


def test_a_failure_spark_wraps_is_explained_by_its_innermost_cause(spark, tmp_path):
    """A scalar subquery's failure reaches the query as Spark's "Exception thrown in
    awaitResult", as a state store's commit check does: the line says what broke beneath it."""
    rows = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    failing = F.expr("(SELECT max(id) FROM range(3) WHERE raise_error('the state of partition 1 is gone') IS NULL)")
    query = (rows.select("value", failing.alias("m")).writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    with pytest.raises(StreamingQueryException) as failed:
        query.awaitTermination(120)
    assert "Exception thrown in awaitResult" in str(failed.value).splitlines()[0]  # the wrapper alone

    said = explain("dedup", failed.value).message

    assert said.startswith("job dedup failed: ")
    assert "caused by" in said and "the state of partition 1 is gone" in said, said
    assert "\n" not in said
