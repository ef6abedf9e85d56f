"""The published JSON Schema and the Spark parser say the same of every record: a record the
schema check accepts is typed by the jobs, and one it rejects is quarantined with the
reason code it names (hypothesis, fixed seed). The records are those of the contract fuzzer
plus times of every shape: ISO strings with fields out of range, zones of every form, dates
that do not exist, trailing newlines; epoch milliseconds as integers, fractions, exponents
and beyond the years a timestamp holds."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from spark_jobs.config import Duration
from spark_jobs.contracts.contract import ALERT_CONTRACT, EVENT_CONTRACT, Contract
from spark_jobs.contracts.events import parse_device_alerts, parse_device_events
from spark_jobs.contracts.json_schema import problem, schema, schema_text
from tests.helpers import REPO, sigflow_here
from tests.spark_jobs.contracts.test_contract_fuzz import (
    BATCH,
    FUZZ,
    KAFKA_TIME,
    MAX_AHEAD,
    _good,
    _split,
    records,
)

# no shrinking: each step is a Spark job; a failure prints the batch as drawn
AGREE = settings(FUZZ, phases=[Phase.explicit, Phase.generate])
KAFKA_MS = KAFKA_TIME.timestamp() * 1000
AHEAD_MS = Duration(MAX_AHEAD, "max_clock_ahead").ms


@st.composite
def iso_times(draw) -> str:
    year = draw(st.sampled_from(["2026", "2025", "0000", "0001", "9999", "1970"]))
    month = draw(st.sampled_from(["11", "02", "04", "12", "00", "13", "1"]))
    day = draw(st.sampled_from(["20", "22", "28", "29", "30", "31", "00", "32", "01"]))
    clock = draw(st.sampled_from(["12:04", "23:59", "00:00", "24:00", "12:60", "9:00"]))
    seconds = draw(st.sampled_from(["", ":00", ":59", ":60", ":07.5", ":07.123456", ":07.123456789", ":07.1234567891", ":07."]))
    zone = draw(st.sampled_from(["Z", "z", "+00:00", "-05:30", "+0530", "+05", "+18:00", "-18", "+18:30",
                                 "+24:00", "", " Z", "UTC", "+5:30"]))
    separator = draw(st.sampled_from(["T", " ", "t"]))
    tail = draw(st.sampled_from(["", "", "", "\n", " "]))
    return f"{year}-{month}-{day}{separator}{clock}{seconds}{zone}{tail}"


epoch_ms = st.one_of(
    st.integers(int(KAFKA_MS) - 400 * 86_400_000, int(KAFKA_MS) + 86_400_000).map(str),
    st.sampled_from(["253402300799999", "253402300800000", "-62135596800000", "-62135596800001",
                     "9223372036854775807", "1e300", "-1e300", "1e999", "0"]),
    st.integers(int(KAFKA_MS) - 86_400_000, int(KAFKA_MS)).map(lambda ms: f"{ms}.0"),
    st.integers(int(KAFKA_MS) - 86_400_000, int(KAFKA_MS)).map(lambda ms: f"{ms}.5"),
    st.integers(17636, 17640).map(lambda n: f"{n}e8"),
)


@st.composite
def timed_records(draw, contract: Contract):
    """A record whose fields are all well-formed but its time, written as raw JSON text."""
    (time_field,) = contract.times
    document = {name: draw(_good(contract, name)) for name in contract.required if name != time_field}
    raw = draw(st.one_of(iso_times().map(json.dumps), epoch_ms))
    return None, (json.dumps(document)[:-1] + f', "{time_field}": {raw}}}').encode(), None


def _agree(spark, contract: Contract, parse, batch) -> None:
    _, quarantined = _split(spark, parse, batch)
    refused = {row.offset: row.reason_code for row in quarantined}
    plain_schema = Draft202012Validator(schema(contract))
    for offset, (_, value, _) in enumerate(batch):
        expected = problem(contract, value, KAFKA_MS, AHEAD_MS)
        assert refused.get(offset) == (expected and expected.code), (value[:300], expected)
        try:
            document = json.loads(value)
        except (TypeError, ValueError, RecursionError):
            continue
        if not plain_schema.is_valid(document):  # what the schema alone refuses, the jobs refuse
            assert offset in refused, value[:300]


@AGREE
@given(batch=st.lists(st.one_of(records(EVENT_CONTRACT), timed_records(EVENT_CONTRACT)), min_size=1, max_size=2 * BATCH))
def test_the_event_schema_and_the_parser_agree_on_every_record(spark, batch):
    _agree(spark, EVENT_CONTRACT, parse_device_events, batch)


@AGREE
@given(batch=st.lists(st.one_of(records(ALERT_CONTRACT), timed_records(ALERT_CONTRACT)), min_size=1, max_size=2 * BATCH))
def test_the_alert_schema_and_the_parser_agree_on_every_record(spark, batch):
    _agree(spark, ALERT_CONTRACT, parse_device_alerts, batch)


def test_the_schema_files_in_docs_are_the_generated_ones(capsys):
    for contract in (EVENT_CONTRACT, ALERT_CONTRACT):
        published = REPO / "docs" / "contracts" / f"{contract.name}.schema.json"
        assert published.read_text() == schema_text(contract), f"regenerate {published.relative_to(REPO)}"
        assert sigflow_here(["contract", "schema", contract.name]) == 0
        assert json.loads(capsys.readouterr().out) == schema(contract)
        Draft202012Validator.check_schema(schema(contract))


def test_produce_validate_names_the_first_failing_lines_and_sends_none(tmp_path, capsys, monkeypatch):
    """No broker is reachable at all: a file that fails is refused before any connection."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    an_hour_ago = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat(timespec="seconds")
    good = {"event_id": "e1", "device_id": "d1", "event_time": an_hour_ago, "signal": 1.5}
    lines = [json.dumps(good), json.dumps({**good, "signal": "high"}), "", "device says hello",
             json.dumps({**good, "event_time": an_hour_ago[:19]})]
    path = Path(tmp_path, "events.jsonl")
    path.write_text("\n".join(lines) + "\n")
    assert sigflow_here(["produce", "--validate", "--file", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "line 2: wrong_type: field 'signal' must be a number, got STRING",
        "line 4: not_json: not valid JSON",
        "line 5: bad_time: field 'event_time' is neither ISO-8601 with a zone nor integer epoch milliseconds: "
        f"'{an_hour_ago[:19]}'",
    ]
    assert "3 of 4 lines break the events contract" in err and "nothing was sent" in err

    path.write_text(lines[0] + "\n")  # a file that meets it is sent: here to no broker at all
    assert sigflow_here(["produce", "--validate", "--file", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == ["1 lines meet the events contract"] and "Kafka at 127.0.0.1:1" in err
