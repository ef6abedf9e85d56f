"""Input nobody planned for, generated (hypothesis, fixed seed, bounded examples): arbitrary
bytes, deep and huge JSON, wrong types, NaN and Infinity, odd Unicode, keys of any shape.
Whatever arrives, each record lands in exactly one of the typed rows or the quarantine
(with a reason code), and no batch fails because of a record's content.

The expectations come from how a record was made, not from the contract's code: a record
built with every required field well-formed must be accepted, one with a field broken or
that is not a JSON object at all must be quarantined; raw bytes only have to land somewhere.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from spark_jobs.contracts.events import (
    ALERT_CONTRACT,
    EVENT_CONTRACT,
    KAFKA_RECORD_SCHEMA,
    MAX_PAYLOAD_BYTES,
    Contract,
    parse_device_alerts,
    parse_device_events,
)
from spark_jobs.contracts.reasons import REASON_CODES
from spark_jobs.runtime.kafka import admin as kafka_admin
from tests.helpers import confluent_produce, run_job, table

KAFKA_TIME = datetime(2026, 11, 22, 13, 0, tzinfo=timezone.utc)
MAX_AHEAD = "1 minute"
# each example is a Spark job of its own, whose fixed cost outweighs its records': fifteen
# batches of up to BATCH records each cover as many records as thirty of half the size
BATCH = 50
FUZZ = settings(max_examples=15, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                      st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=16))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)), max_leaves=10)
# what an extra field of a valid record may hold: JSON has no NaN or Infinity
json_extra = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=16)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=10)


def _good(contract: Contract, name: str) -> st.SearchStrategy:
    if name in contract.choices:
        return st.sampled_from(contract.choices[name])
    if name in contract.strings:
        return st.text(min_size=1, max_size=12)
    if name in contract.numbers:
        return st.one_of(st.integers(-10**9, 10**9), st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False))
    recent = st.integers(0, 30 * 24 * 3600 * 1000).map(lambda ms: KAFKA_TIME - timedelta(milliseconds=ms))
    return st.one_of(recent.map(lambda t: int(t.timestamp() * 1000)),
                     recent.map(lambda t: t.isoformat(timespec="milliseconds").replace("+00:00", "Z")))


def _broken(contract: Contract, name: str) -> st.SearchStrategy:
    """A value of a JSON type the field does not allow (or a choice outside its set)."""
    def is_int(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if name in contract.choices:
        return st.one_of(st.text(max_size=8).filter(lambda v: v not in contract.choices[name]),
                         json_value.filter(lambda v: not isinstance(v, str)))
    if name in contract.strings:
        return json_value.filter(lambda v: not isinstance(v, str))
    if name in contract.numbers:
        return st.one_of(st.sampled_from([math.nan, math.inf, -math.inf]),
                         json_value.filter(lambda v: not (is_int(v) or isinstance(v, float)) or
                                           (isinstance(v, float) and not math.isfinite(v))))
    return json_value.filter(lambda v: not (is_int(v) or isinstance(v, str)))


def _encode(document, ascii_only: bool) -> bytes:
    return json.dumps(document, allow_nan=True, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


@st.composite
def records(draw, contract: Contract):
    """(key, value, expected): expected is "valid", "quarantined" or None (only: lands somewhere)."""
    kind = draw(st.sampled_from(["good", "good", "broken", "missing", "not_object", "bytes", "deep", "null", "huge"]))
    key = draw(st.one_of(st.none(), st.binary(max_size=40)))
    extras = draw(st.dictionaries(st.text(max_size=8).filter(lambda k: k not in contract.required),
                                  json_extra, max_size=3))
    document = {name: draw(_good(contract, name)) for name in contract.required}
    if kind == "good":
        return key, _encode({**extras, **document}, draw(st.booleans())), "valid"
    if kind == "broken":
        name = draw(st.sampled_from(contract.required))
        document[name] = draw(_broken(contract, name))
        return key, _encode({**extras, **document}, draw(st.booleans())), "quarantined"
    if kind == "missing":
        del document[draw(st.sampled_from(contract.required))]
        return key, _encode({**extras, **document}, draw(st.booleans())), "quarantined"
    if kind == "not_object":
        return key, _encode(draw(st.one_of(json_leaf, st.lists(json_value, max_size=3))), True), "quarantined"
    if kind == "bytes":
        return key, draw(st.binary(max_size=80)), None
    if kind == "deep":
        depth = draw(st.integers(100, 6000))
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        return key, opener * depth + b"1" + closer * depth, "quarantined"  # no required field in any
    if kind == "null":
        return key, None, "quarantined"
    padding = "x" * (MAX_PAYLOAD_BYTES + draw(st.integers(1, 1000)))
    return key, _encode({**document, "padding": padding}, True), "quarantined"


def _split(spark, parse, batch):
    rows = [(key, value, "fuzz", 0, offset, KAFKA_TIME, 0) for offset, (key, value, _) in enumerate(batch)]
    valid, quarantined = parse(spark.createDataFrame(rows, KAFKA_RECORD_SCHEMA), MAX_AHEAD)
    return valid.collect(), quarantined.select("offset", "reason_code").collect()


def _check(contract: Contract, batch, valid, quarantined) -> None:
    accepted = {row.offset for row in valid}
    refused = {row.offset: row.reason_code for row in quarantined}
    assert len(valid) == len(accepted) and len(quarantined) == len(refused)  # once each
    assert accepted.isdisjoint(refused) and accepted | set(refused) == set(range(len(batch)))
    assert set(refused.values()) <= set(REASON_CODES)
    for row in valid:
        assert all(getattr(row, name) is not None for name in contract.required), row
        assert all(math.isfinite(getattr(row, name)) for name in contract.numbers), row
        assert all(getattr(row, name) in allowed for name, allowed in contract.choices.items()), row
    for offset, (_, value, expected) in enumerate(batch):
        if expected == "valid":
            assert offset in accepted, (value[:300], refused.get(offset))
        elif expected == "quarantined":
            assert offset in refused, value[:300]


@FUZZ
@given(batch=st.lists(records(EVENT_CONTRACT), min_size=1, max_size=BATCH))
def test_every_event_record_is_typed_or_quarantined_with_a_code(spark, batch):
    _check(EVENT_CONTRACT, batch, *_split(spark, parse_device_events, batch))


@FUZZ
@given(batch=st.lists(records(ALERT_CONTRACT), min_size=1, max_size=BATCH))
def test_every_alert_record_is_typed_or_quarantined_with_a_code(spark, batch):
    _check(ALERT_CONTRACT, batch, *_split(spark, parse_device_alerts, batch))


@settings(max_examples=2, derandomize=True, deadline=None, database=None,
          phases=[Phase.generate],  # a shrink would re-run the job for minutes; the batch is printed
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(batch=st.lists(records(EVENT_CONTRACT), min_size=20, max_size=60))
def test_ingest_never_fails_on_content_and_keeps_every_record(spark, settings, batch):
    """Through Kafka and the real job: a generated batch on its own topic, read by ingest."""
    s = settings.replace(events_topic=f"fuzz-{uuid.uuid4().hex[:8]}", data_dir=f"{settings.data_dir}-{uuid.uuid4().hex[:6]}")
    kafka_admin.create_topics(s.kafka.bootstrap_servers, [s.streaming.events_topic], 1, s.kafka.topic_retention_ms)
    # librdkafka: kafka-python refuses a record with neither key nor value, which Kafka allows
    sent = confluent_produce(s.kafka.bootstrap_servers, s.streaming.events_topic, [(key, value) for key, value, _ in batch])

    run_job(spark, s, "ingest")  # raises if a batch failed

    assert len(table(s, "device_events_raw")) == sent
    quarantined = table(s, "quarantined_events")
    assert len(table(s, "device_events")) + len(quarantined) == sent
    assert quarantined.reason_code.isin(REASON_CODES).all()
