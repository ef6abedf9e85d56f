"""Every reason code, one record each, from both of the contract's implementations: the
Spark parser the jobs run (contracts/events.py) and the Python check of `sigflow produce
--validate` (contracts/json_schema.py). The fuzzers compare the two on drawn records; this
holds them to every code by name, so a code one of them stops giving fails here."""

from __future__ import annotations

import json

from spark_jobs.contracts.contract import ALERT_CONTRACT, EVENT_CONTRACT
from spark_jobs.contracts.events import parse_device_alerts, parse_device_events
from spark_jobs.contracts.json_schema import problem
from spark_jobs.contracts.reasons import REASON_CODES
from tests.spark_jobs.contracts.test_contract_fuzz import _split
from tests.spark_jobs.contracts.test_json_schema import AHEAD_MS, KAFKA_MS


def _event(**fields) -> bytes:
    return json.dumps({"event_id": "e1", "device_id": "d1", "signal": 1.5,
                       "event_time": "2026-11-22T12:59:00Z", **fields}).encode()


EVENTS = {
    "empty_record": None,  # a record with no value (a tombstone); an empty value is not JSON
    "payload_too_large": _event(note="x" * 300 * 1024),
    "not_json": b'{"event_id": "e1", ',
    "not_an_object": b"[1, 2, 3]",
    "missing_field": json.dumps({"event_id": "e1", "device_id": "d1"}).encode(),
    "wrong_type": _event(device_id=7),
    "not_finite": _event(signal=1.5).replace(b"1.5", b"1e999"),  # valid JSON, beyond a double
    "bad_time": _event(event_time="yesterday"),
    "time_ahead": _event(event_time="2026-11-22T14:00:00Z"),  # an hour after the Kafka timestamp
    "time_too_old": _event(event_time="2020-01-01T00:00:00Z"),
}
ALERTS = {
    "value_not_allowed": json.dumps({"alert_id": "a1", "device_id": "d1", "severity": "apocalyptic",
                                     "kind": "overheat", "alert_time": "2026-11-22T12:59:00Z"}).encode(),
}


def test_the_records_cover_every_reason_code():
    assert sorted({**EVENTS, **ALERTS}) == sorted(REASON_CODES)


def test_the_spark_parser_and_the_python_check_give_each_code(spark):
    for contract, parse, cases in ((EVENT_CONTRACT, parse_device_events, EVENTS),
                                   (ALERT_CONTRACT, parse_device_alerts, ALERTS)):
        codes = list(cases)
        batch = [(None, cases[code], None) for code in codes]
        valid, quarantined = _split(spark, parse, batch)
        assert valid == []
        assert {codes[row.offset]: row.reason_code for row in quarantined} == {code: code for code in codes}
        assert {code: getattr(problem(contract, cases[code], KAFKA_MS, AHEAD_MS), "code", None)
                for code in codes} == {code: code for code in codes}
