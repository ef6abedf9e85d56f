"""A batch's own values reach its rows without making Spark generate new code every batch."""

from datetime import datetime

from pyspark.sql import functions as F

from spark_jobs.contracts.tables import DEVICE_EVENTS
from spark_jobs.jobs.alert_join import dropped_by_the_join
from spark_jobs.jobs.base import BatchContext
from spark_jobs.jobs.batch_values import batch_bigint, batch_timestamp
from spark_jobs.jobs.event_time import behind_watermark
from spark_jobs.jobs.ingest import split_ingest_batch
from spark_jobs.local.simulate import event_payload
from spark_jobs.runtime.commit import _stamped
from spark_jobs.runtime.delta.commit_info import CommitInfo


def java_code(frame) -> list[str]:
    """The Java code Spark generates for the frame's plan (its lines, without the plan's text)."""
    plan = frame._jdf.queryExecution().executedPlan()
    text = frame.sparkSession._jvm.org.apache.spark.sql.execution.debug.package.codegenString(plan)
    return [line for line in text.splitlines() if line.startswith("/* ")]


def test_the_values_are_the_batch_s(spark):
    # the instant as milliseconds since the epoch: Python's datetime would be in this machine's zone
    rows = spark.range(3).repartition(3).select(
        batch_bigint(0).alias("zero"), batch_bigint(2**40 + 7).alias("large"),
        F.unix_millis(batch_timestamp(1_764_700_000_123)).alias("at")).collect()
    assert {(r.zero, r.large, r.at) for r in rows} == {(0, 2**40 + 7, 1_764_700_000_123)}  # in every partition
    assert dict(spark.range(1).select(batch_bigint(5).alias("b"), batch_timestamp(0).alias("t")).dtypes) == {
        "b": "bigint", "t": "timestamp"}


def test_a_literal_is_new_code_in_each_batch_and_these_are_not(spark):
    base = spark.range(10)
    assert java_code(base.select(F.lit(1).cast("bigint"))) != java_code(base.select(F.lit(2).cast("bigint")))
    assert java_code(base.select(batch_bigint(1))) == java_code(base.select(batch_bigint(2)))
    assert java_code(base.select(batch_timestamp(1_764_700_000_000))) == java_code(
        base.select(batch_timestamp(1_764_700_010_000)))


def test_ingest_and_the_commit_s_stamps_generate_the_same_code_for_every_batch(spark, settings):
    records = spark.createDataFrame(
        [(b"d-1", event_payload("e-1", "d-1", 1_764_583_200_000, 0.5), settings.streaming.events_topic,
          0, 0, datetime(2026, 12, 1, 10, 0, 1))],
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp")

    def batch(batch_id: int, at_ms: int):
        context = BatchContext(job="ingest", batch_id=batch_id, watermark_ms=0, batch_timestamp_ms=at_ms)
        outputs = split_ingest_batch(settings.streaming, records, context)
        stamped = _stamped(outputs[DEVICE_EVENTS.name], DEVICE_EVENTS,
                           CommitInfo(job="ingest", checkpoint_id="c-1", app_id="a", batch_id=batch_id))
        return {**{name: java_code(frame) for name, frame in outputs.items()}, "stamped": java_code(stamped)}

    first, second = batch(3, 1_764_700_000_000), batch(4, 1_764_700_010_000)
    assert set(first) == {"device_events_raw", "device_events", "device_alerts", "quarantined_events",
                          "device_status", "stamped"}
    assert all(first[name] for name in first)  # Spark generated code for each
    assert first == second


def test_the_late_rules_generate_the_same_code_whatever_the_watermark(spark, settings):
    # Every stateful batch that dropped rows reads its records again under its job's late
    # rule: a watermark compiled into that code would make it new in every such batch.
    streaming = settings.streaming
    records = spark.createDataFrame(
        [(b"d-1", event_payload("e-1", "d-1", 1_764_583_200_000, 0.5), streaming.events_topic,
          0, 0, datetime(2026, 12, 1, 10, 0, 1), 0)],
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
        "timestampType int")
    for rule in (behind_watermark, dropped_by_the_join):
        first, second = (java_code(rule(streaming, records, watermark_ms))
                         for watermark_ms in (1_764_583_100_000, 1_764_583_110_000))
        assert first, rule.__name__  # Spark generated code for it
        assert first == second, rule.__name__
