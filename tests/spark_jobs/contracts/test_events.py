from datetime import datetime, timezone

import pytest

from spark_jobs.contracts.events import KAFKA_RECORD_SCHEMA, parse_device_events

VALID = '{"event_id": "e1", "device_id": "d1", "event_time": "2026-11-22T12:04:00Z", "signal": 1.5, "site": "north", "tags": {"a": 1}}'

HUGE = '{"event_id": "e", "device_id": "d", "event_time": 1, "signal": 1, "blob": "' + "x" * 300_000 + '"}'


CODE_OF_CAUSE = {
    "not valid JSON": "not_json", "empty record": "empty_record", "not a JSON object": "not_an_object",
    "missing required": "missing_field", "must be a string": "wrong_type", "must be a number": "wrong_type",
    "is not finite": "not_finite", "is neither ISO": "bad_time", "after the record's Kafka": "time_ahead",
    "before the record's Kafka": "time_too_old", "over the 256 KiB": "payload_too_large",
    "must be one of": "value_not_allowed",
}


def code_of(reason: str) -> str:
    return next(code for words, code in CODE_OF_CAUSE.items() if words in reason)

KAFKA_TIME = datetime(2026, 11, 22, 13, 0, tzinfo=timezone.utc)  # when these records reached Kafka
MAX_AHEAD = "1 minute"


def kafka_rows(spark, values, now=KAFKA_TIME):
    rows = [(b"k", v if isinstance(v, (bytes, type(None))) else v.encode(), "t", 0, i, now, 0)
            for i, v in enumerate(values)]
    return spark.createDataFrame(rows, KAFKA_RECORD_SCHEMA)


def test_valid_event_is_typed_and_keeps_extra_fields(spark):
    valid, quarantined = parse_device_events(kafka_rows(spark, [VALID]), MAX_AHEAD)
    assert quarantined.count() == 0
    row = valid.collect()[0]
    assert (row.event_id, row.device_id, row.signal) == ("e1", "d1", 1.5)
    assert row.event_time == datetime(2026, 11, 22, 12, 4)  # session time zone is UTC
    assert row.extras == {"site": "north", "tags": '{"a":1}'}


@pytest.mark.parametrize(
    "event_time, expected",
    [
        ('"2026-11-22T13:04:00+01:00"', datetime(2026, 11, 22, 12, 4)),
        ('"2026-11-22T12:04:00.250Z"', datetime(2026, 11, 22, 12, 4, 0, 250000)),
        ("1795349040000", datetime(2026, 11, 22, 12, 4)),
    ],
)
def test_event_time_forms_accepted(spark, event_time, expected):
    value = f'{{"event_id": "e", "device_id": "d", "event_time": {event_time}, "signal": 2}}'
    valid, _ = parse_device_events(kafka_rows(spark, [value]), MAX_AHEAD)
    assert valid.collect()[0].event_time == expected


@pytest.mark.parametrize(
    "value, reason",
    [
        ("hello", "not valid JSON"),
        (b"\xff\xfe\x00\x9c", "not valid JSON"),
        ('{"event_id": "e1", "device_id"', "not valid JSON"),
        ('{"event_id": "e", "device_id": "d", "event_time": 1, "signal": NaN}', "not valid JSON"),
        (None, "empty record (no value)"),
        ("[1, 2]", "not a JSON object (got ARRAY)"),
        ('{"device_id": "d", "event_time": 1, "signal": 1}', "missing required field(s): event_id"),
        ('{"event_id": "e", "device_id": null, "event_time": 1}', "missing required field(s): device_id, signal"),
        ('{"event_id": 7, "device_id": "d", "event_time": 1, "signal": 1}', "field 'event_id' must be a string, got BIGINT"),
        ('{"event_id": "e", "device_id": "d", "event_time": 1, "signal": "high"}', "field 'signal' must be a number, got STRING"),
        ('{"event_id": "e", "device_id": "d", "event_time": 1, "signal": 1e999}', "field 'signal' is not finite (Infinity)"),
        ('{"event_id": "e", "device_id": "d", "event_time": "yesterday", "signal": 1}',
         "field 'event_time' is neither ISO-8601 with a zone nor integer epoch milliseconds: 'yesterday'"),
        ('{"event_id": "e", "device_id": "d", "event_time": "2026-11-22T12:04:00", "signal": 1}',
         "field 'event_time' is neither ISO-8601 with a zone nor integer epoch milliseconds: '2026-11-22T12:04:00'"),
        # the Kafka timestamp of these rows is 2026-11-22 13:00 UTC
        ('{"event_id": "e", "device_id": "d", "event_time": "2026-11-23T09:00:00Z", "signal": 1}',
         "field 'event_time' is more than 1 minute (max_clock_ahead) after the record's Kafka timestamp: "
         "2026-11-23 09:00:00"),
        ('{"event_id": "e", "device_id": "d", "event_time": 0, "signal": 1}',
         "field 'event_time' is more than 365 days before the record's Kafka timestamp: 1970-01-01 00:00:00"),
        (HUGE, f"payload of {len(HUGE)} bytes is over the 256 KiB limit"),
    ],
)
def test_malformed_record_is_quarantined_with_its_reason(spark, value, reason):
    valid, quarantined = parse_device_events(kafka_rows(spark, [value]), MAX_AHEAD)
    assert valid.count() == 0
    row = quarantined.collect()[0]
    assert row.reason == reason
    # the stable code of each cause, as docs/event-contract.md lists them
    assert row.reason_code == code_of(reason)
    assert row.value == (value.encode() if isinstance(value, str) else value)


@pytest.mark.parametrize(
    "value, reason",
    [
        ('{"alert_id": "a", "device_id": "d", "alert_time": "2026-11-22T12:00:00Z", "severity": "critical", "kind": "heat"}', None),
        ('{"alert_id": "a", "device_id": "d", "alert_time": "2026-11-22T12:00:00Z", "severity": "huge", "kind": "heat"}',
         "field 'severity' must be one of critical, warning, info, got 'huge'"),
        ('{"alert_id": "a", "device_id": "d", "severity": "info", "kind": "heat"}', "missing required field(s): alert_time"),
    ],
)
def test_alert_contract(spark, value, reason):
    from spark_jobs.contracts.events import parse_device_alerts

    valid, quarantined = parse_device_alerts(kafka_rows(spark, [value]), MAX_AHEAD)
    assert [r.reason for r in quarantined.collect()] == ([reason] if reason else [])
    assert [r.reason_code for r in quarantined.collect()] == ([code_of(reason)] if reason else [])
    assert valid.count() == (0 if reason else 1)


@pytest.mark.parametrize(
    "event_time, ahead_allowed",
    [("2026-11-22T13:01:00Z", True), ("2026-11-22T13:01:00.001Z", False), ("2026-11-23T09:00:00Z", False)],
)
def test_a_time_at_most_max_clock_ahead_after_kafka_is_kept_and_one_beyond_is_quarantined(
    spark, event_time, ahead_allowed
):
    value = f'{{"event_id": "e", "device_id": "d", "event_time": "{event_time}", "signal": 1}}'
    valid, quarantined = parse_device_events(kafka_rows(spark, [value]), MAX_AHEAD)
    assert (valid.count(), quarantined.count()) == ((1, 0) if ahead_allowed else (0, 1))


def test_a_quarantined_record_keeps_every_byte_and_shows_its_text_or_an_oversized_ones_first_bytes(spark):
    # at the size limit, a payload is checked; one byte more and it is quarantined for its size
    at_limit = ('{"event_id": "e", "blob": "' + "y" * (256 * 1024 - 30)).encode()
    at_limit += b'"' * (256 * 1024 - len(at_limit))
    broken = b'{"event_id": "e1", "device_id": "\xff'
    records = [HUGE.encode(), at_limit, broken]
    _, quarantined = parse_device_events(kafka_rows(spark, records), MAX_AHEAD)
    rows = {row.offset: row for row in quarantined.select("offset", "reason_code", "value", "payload_text").collect()}
    assert {offset: row.reason_code for offset, row in rows.items()} == \
        {0: "payload_too_large", 1: "not_json", 2: "not_json"}
    assert [bytes(rows[offset].value) for offset in range(3)] == records  # nothing lost
    assert rows[0].payload_text == HUGE[:4096]  # for people: what it is, not 300 KB of it
    assert rows[1].payload_text == at_limit.decode()
    assert rows[2].payload_text == '{"event_id": "e1", "device_id": "\ufffd'
