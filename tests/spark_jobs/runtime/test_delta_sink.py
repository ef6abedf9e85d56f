"""Both writers behind one interface: the same table, the same exactly-once behaviour."""

import pytest
from deltalake import DeltaTable

from spark_jobs.contracts.tables import TableSpec
from spark_jobs.runtime.delta_sink import DeltaRsSink, DeltaSparkSink
from spark_jobs.runtime.delta_tables import commit_metadata, count_matching

READINGS = TableSpec("readings", "device_id STRING, value DOUBLE", "test table")
WRITERS = pytest.mark.parametrize("writer", [DeltaSparkSink, DeltaRsSink], ids=["delta-spark", "delta-rs"])


@WRITERS
def test_table_is_created_empty_with_its_schema(spark, settings, writer):
    sink = writer(spark, settings)
    assert sink.ensure_table(READINGS) is True
    assert sink.ensure_table(READINGS) is False
    table = DeltaTable(settings.table_uri("readings"))
    assert [f.name for f in table.schema().fields] == ["device_id", "value"]
    assert count_matching(table.table_uri) == 0


@WRITERS
def test_a_replayed_batch_is_written_once(spark, settings, writer):
    sink = writer(spark, settings)
    sink.ensure_table(READINGS)
    batch = spark.createDataFrame([("d1", 1.0), ("d2", 2.0)], READINGS.schema)
    assert sink.append(batch, READINGS, "app-a", 0, {"batch_id": 0}) == 2
    assert sink.append(batch, READINGS, "app-a", 0, {"batch_id": 0}) is None
    assert sink.append(batch, READINGS, "app-b", 0, {"batch_id": 0}) == 2  # another checkpoint
    assert count_matching(settings.table_uri("readings")) == 4
    assert sink.committed_version(READINGS, "app-a") == 0
    assert [m["batch_id"] for m in commit_metadata(settings.table_uri("readings"))] == [0, 0]


def test_delta_spark_itself_skips_a_transaction_it_already_holds(spark, settings):
    """The guard is Delta's own: a replay that bypasses sigflow's pre-check writes nothing."""
    sink = DeltaSparkSink(spark, settings)
    sink.ensure_table(READINGS)
    batch = spark.createDataFrame([("d1", 1.0)], READINGS.schema)
    assert sink._append(batch, READINGS, "app", 3, '{"try": 1}') == 1
    assert sink._append(batch, READINGS, "app", 3, '{"try": 2}') is None  # the replay
    assert sink._append(batch, READINGS, "app", 2, '{"try": 3}') is None  # an older batch
    assert count_matching(settings.table_uri("readings")) == 1
