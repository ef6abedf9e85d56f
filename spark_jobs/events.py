"""The device event contract, as a pure DataFrame function.

A Kafka record of ``device-events`` is valid when its value is a JSON object with
``event_id`` (string), ``device_id`` (string), ``event_time`` (ISO-8601 string with a zone,
or integer epoch milliseconds) and a finite numeric ``signal``. Other fields are kept in
``extras``. Anything else gets the first reason that applies (see docs/event-contract.md).

Parsing uses Spark's VARIANT functions (``try_parse_json``, ``schema_of_variant``) so the
JSON type of every field is checked natively, without a Python UDF on the hot path.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

REQUIRED_FIELDS = ("event_id", "device_id", "event_time", "signal")
_NUMBER = r"^(TINYINT|SMALLINT|INT|BIGINT|FLOAT|DOUBLE|DECIMAL.*)$"
_ZONED_ISO = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|z|[+-]\d{2}(:?\d{2})?)$"


def _vtype(field: str) -> Column:
    """JSON type of a top-level field: STRING, BIGINT, DOUBLE, DECIMAL(p,s), VOID (null)…"""
    return F.expr(f"schema_of_variant(variant_get(_v, '$.{field}'))")


def _str(field: str) -> Column:
    return F.expr(f"try_variant_get(_v, '$.{field}', 'string')")


def _quoted(col: Column) -> Column:
    return F.concat(F.lit("'"), F.substring(col, 1, 60), F.lit("'"))


def with_contract_columns(kafka_df: DataFrame) -> DataFrame:
    """Add the typed event columns and ``reason`` (NULL for a valid record)."""
    v = kafka_df.withColumn("_v", F.expr("try_parse_json(CAST(value AS STRING))"))
    time_type = _vtype("event_time")
    time_text = _str("event_time")
    event_time = (
        F.when(time_type == "STRING", F.when(time_text.rlike(_ZONED_ISO), F.expr(
            "try_to_timestamp(try_variant_get(_v, '$.event_time', 'string'))")))
        .when(time_type.isin("BIGINT", "INT", "SMALLINT", "TINYINT"), F.expr(
            "timestamp_millis(try_variant_get(_v, '$.event_time', 'bigint'))"))
    )
    signal = F.expr("try_variant_get(_v, '$.signal', 'double')")
    v = v.withColumns({"_time": event_time, "_signal": signal})

    missing = F.concat_ws(", ", *[
        F.when(_vtype(f).isNull() | (_vtype(f) == "VOID"), F.lit(f)) for f in REQUIRED_FIELDS
    ])
    top_type = F.expr("schema_of_variant(_v)")
    reason = F.coalesce(
        F.when(F.col("value").isNull(), F.lit("empty record (no value)")),
        F.when(F.col("_v").isNull(), F.lit("not valid JSON")),
        F.when(~top_type.startswith("OBJECT"), F.concat(
            F.lit("not a JSON object (got "), F.regexp_extract(top_type, r"^(\w+)", 1), F.lit(")"))),
        F.when(missing != "", F.concat(F.lit("missing required field(s): "), missing)),
        *[
            F.when(_vtype(f) != "STRING", F.concat(
                F.lit(f"field '{f}' must be a string, got "), _vtype(f)))
            for f in ("event_id", "device_id")
        ],
        F.when(~_vtype("signal").rlike(_NUMBER), F.concat(
            F.lit("field 'signal' must be a number, got "), _vtype("signal"))),
        F.when(F.isnan("_signal") | F.col("_signal").isin(float("inf"), float("-inf")), F.concat(
            F.lit("field 'signal' is not finite ("), F.col("_signal").cast("string"), F.lit(")"))),
        F.when(F.col("_time").isNull(), F.concat(
            F.lit("field 'event_time' is neither ISO-8601 with a zone nor integer epoch "
                  "milliseconds: "), F.coalesce(_quoted(time_text), time_type))),
    )
    extras = F.map_filter(
        F.from_json(F.col("value").cast("string"), "map<string,string>"),
        lambda k, _: ~k.isin(*REQUIRED_FIELDS),
    )
    return v.select(
        "*",
        _str("event_id").alias("event_id"),
        _str("device_id").alias("device_id"),
        F.col("_time").alias("event_time"),
        F.col("_signal").alias("signal"),
        extras.alias("extras"),
        reason.alias("reason"),
    ).drop("_v", "_time", "_signal")


def parse_device_events(kafka_df: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Split Kafka records into (valid typed events, quarantined records with reasons)."""
    checked = with_contract_columns(kafka_df).withColumn("kafka_timestamp", F.col("timestamp"))
    valid = checked.where(F.col("reason").isNull()).select(
        "event_id", "device_id", "event_time", "signal", "extras",
        "topic", "partition", "offset", "kafka_timestamp",
    )
    quarantined = checked.where(F.col("reason").isNotNull()).select(
        "reason",
        F.expr("make_valid_utf8(CAST(value AS STRING))").alias("payload_text"),
        "key", "value", "topic", "partition", "offset", "kafka_timestamp",
    )
    return valid, quarantined
