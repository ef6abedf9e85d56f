"""Why a record is quarantined, as stable codes (Spark-free: data-quality suites read it).

``reason_code`` of quarantined_events is one of these: what ``sigflow quarantine``, the
report and the data-quality suite group by. The ``reason`` column says in words which
field and what it held (docs/event-contract.md).
"""

REASON_CODES = (
    "empty_record", "payload_too_large", "not_json", "not_an_object", "missing_field", "wrong_type",
    "not_finite", "value_not_allowed", "bad_time", "time_ahead", "time_too_old",
)
