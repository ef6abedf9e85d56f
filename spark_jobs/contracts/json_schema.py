"""The contracts as JSON Schema (draft 2020-12), generated from ``contract.py``, and the check
a producer runs before sending: the reason code the jobs would quarantine a record with.

The schema holds what JSON Schema can say: the required fields, their JSON types, the
allowed severities, the time pattern and the range of epoch milliseconds, a finite number
as one within the largest double. What it cannot say is in ``x-sigflow-*`` annotations and
in ``problem`` below: the payload size, unique keys, a date that exists (the pattern takes
February 30), a null field counting as a missing one, and the times allowed around the
record's Kafka timestamp. A property test holds ``problem`` and the Spark parser to the same
answer for every generated record (tests/spark_jobs/contracts/test_json_schema.py).
"""

from __future__ import annotations

import calendar
import json
import re
import sys
from datetime import datetime, timedelta, timezone
from functools import cache
from typing import Any, NamedTuple

from spark_jobs.contracts.contract import (
    CONTRACTS,
    EPOCH_MS_MAX,
    EPOCH_MS_MIN,
    MAX_BEHIND_DAYS,
    MAX_NESTING,
    MAX_PAYLOAD_BYTES,
    ZONED_ISO,
    Contract,
)
from spark_jobs.contracts.reasons import REASON_CODES

DIALECT = "https://json-schema.org/draft/2020-12/schema"
_ISO_PARTS = re.compile(
    r"(?P<y>[0-9]{4})-(?P<m>[0-9]{2})-(?P<d>[0-9]{2})[T ](?P<H>[0-9]{2}):(?P<M>[0-9]{2})"
    r":(?P<S>[0-9]{2})(?:\.(?P<f>[0-9]+))?(?P<zone>.*)"
)


def schema(contract: Contract) -> dict[str, Any]:
    properties: dict[str, dict] = {}
    for name in contract.strings:
        properties[name] = {"type": "string"}
        if name in contract.choices:
            properties[name]["enum"] = list(contract.choices[name])
    for name in contract.numbers:
        properties[name] = {"type": "number", "minimum": -sys.float_info.max, "maximum": sys.float_info.max,
                            "description": "finite: a number beyond the largest double (1e999) is not"}
    for name in contract.times:
        properties[name] = {
            "description": "ISO-8601 with a zone, or epoch milliseconds; a date that exists",
            "anyOf": [{"type": "string", "pattern": ZONED_ISO},
                      {"type": "integer", "minimum": EPOCH_MS_MIN, "maximum": EPOCH_MS_MAX}],
        }
    return {
        "$schema": DIALECT,
        "$id": f"urn:sigflow:contract:{contract.name}",
        "title": contract.title,
        "description": (
            "One Kafka record's value, UTF-8 JSON. A required field that is null counts as missing. "
            "Other fields are kept as extras. Reason codes and the limits in x-sigflow-*: "
            "docs/event-contract.md."
        ),
        "type": "object",
        "required": list(contract.required),
        "properties": properties,
        "additionalProperties": True,
        "x-sigflow-max-payload-bytes": MAX_PAYLOAD_BYTES,
        "x-sigflow-unique-keys": True,
        "x-sigflow-time-at-most-ahead-of-kafka-timestamp": "the max_clock_ahead setting",
        "x-sigflow-time-at-most-behind-kafka-timestamp-days": MAX_BEHIND_DAYS,
    }


def schema_text(contract: Contract) -> str:
    return json.dumps(schema(contract), indent=2) + "\n"


class Problem(NamedTuple):
    code: str
    detail: str


@cache
def _validator(name: str):
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema(CONTRACTS[name]))


def _json_type(value: Any) -> str:
    return {dict: "OBJECT", list: "ARRAY", str: "STRING", bool: "BOOLEAN", type(None): "NULL"}.get(
        type(value), "NUMBER")


class _NotJson(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _NotJson("a key repeats")
    return dict(pairs)


def _reject_constant(name: str):
    raise _NotJson(f"{name} is not JSON")


def _nesting(text: str) -> int:
    """How deep arrays and objects nest, strings skipped."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _parse(value: bytes) -> Any:
    try:
        text = value.decode("utf-8")
        if text.count("[") + text.count("{") > MAX_NESTING and _nesting(text) > MAX_NESTING:
            raise _NotJson("nested too deep")
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 4 * MAX_NESTING))  # Python's parser recurses per level
        try:
            # the first JSON value, whatever follows it: Spark's try_parse_json reads the same
            # (measured: '"a": 1' is the string "a" to it)
            decoder = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
            return decoder.raw_decode(text.lstrip(" \t\r\n"))[0]
        finally:
            sys.setrecursionlimit(limit)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise _NotJson from None


def _iso_ms(text: str) -> float | None:
    """Epoch milliseconds of a string the pattern took; None when its date does not exist."""
    parts = _ISO_PARTS.fullmatch(text)
    year, month, day = int(parts["y"]), int(parts["m"]), int(parts["d"])
    # the proleptic Gregorian calendar: year 0 is a leap year, as 2000 is
    if day > calendar.monthrange(year or 2000, month)[1]:
        return None
    if year == 0:
        return float("-inf")  # before any time a check compares it with
    zone = parts["zone"]
    offset = timedelta(0) if zone == "Z" else (1 if zone[0] == "+" else -1) * timedelta(
        hours=int(zone[1:3]), minutes=int(zone.replace(":", "")[3:5] or 0))
    fraction = (parts["f"] or "0")[:6].ljust(6, "0")
    local = datetime(year, month, day, int(parts["H"]), int(parts["M"]), int(parts["S"]), int(fraction),
                     tzinfo=timezone.utc)
    try:
        return (local - offset).timestamp() * 1000
    except OverflowError:  # past 9999 or before 0001 in UTC: later or earlier than any check
        return float("inf") if offset < timedelta(0) else float("-inf")


def _bad_time(name: str, value: str, why: str = "") -> Problem:
    return Problem("bad_time", f"field '{name}' is neither ISO-8601 with a zone nor integer "
                               f"epoch milliseconds: {value[:60]!r}{why}")


def problem(contract: Contract, value: bytes | None, kafka_timestamp_ms: float, max_ahead_ms: float) -> Problem | None:
    """The first broken rule of a record, as the jobs would quarantine it; None when valid."""
    if value is None:
        return Problem("empty_record", "empty record (no value)")
    if len(value) > MAX_PAYLOAD_BYTES:
        return Problem("payload_too_large",
                       f"payload of {len(value)} bytes is over the {MAX_PAYLOAD_BYTES // 1024} KiB limit")
    try:
        document = _parse(value)
    except _NotJson:
        return Problem("not_json", "not valid JSON")
    if not isinstance(document, dict):
        return Problem("not_an_object", f"not a JSON object (got {_json_type(document)})")
    missing = [name for name in contract.required if document.get(name) is None]
    if missing:
        return Problem("missing_field", f"missing required field(s): {', '.join(missing)}")
    found: list[Problem] = []
    for error in _validator(contract.name).iter_errors(document):
        if not error.path:
            continue
        name = error.path[0]
        got = _json_type(document[name])
        if name in contract.times:
            found.append(_bad_time(name, str(document[name])))
        elif error.validator == "type":
            kind = "string" if name in contract.strings else "number"
            found.append(Problem("wrong_type", f"field '{name}' must be a {kind}, got {got}"))
        elif error.validator in ("minimum", "maximum"):
            found.append(Problem("not_finite", f"field '{name}' is not finite ({document[name]})"))
        elif error.validator == "enum":
            allowed = ", ".join(contract.choices[name])
            found.append(Problem("value_not_allowed", f"field '{name}' must be one of {allowed}, got '{document[name]}'"))
    if found:
        return min(found, key=lambda p: REASON_CODES.index(p.code))
    for name in contract.times:
        value = document[name]
        ms = _iso_ms(value) if isinstance(value, str) else float(value)
        if ms is None:
            return _bad_time(name, value, " (no such date)")
        if ms > kafka_timestamp_ms + max_ahead_ms:
            return Problem("time_ahead", f"field '{name}' is more than {max_ahead_ms / 1000:.0f} s (max_clock_ahead) "
                                         f"after the record's Kafka timestamp: {value}")
        if ms < kafka_timestamp_ms - MAX_BEHIND_DAYS * 86_400_000:
            return Problem("time_too_old", f"field '{name}' is more than {MAX_BEHIND_DAYS} days before the "
                                           f"record's Kafka timestamp: {value}")
    return None
