"""device_events_raw read as Spark's Kafka source reads a topic: the same columns, the same
records in the same order per partition, and offsets in the Kafka source's own form
(``{topic: {partition: offset}}``).

That form is the point: the offset log a replay leaves is one the Kafka source resumes from,
so a job replayed from raw carries on from Kafka at exactly the offset where raw ended, on
the same checkpoint, with its state; and every sigflow reader of the offset log (the commit's
end offsets, rewinds, recover from Delta) reads a replayed batch like any other.

A batch reads at most ``max_offsets_per_trigger`` offsets, spread over the partitions by
what each has left, as the Kafka source bounds a batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from spark_jobs.contracts.events import KAFKA_RECORD_SCHEMA
from spark_jobs.runtime.replay.extent import Offsets

NAME = "sigflow_raw_replay"
# offsets per read task: a partition's range is read by several tasks when it is long, so
# both cores read, and no task holds more than this many rows at once
OFFSETS_PER_TASK = 200_000
# timestampType as Kafka's source gives it for a topic the broker stamps (LogAppendTime, which
# a job checks its topics for when it starts): raw keeps no such column
LOG_APPEND_TIME = 1
ARROW_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                          ("partition", pa.int32()), ("offset", pa.int64()),
                          ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())])


@dataclass(frozen=True)
class RawRecords:
    """A job's records from raw, ``first`` to ``until``: its stream, and one batch's range read
    again, as ``KafkaRecords`` gives them from Kafka (runtime/kafka/source.py)."""

    spark: SparkSession
    raw_uri: str
    first: Offsets
    until: Offsets
    max_offsets: int
    version: int | None = None  # of raw, the one the restart's plan read (None: the current one)

    def stream(self) -> DataFrame:
        return read_stream(self.spark, self.raw_uri, self.first, self.until, self.max_offsets, self.version)

    def range(self, start: Offsets, end: Offsets) -> DataFrame:
        return read_range(self.spark, self.raw_uri, start, end, self.version)


class RawReplaySource(DataSource):
    """Options: ``uri`` (device_events_raw) and ``version`` (the one to read; empty: the
    current one), ``from`` and ``until`` (offsets as JSON: where a new checkpoint's first
    batch starts, and where the replay ends), ``max_offsets``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return KAFKA_RECORD_SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:
        return RawReplayReader(self.options)

    def reader(self, schema) -> DataSourceReader:
        return RawRangeReader(self.options)


class RawRangeReader(DataSourceReader):
    """One batch's records again, [from, until) per partition (the late-events rule's read)."""

    def __init__(self, options):
        self.uri, self.first, self.until = options["uri"], json.loads(options["from"]), json.loads(options["until"])
        self.version = _version(options)

    def partitions(self) -> list[InputPartition]:
        return read_tasks(self.uri, self.first, self.until, self.version)

    def read(self, partition: InputPartition) -> Iterator:
        yield from read_task(partition)


class RawReplayReader(DataSourceStreamReader):
    def __init__(self, options):
        self.uri = options["uri"]
        self.first: Offsets = json.loads(options["from"])
        self.until: Offsets = json.loads(options["until"])
        self.max_offsets = int(options.get("max_offsets") or 0)
        self.version = _version(options)

    def initialOffset(self) -> dict:
        return self.first

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        left = {(topic, part): max(0, end - self._start(start, topic, part))
                for topic, parts in self.until.items() for part, end in parts.items()}
        total = sum(left.values())
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else total
        if total <= budget:
            return self.until
        # each partition's share of the budget by what it has left, at least one offset
        # where it has any (the Kafka source's rule for maxOffsetsPerTrigger)
        latest: Offsets = {}
        for (topic, part), remaining in left.items():
            share = min(remaining, max(1 if remaining else 0, remaining * budget // total))
            latest.setdefault(topic, {})[part] = self._start(start, topic, part) + share
        return latest

    def _start(self, start: dict, topic: str, part: str) -> int:
        return _offset(start, topic, part, _offset(self.first, topic, part, 0))

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return read_tasks(self.uri, {topic: {part: self._start(start, topic, part) for part in parts}
                                     for topic, parts in end.items()}, end, self.version)

    def read(self, partition: InputPartition) -> Iterator:
        yield from read_task(partition)

    def commit(self, end: dict) -> None:
        pass  # raw keeps every record: nothing to acknowledge


def _version(options) -> int | None:
    return int(options["version"]) if options.get("version") else None


def _offset(offsets: dict, topic: str, part: str, default: int) -> int:
    return int(offsets.get(topic, {}).get(part, default))


def read_tasks(uri: str, start: Offsets, end: Offsets, version: int | None) -> list[InputPartition]:
    """The read tasks of [start, end) per partition (a partition missing from ``start``
    from its offset 0), each at most ``OFFSETS_PER_TASK`` long."""
    tasks = []
    for topic, parts in end.items():
        for part, stop in parts.items():
            for low in range(_offset(start, topic, part, 0), int(stop), OFFSETS_PER_TASK):
                tasks.append(InputPartition((uri, topic, int(part), low, min(int(stop), low + OFFSETS_PER_TASK),
                                             version)))
    return tasks


def read_task(partition: InputPartition) -> Iterator:
    yield from read_records(*partition.value).to_batches()


def read_records(uri: str, topic: str, partition: int, low: int, high: int, version: int | None = None):
    """The records of ``topic``[``partition``] at offsets [low, high) in raw (at ``version``,
    else the current one), as Arrow in the Kafka source's columns, in offset order, each
    offset once. At the version a plan read, a replay reads what was approved: rows deleted
    from raw since (``raw_retention``, or by hand) are still read while vacuum keeps that
    version's files (tests/spark_jobs/ops/restart/test_recover_from_raw.py)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from spark_jobs.runtime.delta.table_access import read_arrow

    where = ((ds.field("topic") == topic) & (ds.field("partition") == partition)
             & (ds.field("offset") >= low) & (ds.field("offset") < high))
    rows = read_arrow(uri, ["key", "value", "topic", "partition", "offset", "kafka_timestamp"], where, version)
    if rows.num_rows == 0:
        return ARROW_SCHEMA.empty_table()
    rows = rows.sort_by("offset")
    offsets = rows.column("offset")
    if rows.num_rows > 1:  # a row per offset, should raw ever hold one twice
        repeated = pc.equal(offsets.slice(1), offsets.slice(0, rows.num_rows - 1))
        rows = rows.filter(pa.concat_arrays([pa.array([True]), pc.invert(repeated.combine_chunks())]))
    return pa.table({
        "key": rows.column("key"), "value": rows.column("value"), "topic": rows.column("topic"),
        "partition": rows.column("partition"), "offset": rows.column("offset"),
        "timestamp": rows.column("kafka_timestamp"),
        "timestampType": pa.repeat(pa.scalar(LOG_APPEND_TIME, pa.int32()), rows.num_rows),
    }).cast(ARROW_SCHEMA)


def read_stream(spark: SparkSession, raw_uri: str, first: Offsets, until: Offsets, max_offsets: int,
                version: int | None = None) -> DataFrame:
    """The records of raw from ``first`` (a new checkpoint's start; a checkpoint's own offsets
    otherwise) to ``until``, as a stream of the Kafka source's shape."""
    spark.dataSource.register(RawReplaySource)
    return (spark.readStream.format(NAME).option("uri", raw_uri).option("from", json.dumps(first))
            .option("until", json.dumps(until)).option("max_offsets", str(max_offsets))
            .option("version", "" if version is None else str(version)).load())


def read_range(spark: SparkSession, raw_uri: str, start: Offsets, end: Offsets,
               version: int | None = None) -> DataFrame:
    """The records of raw at [start, end) per partition (one batch's), as a batch read."""
    spark.dataSource.register(RawReplaySource)
    return (spark.read.format(NAME).option("uri", raw_uri).option("from", json.dumps(start))
            .option("until", json.dumps(end)).option("version", "" if version is None else str(version)).load())
