"""A Kafka source for Spark written with the Python Data Source API (Spark 4.2).

The python engine's source (``SIGFLOW_ENGINE=python``, or when Spark's own Kafka connector
JAR is not installed). It mirrors Spark's source where sigflow depends on it:

* the same schema: key, value, topic, partition, offset, timestamp, timestampType;
* offsets in Spark's checkpoint, in the native JSON form ``{"topic": {"0": 42}}``;
* options ``kafka.bootstrap.servers``, ``subscribe``, ``startingOffsets`` (earliest, latest
  or per-partition JSON with -2/-1), ``maxOffsetsPerTrigger`` (served through
  ``latestOffset(start, limit)``) and ``failOnDataLoss``;
* the security options ``kafka.security.protocol``, ``kafka.sasl.mechanism``,
  ``kafka.sasl.jaas.config`` and a PEM ``kafka.ssl.truststore.location`` (kafka_connection.py);
* Trigger.AvailableNow support.

End offsets are confirmed by reading (see ``kafka_client.offset_bounds``); a partition
reader that cannot reach the end it was promised fails the batch instead of returning
fewer rows, so nothing silently stops short.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.runtime.kafka_connection import KafkaConnection

FORMAT_NAME = "sigflow_kafka"
EARLIEST, LATEST = -2, -1
ARROW_BATCH_ROWS = 20_000
log = logging.getLogger("sigflow.kafka_source")

KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
_ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)

DATA_LOSS_MARKER = "SIGFLOW_DATA_LOSS"


@dataclass
class KafkaRange(InputPartition):
    topic: str
    partition: int
    from_offset: int  # EARLIEST for a partition first seen in this batch
    until_offset: int  # exclusive


def _parse_offsets_option(text: str) -> dict[str, dict[str, int]]:
    parsed = json.loads(text)
    return {t: {str(p): int(o) for p, o in parts.items()} for t, parts in parsed.items()}


def split_limit(available: dict[tuple[str, str], int], max_rows: int) -> dict[tuple[str, str], int]:
    """Share ``max_rows`` across partitions exactly as Spark's Kafka source does
    (``KafkaMicroBatchStream.rateLimit``), so both engines cut the same micro-batches: each
    partition with a backlog gets ``floor(max_rows * backlog / total)``, at least 1 when
    that share is below 1 (no partition starves), never more than its backlog."""
    total = sum(n for n in available.values() if n > 0)
    if total < 1:
        return dict(available)
    grant = {}
    for key, backlog in available.items():
        if backlog <= 0:
            grant[key] = backlog
            continue
        prorate = max_rows * (backlog / total)
        grant[key] = min(backlog, math.ceil(prorate) if prorate < 1 else math.floor(prorate))
    return grant


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]):
        # Spark hands data source options over with lower-cased keys; accept either form.
        options = {k.lower(): v for k, v in options.items()}
        self.kafka = KafkaConnection.from_spark_options(options)
        self.topics = [t.strip() for t in options["subscribe"].split(",") if t.strip()]
        self.starting = options.get("startingoffsets", "earliest")
        self.max_offsets = int(options.get("maxoffsetspertrigger", 0) or 0)
        self.fail_on_data_loss = options.get("failondataloss", "true").lower() == "true"
        self.read_timeout_s = float(options.get("sigflow.readtimeoutseconds", 30))
        self.available_now_target: dict | None = None

    # ---- offsets -----------------------------------------------------------------------
    def _bounds(self) -> dict[str, dict[str, tuple[int, int]]]:
        from spark_jobs.runtime import kafka_client

        out = {}
        for topic in self.topics:
            parts = kafka_client.topic_partitions(self.kafka, topic)
            bounds = kafka_client.offset_bounds(self.kafka, topic, parts, self.read_timeout_s)
            out[topic] = {str(p): b for p, b in bounds.items()}
        return out

    def initialOffset(self) -> dict:
        bounds = self._bounds()
        if self.starting in ("earliest", "latest"):
            pick = 0 if self.starting == "earliest" else 1
            return {t: {p: b[pick] for p, b in parts.items()} for t, parts in bounds.items()}
        wanted = _parse_offsets_option(self.starting)
        offsets = {}
        for topic, parts in bounds.items():
            offsets[topic] = {}
            for p, (low, high) in parts.items():
                o = wanted.get(topic, {}).get(p, EARLIEST)
                offsets[topic][p] = low if o == EARLIEST else high if o == LATEST else o
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets > 0 else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now_target = {
            t: {p: b[1] for p, b in parts.items()} for t, parts in self._bounds().items()
        }

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        bounds = self._bounds()
        ends: dict[str, dict[str, int]] = {}
        available: dict[tuple[str, str], int] = {}
        for topic, parts in bounds.items():
            ends[topic] = {}
            for p, (low, high) in parts.items():
                if self.available_now_target is not None:
                    high = min(high, self.available_now_target.get(topic, {}).get(p, high))
                begin = start.get(topic, {}).get(p, low)
                self._check_data_loss(topic, p, begin, low, high)
                begin = min(max(begin, low), high) if begin <= high else low
                available[(topic, p)] = high - begin
                ends[topic][p] = begin  # moved forward below
        if isinstance(limit, ReadMaxRows):
            grant = split_limit(available, limit.max_rows)
        else:
            grant = available
        for (topic, p), n in grant.items():
            ends[topic][p] += n
        return ends

    def _check_data_loss(self, topic: str, p: str, begin: int, low: int, high: int) -> None:
        if low <= begin <= high:
            return
        what = (
            f"offsets {begin}..{low - 1} of {topic}[{p}] are no longer in Kafka (earliest is {low})"
            if begin < low
            else f"{topic}[{p}] ends at {high} but the checkpoint is already at {begin} "
            "(topic recreated or broker storage lost)"
        )
        if self.fail_on_data_loss:
            raise RuntimeError(
                f"{DATA_LOSS_MARKER}: {what}. Set failOnDataLoss=false "
                "(SIGFLOW_FAIL_ON_DATA_LOSS=false) to skip ahead, or see docs/runbooks/"
                "checkpoint-lost-or-corrupt.md"
            )
        log.warning("data loss skipped (failOnDataLoss=false): %s; resuming at %s", what, low)

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        ranges = []
        for topic, parts in end.items():
            for p, until in parts.items():
                begin = start.get(topic, {}).get(p, EARLIEST)
                if begin > until:  # the data-loss reset chosen in latestOffset
                    begin = EARLIEST
                if begin == EARLIEST or begin < until:
                    ranges.append(KafkaRange(topic, int(p), begin, until))
        return ranges

    # ---- reading (runs on executors) ---------------------------------------------------
    def read(self, partition: KafkaRange) -> Iterator[pa.RecordBatch]:
        return read_range(self.kafka, partition, self.fail_on_data_loss, self.read_timeout_s)


class KafkaBatchReader(DataSourceReader):
    """``spark.read`` of an exact offset range (startingOffsets/endingOffsets JSON), as the
    native source allows; used to look at one micro-batch's input again."""

    def __init__(self, options: dict[str, str]):
        options = {k.lower(): v for k, v in options.items()}
        self.kafka = KafkaConnection.from_spark_options(options)
        self.starting = _parse_offsets_option(options["startingoffsets"])
        self.ending = _parse_offsets_option(options["endingoffsets"])
        self.fail_on_data_loss = options.get("failondataloss", "true").lower() == "true"
        self.read_timeout_s = float(options.get("sigflow.readtimeoutseconds", 30))

    def partitions(self) -> list[KafkaRange]:
        return [
            KafkaRange(topic, int(p), self.starting.get(topic, {}).get(p, EARLIEST), until)
            for topic, parts in self.ending.items()
            for p, until in parts.items()
            if self.starting.get(topic, {}).get(p, EARLIEST) < until
        ] or [KafkaRange("", 0, 0, 0)]

    def read(self, partition: KafkaRange) -> Iterator[pa.RecordBatch]:
        if not partition.topic:
            return iter(())
        return read_range(self.kafka, partition, self.fail_on_data_loss, self.read_timeout_s)


def read_range(
    kafka: KafkaConnection, partition: KafkaRange, fail_on_data_loss: bool, read_timeout_s: float
) -> Iterator[pa.RecordBatch]:
    """Records [from_offset, until_offset) of one partition as Arrow batches."""
    from confluent_kafka import KafkaError, TopicPartition

    from spark_jobs.runtime import kafka_client

    consumer = kafka_client.consumer(
        kafka, **{"auto.offset.reset": "earliest" if not fail_on_data_loss else "error"}
    )
    tp = TopicPartition(partition.topic, partition.partition)
    start = partition.from_offset
    if start == EARLIEST:
        start = consumer.get_watermark_offsets(tp, timeout=read_timeout_s)[0]
    consumer.assign([TopicPartition(partition.topic, partition.partition, start)])
    columns: dict[str, list] = {f.name: [] for f in _ARROW_SCHEMA}
    position = start
    last_progress = time.monotonic()
    try:
        while position < partition.until_offset:
            messages = consumer.consume(ARROW_BATCH_ROWS, timeout=0.05)
            if messages:
                last_progress = time.monotonic()
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= partition.until_offset:
                            position = partition.until_offset
                        continue
                    lost = DATA_LOSS_MARKER + ":" if err.code() == KafkaError._AUTO_OFFSET_RESET else ""
                    raise RuntimeError(
                        f"{lost} reading {partition.topic}[{partition.partition}] at {position}: {err.str()}"
                    )
                offset = msg.offset()
                if offset >= partition.until_offset:
                    position = partition.until_offset
                    break
                ts_type, ts = msg.timestamp()
                columns["key"].append(msg.key())
                columns["value"].append(msg.value())
                columns["offset"].append(offset)
                columns["timestamp"].append(ts * 1000 if ts >= 0 else None)
                # librdkafka: 1 create time, 2 log-append time; Spark's Kafka source: 0 and 1
                columns["timestampType"].append(max(ts_type - 1, 0))
                position = offset + 1
            if len(columns["offset"]) >= ARROW_BATCH_ROWS:
                yield _arrow_batch(columns, partition)
            if time.monotonic() - last_progress > read_timeout_s:
                raise RuntimeError(
                    f"{partition.topic}[{partition.partition}] stopped at offset {position}, "
                    f"before the end {partition.until_offset} this batch was planned with; "
                    "failing the batch rather than losing records (it will be retried)"
                )
        if columns["offset"]:
            yield _arrow_batch(columns, partition)
    finally:
        consumer.close()


def _arrow_batch(columns: dict[str, list], partition: KafkaRange) -> pa.RecordBatch:
    n = len(columns["offset"])
    columns["topic"] = [partition.topic] * n
    columns["partition"] = [partition.partition] * n
    batch = pa.RecordBatch.from_pydict(columns, schema=_ARROW_SCHEMA)
    for values in columns.values():
        values.clear()
    return batch


class KafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        missing = [k for k in ("kafka.bootstrap.servers", "subscribe") if k not in self.options]
        if missing:
            raise ValueError(f"{FORMAT_NAME} source needs options: {', '.join(missing)}")
        return KafkaStreamReader(dict(self.options))

    def reader(self, schema: StructType) -> KafkaBatchReader:
        return KafkaBatchReader(dict(self.options))
