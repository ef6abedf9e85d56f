from deltalake import DeltaTable

from spark_jobs.delta_sink import DeltaSink
from spark_jobs.engines import Engines
from spark_jobs.tables import TableSpec

READINGS = TableSpec("readings", "device_id STRING, value DOUBLE", "test table")


def _sink(spark, settings):
    return DeltaSink(spark, settings, Engines("python", "delta-rs"))


def test_table_is_created_empty_with_its_schema(spark, settings):
    sink = _sink(spark, settings)
    assert sink.ensure_table(READINGS) is True
    assert sink.ensure_table(READINGS) is False
    table = DeltaTable(settings.table_uri("readings"))
    assert [f.name for f in table.schema().fields] == ["device_id", "value"]
    assert table.to_pyarrow_table().num_rows == 0


def test_a_replayed_batch_is_written_once(spark, settings):
    sink = _sink(spark, settings)
    sink.ensure_table(READINGS)
    batch = spark.createDataFrame([("d1", 1.0), ("d2", 2.0)], READINGS.schema)
    assert sink.append(batch, READINGS, "app-a", 0, {"batch_id": 0}) == 2
    assert sink.append(batch, READINGS, "app-a", 0, {"batch_id": 0}) is None
    assert sink.append(batch, READINGS, "app-b", 0, {"batch_id": 0}) == 2  # another checkpoint
    assert DeltaTable(settings.table_uri("readings")).to_pyarrow_table().num_rows == 4
    assert sink.committed_version(READINGS, "app-a") == 0
    assert [m["batch_id"] for m in sink.history_metadata(READINGS)] == [0, 0]


def test_merge_upserts_by_key_and_is_idempotent(spark, settings):
    sink = _sink(spark, settings)
    sink.ensure_table(READINGS)
    sink.merge(spark.createDataFrame([("d1", 1.0), ("d2", 2.0)], READINGS.schema), READINGS, ["device_id"], "app", 0, {})
    update = spark.createDataFrame([("d2", 5.0), ("d3", 3.0)], READINGS.schema)
    assert sink.merge(update, READINGS, ["device_id"], "app", 1, {}) == 2
    assert sink.merge(update, READINGS, ["device_id"], "app", 1, {}) is None
    rows = DeltaTable(settings.table_uri("readings")).to_pandas().sort_values("device_id")
    assert rows.values.tolist() == [["d1", 1.0], ["d2", 5.0], ["d3", 3.0]]
