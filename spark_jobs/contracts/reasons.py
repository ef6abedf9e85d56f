"""Why a record is quarantined, as stable codes (Spark-free: data-quality suites read it).

``reason_code`` of quarantined_events is one of these: what ``sigflow quarantine``, the
report and the data-quality suite group by. The ``reason`` column says in words which
field and what it held (docs/event-contract.md).
"""

REASON_CODES = (
    "empty_record", "payload_too_large", "not_json", "not_an_object", "missing_field", "wrong_type",
    "not_finite", "value_not_allowed", "bad_time", "time_ahead", "time_too_old",
)

# The detail each code's records carry, as SQL LIKE patterns. Records quarantined before
# reason_code existed get their code from these when the column is added (the details have
# not changed since); a detail matching none keeps a NULL code, which the quality suite flags.
DETAIL_PATTERNS = (
    ("empty_record", "empty record%"),
    ("payload_too_large", "payload of % bytes is over the % limit"),
    ("not_json", "not valid JSON"),
    ("not_an_object", "not a JSON object (got %)"),
    ("missing_field", "missing required field(s): %"),
    ("wrong_type", "field '%' must be a string, got %"),
    ("wrong_type", "field '%' must be a number, got %"),
    ("not_finite", "field '%' is not finite (%)"),
    ("value_not_allowed", "field '%' must be one of %, got %"),
    ("bad_time", "field '%' is neither ISO-8601 with a zone nor integer epoch milliseconds: %"),
    ("time_ahead", "field '%' is more than % (max_clock_ahead) after the record's Kafka timestamp: %"),
    ("time_too_old", "field '%' is more than % days before the record's Kafka timestamp: %"),
)


def code_from_detail_sql(column: str = "reason") -> str:
    """A SQL expression giving the code of the detail in ``column`` (NULL when none fits)."""
    def quoted(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    whens = " ".join(f"WHEN {column} LIKE {quoted(pattern)} THEN {quoted(code)}" for code, pattern in DETAIL_PATTERNS)
    return f"CASE {whens} END"
