"""The event and alert contracts themselves, Spark-free: the fields, their JSON types and the
limits. Two things apply them: the Spark parser of the jobs (``events.py``) and the JSON
Schema producers check against (``json_schema.py``); docs/event-contract.md in words.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Contract:
    name: str
    title: str
    strings: tuple[str, ...]
    numbers: tuple[str, ...] = ()
    times: tuple[str, ...] = ()
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def required(self) -> tuple[str, ...]:
        return self.strings + self.numbers + self.times


EVENT_CONTRACT = Contract(
    name="events", title="sigflow device event",
    strings=("event_id", "device_id"), numbers=("signal",), times=("event_time",),
)
SEVERITIES = ("critical", "warning", "info")  # an alert's severity, one of these
ALERT_CONTRACT = Contract(
    name="alerts", title="sigflow device alert",
    strings=("alert_id", "device_id", "severity", "kind"),
    times=("alert_time",),
    choices={"severity": SEVERITIES},
)
CONTRACTS = {contract.name: contract for contract in (EVENT_CONTRACT, ALERT_CONTRACT)}

# Plausibility limits, part of the contract (docs/event-contract.md). A time ahead of the
# record's Kafka timestamp drags the watermark forward and makes every later event "late",
# so one device with a bad clock could silence a job: a time more than the setting
# max_clock_ahead ahead is quarantined instead. Far-behind times and oversized payloads are
# defects too, not data.
MAX_PAYLOAD_BYTES = 256 * 1024
# An oversized payload's text in quarantined_events is its first bytes, enough to see what it
# is; its value keeps every byte. Whole, a 10% malformed storm with 1% of 300 KiB payloads
# wrote each of them three times (raw, the quarantined value, its text).
OVERSIZED_TEXT_BYTES = 4096
MAX_BEHIND_DAYS = 365
# JSON nested deeper than this is not parsed (Spark's try_parse_json, measured: 1,000 parses,
# 1,001 does not): the record is not JSON to the jobs.
MAX_NESTING = 1000

# A time is ISO-8601 with a zone, or integer epoch milliseconds of years 0001 to 9999. The
# pattern means the same in Java (Spark's rlike), ECMA-262 (JSON Schema) and Python: [0-9],
# not \d (Python's matches any Unicode digit), and the end as "no character follows", since
# `$` matches before a final newline in Java and Python.
ZONED_ISO = (
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[T ]([01][0-9]|2[0-3]):[0-5][0-9]"
    r":[0-5][0-9](\.[0-9]{1,9})?(Z|[+-](0[0-9]|1[0-7])(:?[0-5][0-9])?|[+-]18(:?00)?)(?![\s\S])"
)
EPOCH_MS_MIN = -62_135_596_800_000  # 0001-01-01T00:00:00Z
EPOCH_MS_MAX = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
