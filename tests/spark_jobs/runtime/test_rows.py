"""A batch asks each output whether it has a row before it commits it. The answer must be
isEmpty's, wherever the one row is; and asking again, as the next batch does, must not
compile code again (Spark's own count of compilations, CodegenMetrics)."""

import pytest
from pyspark.sql import functions as F

from spark_jobs.runtime.rows import has_rows


def _compilations(spark) -> int:
    return spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount()


@pytest.fixture(scope="module")
def numbers(spark):
    frame = spark.range(0, 3000, numPartitions=3).withColumn("kind", F.col("id") % 7).persist()
    frame.count()
    yield frame
    frame.unpersist()


@pytest.mark.parametrize(("where", "expected"), [
    ("kind = 3", True),  # in every partition
    ("kind = 9", False),  # in none
    ("id = 2999", True),  # in the last partition only: the first read finds nothing
    ("id = 0", True),  # in the first only
])
def test_the_answer_is_is_empty_s(numbers, where, expected):
    frame = numbers.where(where)
    assert has_rows(frame) is expected
    assert (not frame.isEmpty()) is expected


def test_an_empty_relation_and_a_frame_read_before_any_action(spark):
    assert not has_rows(spark.range(0))
    assert has_rows(spark.createDataFrame([(1, "a")], "n INT, s STRING").where("n = 1"))


def test_asking_again_compiles_nothing_where_is_empty_compiles_anew(numbers):
    spark = numbers.sparkSession

    def union():  # as quarantined_events' rows: the refused events' and the refused alerts'
        return numbers.where("kind = 5").unionByName(numbers.where("kind = 6")).withColumn("job", F.lit("ingest"))

    has_rows(union())
    union().isEmpty()  # each once, so code shared by both is compiled before counting
    before = _compilations(spark)
    for _ in range(3):
        assert has_rows(union())
    assert _compilations(spark) == before
    # the reason the helper exists: isEmpty pushes its limit into each part of the union,
    # and Spark names each limit's counter in the code from a JVM-wide sequence
    for _ in range(3):
        assert not union().isEmpty()
    assert _compilations(spark) > before
