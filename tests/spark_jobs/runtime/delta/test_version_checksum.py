"""A table delta-rs creates gets its newest version's checksum, as Delta's protocol describes
it: Spark's own validation finds it equal to the state it computes from the log, Spark's
appends read the table's constraint and properties through it, and a table with data files or
a checksum already there is left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.contracts.tables import ALL_TABLES, DEVICE_EVENTS_RAW, KEY_CONSTRAINT
from spark_jobs.runtime.delta import schema, table_access, version_checksum


def _checksum(uri: str, version: int) -> Path:
    return Path(uri) / "_delta_log" / f"{version:020d}.crc"


def _spark_validates(spark, uri: str, version: int) -> bool:
    """Delta's own check of a version's checksum against the state it computes from the log:
    True when equal; False or Delta's DeltaChecksumException when not."""
    jvm = spark._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # a snapshot read before would keep its checksum
    none = getattr(jvm.scala, "None$").__getattr__("MODULE$")
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri)
    snapshot = log.getSnapshotAt(version, none, none, False)
    return snapshot.validateChecksum(jvm.org.apache.spark.api.python.PythonUtils.toScalaMap({}))


@pytest.mark.parametrize("name", sorted(ALL_TABLES))
def test_a_table_delta_rs_creates_gets_the_checksum_spark_computes_for_it(spark, tmp_path, name):
    uri = str(tmp_path / name)
    assert schema.create_table(uri, ALL_TABLES[name]) == "created"
    version = table_access.open_table(uri).version()  # its properties, constraint: commits after the creation

    assert _checksum(uri, version).exists()
    assert _spark_validates(spark, uri, version)


ALTERED = {  # a checksum written wrong, as the log does not say
    "without the key constraint": lambda crc: crc["metadata"]["configuration"].pop(
        f"delta.constraints.{KEY_CONSTRAINT.lower()}"),
    "a data file counted": lambda crc: crc.update(numFiles=1, tableSizeBytes=100),
    "an older protocol": lambda crc: crc.update(protocol={"minReaderVersion": 1, "minWriterVersion": 2}),
}


@pytest.mark.parametrize("alteration", sorted(ALTERED))
def test_a_checksum_that_differs_from_the_log_fails_sparks_validation(spark, tmp_path, alteration):
    """The check above can fail: the checksum of the same table, written wrong, is refused."""
    uri = str(tmp_path / "raw")
    schema.create_table(uri, DEVICE_EVENTS_RAW)
    version = table_access.open_table(uri).version()
    assert _spark_validates(spark, uri, version)
    written = json.loads(_checksum(uri, version).read_text())
    ALTERED[alteration](written)
    _checksum(uri, version).write_text(json.dumps(written))

    with pytest.raises(Exception, match="DELTA_STATE_RECOVER_ERROR|DELTA_TXN_LOG_FAILED_INTEGRITY"):
        _spark_validates(spark, uri, version)


def test_spark_appends_to_such_a_table_keep_its_constraint_and_checksums(spark, tmp_path):
    """Spark's first append reads the table through the checksum: the key constraint it holds
    refuses a row without its key, and the checksum Spark derives for its own commit from
    ours is the one it validates."""
    uri = str(tmp_path / "raw")
    schema.create_table(uri, DEVICE_EVENTS_RAW)
    created = table_access.open_table(uri).version()
    columns = DEVICE_EVENTS_RAW.schema
    kept = {"key": b"d1", "value": b"{}", "topic": "events", "partition": 0, "offset": 7}
    spark.createDataFrame([tuple(kept.get(field.name) for field in columns)], columns) \
        .write.format("delta").mode("append").save(uri)
    keyless = {**kept, "offset": None}
    with pytest.raises(Exception, match=KEY_CONSTRAINT):
        spark.createDataFrame([tuple(keyless.get(field.name) for field in columns)], columns) \
            .write.format("delta").mode("append").save(uri)

    assert table_access.open_table(uri).version() == created + 1
    assert _checksum(uri, created + 1).exists() and _spark_validates(spark, uri, created + 1)
    assert spark.read.format("delta").load(uri).count() == 1


def test_a_table_with_data_files_or_a_checksum_already_there_is_left_alone(tmp_path):
    uri = str(tmp_path / "raw")
    schema.create_table(uri, DEVICE_EVENTS_RAW)
    version = table_access.open_table(uri).version()
    before = _checksum(uri, version).read_bytes()
    assert version_checksum.write_for_new_table(uri) is None  # never written over
    assert _checksum(uri, version).read_bytes() == before

    arrow = schema.arrow_schema(DEVICE_EVENTS_RAW)
    row = {"key": b"d1", "value": b"{}", "topic": "events", "partition": 0, "offset": 7}
    table_access.append(uri, pa.Table.from_pylist([row], schema=arrow))
    assert version_checksum.write_for_new_table(uri) is None  # delta-rs' append wrote none: Spark derives it
    assert not _checksum(uri, version + 1).exists()
