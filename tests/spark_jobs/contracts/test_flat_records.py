"""The flat-record parser (infra/contract-parser) changes no row: every record gives the same
typed columns, extras and reason with it as through the contract's checks alone, which is
what a session without its JAR runs. The records are the edge cases the parser must leave to
the checks, common ones it must take, and the contract fuzzer's generated ones."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import functions as F

from spark_jobs.config import load_settings
from spark_jobs.contracts import flat_records
from spark_jobs.contracts.events import (
    ALERT_CONTRACT,
    EVENT_CONTRACT,
    KAFKA_RECORD_SCHEMA,
    with_contract_columns,
)
from spark_jobs.jobs.event_time import behind_watermark
from tests.spark_jobs.contracts.test_contract_fuzz import (
    BATCH,
    FUZZ,
    KAFKA_TIME,
    MAX_AHEAD,
    records,
)

GOOD = {"event_id": "e1", "device_id": "d1", "event_time": "2026-11-22T12:04:00.250Z", "signal": 50.125}


def event(**changes) -> str:
    return json.dumps({**GOOD, **changes})


def with_signal(text: str) -> str:
    """An event whose signal is written as ``text`` (json.dumps writes 1.5e3 as 1500.0)."""
    return event().replace('"signal": 50.125', f'"signal": {text}')


# The parser takes these: flat, exact, every field of its type.
TAKEN = [
    event(),
    event(firmware="1.4.2", retries=3, charging=True, muted=False, negative=-0, big=-9223372036854775808),
    event(event_time=1795349040000, signal=-7),
    event(signal=123456789.012345),  # 15 digits
    event(event_time="2026-11-22 13:04:00+01:00", note="caf\u00e9 \u2603 \U0001f600"),
    json.dumps({**GOOD, "note": "caf\u00e9 \u2603 \U0001f600"}, ensure_ascii=False),  # as UTF-8, not escaped
    event(note='tab\t, "quote" and \\u0041'),  # escapes
    " \n\t" + event() + "\r\n",
]
# The parser leaves these to the checks, valid or not: each has something it cannot be sure of.
LEFT = [
    event(tags={"b": 1, "a": 2}), event(tags=[1, 2]), event(note=None), event(ratio=0.5),
    with_signal("1.5e3"), with_signal("15E-1"), with_signal("1234567890.1234567"), with_signal("-0.0"),
    with_signal(str(10**19)),
    event(big=10**19), event(event_time=1.7953490400e12), event(event_time=None), event(event_id=None),
    event(event_id=7), event(signal="1.5"), event(event_time=-62135596800001),
    '{"event_id": "a", "event_id": "b", "device_id": "d1", "event_time": 1795349040000, "signal": 1}',
    '{"x": 1, "x": 2, "event_id": "e", "device_id": "d1", "event_time": 1795349040000, "signal": 1}',
    event(note="\ud800"), event(**{"\udc00": "x"}), event(device_id="\udbff"),
    event() + " {}", event() + " x", "\ufeff" + event(), "[" + event() + "]", '"text"', "12", "",
    '{"event_id": "e", "device_id": "d1", "event_time": 1795349040000, "signal": 1,}',
    event()[:-1], event().encode("utf-8") + b"\xff", None, event(padding="x" * (256 * 1024)),
]
# Times the parser hands over as text, which Spark's rules refuse: not ISO-8601, no such day,
# ahead of the record's Kafka time.
TIMES_REFUSED = [event(event_time=text) for text in ("yesterday", "2026-02-30T00:00:00Z", "2026-11-22T13:04:00Z")]
# Bytes that are not UTF-8 inside a string: the parser decodes them as Spark's cast does.
ODD = [event().encode("utf-8").replace(b'"d1"', b'"d\xed\xa0\x80\xc0\x80\xff"'),
       event(firmware="x").encode("utf-8").replace(b'"x"', b'"\xf0\x9f"')]
ALERTS = [
    json.dumps({"alert_id": "a1", "device_id": "d1", "alert_time": 1795349040000, "severity": s, "kind": "heat"})
    for s in ("critical", "warning", "info", "urgent", "Critical")
]


def kafka_rows(spark, values):
    rows = [(b"k", value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value,
             "t", 0, offset, KAFKA_TIME, 0) for offset, value in enumerate(values)]
    return spark.createDataFrame(rows, KAFKA_RECORD_SCHEMA)


def comparable(frame):
    """Rows as plain values: extras as sorted pairs (a map's order is not its meaning)."""
    rows = [tuple(sorted((row.extras or {}).items()) if name == "extras" else row[name] for name in frame.columns)
            for row in frame.collect()]
    return sorted(rows, key=repr)


def assert_same_rows(spark, contract, values):
    records = kafka_rows(spark, values)
    with_parser = with_contract_columns(records, contract, MAX_AHEAD)
    checks_alone = with_contract_columns(records, contract, MAX_AHEAD, flat_parser=False)
    assert comparable(with_parser) == comparable(checks_alone)


def taken(spark, contract, values) -> list[bool]:
    parsed = kafka_rows(spark, values).select("offset", flat_records.parser(contract).accepted.alias("taken"))
    return [row.taken for row in parsed.orderBy("offset").collect()]


def test_the_session_has_the_parser_so_the_suite_checks_both_paths(spark):
    assert flat_records.parser(EVENT_CONTRACT) is not None, "make install builds infra/contract-parser with mvn"


def test_the_parser_takes_flat_exact_records_and_leaves_the_rest(spark):
    assert taken(spark, EVENT_CONTRACT, TAKEN + TIMES_REFUSED) == [True] * len(TAKEN + TIMES_REFUSED)
    assert taken(spark, EVENT_CONTRACT, LEFT) == [False] * len(LEFT)
    assert taken(spark, ALERT_CONTRACT, ALERTS) == [True, True, True, False, False]


def test_every_record_gives_the_same_row_with_the_parser_as_without(spark):
    assert_same_rows(spark, EVENT_CONTRACT, TAKEN + LEFT + TIMES_REFUSED + ODD)
    assert_same_rows(spark, ALERT_CONTRACT, ALERTS)


def test_the_rows_keep_every_field_the_parser_took(spark):
    checked = with_contract_columns(kafka_rows(spark, TAKEN[1:2] + TIMES_REFUSED), EVENT_CONTRACT, MAX_AHEAD)
    assert [r.reason_code for r in checked.orderBy("offset").collect()] == [None, "bad_time", "bad_time", "time_ahead"]
    row = checked.where(F.col("reason").isNull()).collect()[0]
    assert (row.event_id, row.device_id, row.signal) == ("e1", "d1", 50.125)
    assert row.extras == {"firmware": "1.4.2", "retries": "3", "charging": "true", "muted": "false",
                          "negative": "0", "big": "-9223372036854775808"}


@FUZZ
@given(batch=st.lists(records(EVENT_CONTRACT), min_size=1, max_size=BATCH))
def test_generated_event_records_give_the_same_rows_with_the_parser(spark, batch):
    assert_same_rows(spark, EVENT_CONTRACT, [value for _, value, _ in batch])


@FUZZ
@given(batch=st.lists(records(ALERT_CONTRACT), min_size=1, max_size=BATCH))
def test_generated_alert_records_give_the_same_rows_with_the_parser(spark, batch):
    assert_same_rows(spark, ALERT_CONTRACT, [value for _, value, _ in batch])


HOTSPOT_LARGEST_COMPILED_METHOD = 8000  # bytes of bytecode; a longer method runs interpreted


def largest_generated_method(spark, frame) -> int:
    """The longest method of bytecode in the frame's whole-stage generated code, by Spark's
    own compiler statistics."""
    compile_stats = spark._jvm.org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator.compile  # noqa: SLF001
    nodes, largest = [frame._jdf.queryExecution().executedPlan()], 0  # noqa: SLF001
    while nodes:
        node = nodes.pop()
        if node.getClass().getSimpleName() == "WholeStageCodegenExec":
            largest = max(largest, compile_stats(node.doCodeGen()._2())._2().maxMethodCodeSize())
        nodes += [node.children().apply(i) for i in range(node.children().size())]
    return largest


def test_the_event_parses_compile_to_methods_the_jit_compiles(spark):
    """The parses the event jobs run, with the parser: every record (ingest), the valid events
    (dedup) and their key, time and signal (windowed-averages, sessions, alert-join). A stage
    whose loop grows past HotSpot's limit runs interpreted: 1.8 times from_json's time against
    0.9 (docs/benchmarks.md)."""
    records = kafka_rows(spark, TAKEN)
    every = with_contract_columns(records, EVENT_CONTRACT, MAX_AHEAD)
    valid = every.where(F.col("reason").isNull()).drop("reason", "reason_code")
    readings = valid.select("device_id", "event_id", "event_time", "signal")
    sizes = {name: largest_generated_method(spark, frame)
             for name, frame in (("every record", every), ("valid events", valid), ("readings", readings))}
    assert all(size <= HOTSPOT_LARGEST_COMPILED_METHOD for size in sizes.values()), sizes


# The late rule over a batch's records skips those whose time the JAR's check finds surely
# after the watermark. Records around one watermark: times in its second and either side of
# it, in every form a time takes, and the field where a reader of the text could be misled.
WATERMARK = datetime(2026, 11, 22, 12, 4, 0, 500_000, tzinfo=timezone.utc)
WATERMARK_MS = int(WATERMARK.timestamp() * 1000)
SURELY_AFTER = [event(event_time=text) for text in (
    "2026-11-22T12:04:01Z", "2026-11-22T12:04:01.000Z", "2026-11-22T12:05:00.25Z", "2026-11-22T12:59:59.999999999Z",
)] + [
    event().replace('"event_time": "2026-11-22T12:04:00.250Z"', '"event_time": "2026-11-22T12:30:00Z", "x": [1, {"y": 2}]'),
    # the first of two: skipped, as the checks refuse the record for its repeated key anyway
    '{"event_time": "2026-11-22T12:30:00Z", "event_time": "2026-11-22T12:03:00Z", "event_id": "e", '
    '"device_id": "d1", "signal": 1}',
]
NOT_SURELY_AFTER = [event(event_time=text) for text in (
    "2026-11-22T12:04:00Z", "2026-11-22T12:04:00.5Z", "2026-11-22T12:04:00.501Z", "2026-11-22T12:04:00.999999999Z",
    "2026-11-22T12:03:59.9Z", "2026-11-22 12:30:00Z", "2026-11-22T12:30:00+00:00", "2026-11-22T13:03:00+01:00",
    "2026-11-22T11:04:00-01:00", "2026-11-22T12:30:00.1234567890Z", "2026-11-22T12:30:00z", "yesterday",
)] + [
    event(event_time=WATERMARK_MS - 1), event(event_time=WATERMARK_MS + 60_000),
    event().replace('"2026-11-22T12:04:00.250Z"', '"2026-11-22T12:03:00\\u005a"'),  # an escaped Z
    event().replace('"event_time"', '"event\\u005ftime"'),  # an escaped key
    json.dumps({"meta": {"event_time": "2026-11-22T12:30:00Z"}, **GOOD}),  # nested first
    json.dumps({"note": '"event_time": "2026-11-22T12:30:00Z"', **GOOD}),  # inside a text first
    '{"event_time": "2026-11-22T12:03:00Z", "event_time": "2026-11-22T12:30:00Z", "event_id": "e", '
    '"device_id": "d1", "signal": 1}',
    json.dumps({"event_id": "e9", "device_id": "d1", "signal": 1, "event_time": "2026-11-22T12:03:00Z"}),  # last
    "[" + event() + "]", "not json", event()[:40], None,
]


def late_rule_rows(spark, values, watermark_ms: int) -> list[int]:
    streaming = load_settings(env={}, overrides={"max_clock_ahead": MAX_AHEAD}).streaming
    late = behind_watermark(streaming, kafka_rows(spark, values), watermark_ms)
    return sorted(row.offset for row in late.select("offset").collect())


def late_by_the_checks_alone(spark, values, watermark_ms: int) -> list[int]:
    """The rule's meaning: every valid event, by the contract's checks in Spark, at or behind the watermark."""
    checked = with_contract_columns(kafka_rows(spark, values), EVENT_CONTRACT, MAX_AHEAD, flat_parser=False)
    late = checked.where(F.col("reason").isNull() & (F.col("event_time") <= F.timestamp_millis(F.lit(watermark_ms))))
    return sorted(row.offset for row in late.select("offset").collect())


def test_the_check_finds_a_time_surely_after_only_in_the_utc_form_and_the_seconds_after(spark):
    records = kafka_rows(spark, SURELY_AFTER + NOT_SURELY_AFTER)
    found = records.select("offset", flat_records.time_surely_after("event_time", WATERMARK_MS).alias("after"))
    assert [row.after for row in found.orderBy("offset").collect()] == (
        [True] * len(SURELY_AFTER) + [False] * len(NOT_SURELY_AFTER))


def test_the_late_rule_finds_the_same_events_as_the_contracts_checks_around_the_watermark(spark):
    values = SURELY_AFTER + NOT_SURELY_AFTER + TAKEN + LEFT + TIMES_REFUSED + ODD
    found = late_rule_rows(spark, values, WATERMARK_MS)
    assert found == late_by_the_checks_alone(spark, values, WATERMARK_MS)
    assert len(found) >= 6  # the late ones of NOT_SURELY_AFTER among them


@FUZZ
@given(batch=st.lists(records(EVENT_CONTRACT), min_size=1, max_size=BATCH),
       behind=st.integers(0, 30 * 24 * 3600 * 1000))  # the generated events' times span 30 days
def test_the_late_rule_finds_the_contracts_late_events_in_generated_records(spark, batch, behind):
    values = [value for _, value, _ in batch]
    watermark_ms = int((KAFKA_TIME - timedelta(milliseconds=behind)).timestamp() * 1000)
    assert late_rule_rows(spark, values, watermark_ms) == late_by_the_checks_alone(spark, values, watermark_ms)
