"""The device event and alert contracts, as pure DataFrame functions.

A Kafka record meets a contract when its value is a JSON object whose required fields have
the declared JSON types: strings, finite numbers, times (ISO-8601 string with a zone, or
integer epoch milliseconds), or one of a fixed set of strings. Other fields are kept in
``extras``. A record that fails gets the first reason that applies (docs/event-contract.md).

Parsing uses Spark's VARIANT functions (``try_parse_json``, ``schema_of_variant``) so the
JSON type of every field is checked natively, without a Python UDF on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.config import Duration
from spark_jobs.contracts import flat_records
from spark_jobs.contracts.contract import (  # noqa: F401 - the contracts, re-exported for the jobs
    ALERT_CONTRACT,
    EPOCH_MS_MAX,
    EPOCH_MS_MIN,
    EVENT_CONTRACT,
    MAX_BEHIND_DAYS,
    MAX_PAYLOAD_BYTES,
    OVERSIZED_TEXT_BYTES,
    ZONED_ISO,
    Contract,
)
from spark_jobs.contracts.reasons import REASON_CODES

# A Kafka record as Spark's Kafka source gives it (includeHeaders=false): what the contract parses.
KAFKA_RECORD_SCHEMA = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, timestampType INT"
)

_INTEGER = ("BIGINT", "INT", "SMALLINT", "TINYINT")
_NUMBER = r"^(TINYINT|SMALLINT|INT|BIGINT|FLOAT|DOUBLE|DECIMAL.*)$"


def _vtype(name: str) -> Column:
    """JSON type of a top-level field: STRING, BIGINT, DOUBLE, DECIMAL(p,s), VOID (null)…
    (a column computed once per record by ``with_contract_columns``)."""
    return F.col(f"_k_{name}")


def _text(name: str) -> Column:
    return F.col(f"_s_{name}")


def _time(name: str) -> Column:
    """ISO-8601 with a zone, or an integral JSON number of epoch milliseconds (``1.7e12`` and
    ``1700000000000.0`` are integers to JSON Schema too) within years 0001 to 9999."""
    kind = _vtype(name)
    exact = F.expr(f"try_variant_get(_v, '$.{name}', 'bigint')")
    approximate = F.expr(f"try_variant_get(_v, '$.{name}', 'double')")
    return F.when(
        kind == "STRING", _zoned(_text(name)),
    ).when(
        kind.isin(*_INTEGER) & exact.between(EPOCH_MS_MIN, EPOCH_MS_MAX), F.timestamp_millis(exact),
    ).when(
        kind.rlike(_NUMBER) & approximate.between(EPOCH_MS_MIN, EPOCH_MS_MAX) & ((approximate % 1) == 0),
        F.timestamp_millis(approximate.cast("bigint")),
    )


def _zoned(text: Column) -> Column:
    """An ISO-8601 text with a zone as a timestamp (NULL for any other text)."""
    return F.when(text.rlike(ZONED_ISO), F.try_to_timestamp(text))


def _ahead(time: Column, ahead_ms: int) -> Column:
    return time > F.col("timestamp") + F.expr(f"INTERVAL {ahead_ms} MILLISECONDS")


def _too_old(time: Column) -> Column:
    return time < F.col("timestamp") - F.expr(f"INTERVAL {MAX_BEHIND_DAYS} DAYS")


def _number(name: str) -> Column:
    return F.expr(f"try_variant_get(_v, '$.{name}', 'double')")


def _coded(code: str, broken: Column, detail: Column) -> Column:
    assert code in REASON_CODES, code
    return F.when(broken, F.struct(F.lit(code).alias("code"), detail.alias("detail")))


def _reason(contract: Contract, max_ahead: str) -> Column:
    """The first broken rule as a struct of a stable ``code`` and a ``detail`` for people."""
    top_type = F.expr("schema_of_variant(_v)")  # only computed for the records that fail
    # valid JSON is an object exactly when it opens with "{"; schema_of_variant(_v) would
    # walk every field of every record to say the same
    is_object = F.ltrim(F.col("value").cast("string"), F.lit(" \t\r\n")).startswith("{")
    missing = F.concat_ws(", ", *[
        F.when(_vtype(f).isNull() | (_vtype(f) == "VOID"), F.lit(f)) for f in contract.required
    ])
    checks = [
        _coded("empty_record", F.col("value").isNull(), F.lit("empty record (no value)")),
        _coded("payload_too_large", F.length("value") > MAX_PAYLOAD_BYTES, F.concat(
            F.lit("payload of "), F.length("value").cast("string"),
            F.lit(f" bytes is over the {MAX_PAYLOAD_BYTES // 1024} KiB limit"))),
        _coded("not_json", F.col("_v").isNull(), F.lit("not valid JSON")),
        _coded("not_an_object", ~is_object, F.concat(
            F.lit("not a JSON object (got "), F.regexp_extract(top_type, r"^(\w+)", 1), F.lit(")"))),
        _coded("missing_field", missing != "", F.concat(F.lit("missing required field(s): "), missing)),
    ]
    checks += [
        _coded("wrong_type", _vtype(f) != "STRING", F.concat(F.lit(f"field '{f}' must be a string, got "), _vtype(f)))
        for f in contract.strings
    ]
    checks += [
        _coded("wrong_type", ~_vtype(f).rlike(_NUMBER), F.concat(F.lit(f"field '{f}' must be a number, got "), _vtype(f)))
        for f in contract.numbers
    ]
    checks += [
        _coded("not_finite", F.isnan(F.col(f"_n_{f}")) | F.col(f"_n_{f}").isin(float("inf"), float("-inf")), F.concat(
            F.lit(f"field '{f}' is not finite ("), F.col(f"_n_{f}").cast("string"), F.lit(")")))
        for f in contract.numbers
    ]
    checks += [
        _coded("value_not_allowed", ~_text(f).isin(*allowed), F.concat(
            F.lit(f"field '{f}' must be one of {', '.join(allowed)}, got "),
            F.concat(F.lit("'"), F.substring(_text(f), 1, 60), F.lit("'"))))
        for f, allowed in contract.choices.items()
    ]
    checks += [
        _coded("bad_time", F.col(f"_t_{f}").isNull(), F.concat(
            F.lit(f"field '{f}' is neither ISO-8601 with a zone nor integer epoch milliseconds: "),
            F.coalesce(F.concat(F.lit("'"), F.substring(_text(f), 1, 60), F.lit("'")), _vtype(f))))
        for f in contract.times
    ]
    ahead_ms = Duration(max_ahead, "max_clock_ahead").ms
    checks += [
        check
        for f in contract.times
        for check in (
            _coded("time_ahead", _ahead(F.col(f"_t_{f}"), ahead_ms), F.concat(
                F.lit(f"field '{f}' is more than {max_ahead} (max_clock_ahead) after the record's Kafka timestamp: "),
                F.col(f"_t_{f}").cast("string"))),
            _coded("time_too_old", _too_old(F.col(f"_t_{f}")), F.concat(
                F.lit(f"field '{f}' is more than {MAX_BEHIND_DAYS} days before the record's Kafka timestamp: "),
                F.col(f"_t_{f}").cast("string"))),
        )
    ]
    return F.coalesce(*checks)


def with_contract_columns(
    kafka_df: DataFrame, contract: Contract, max_ahead: str, flat_parser: bool = True
) -> DataFrame:
    """Add the typed contract columns, ``extras``, ``reason_code`` and ``reason`` (NULL when valid).
    ``max_ahead``: how far a time may be after the record's Kafka timestamp. ``flat_parser``:
    False sends every record through the checks, as a session without the parser's JAR does."""
    steps = _contract_projections(contract, max_ahead, flat_parser)
    checked = kafka_df._jdf  # noqa: SLF001 - the steps are the JVM's own sequences (_JvmSteps)
    for names, columns in steps.stages:
        checked = checked.withColumns(names, columns)
    checked = checked.select(steps.checked).drop(steps.helpers).select(steps.reason).drop("_reason")
    return DataFrame(checked, kafka_df.sparkSession)


@dataclass(frozen=True)
class _Projections:
    """The contract's columns: ``stages`` added in order, each one projection, then
    ``checked`` beside them, then ``reason`` from ``checked``; ``helpers`` dropped."""

    stages: list[dict[str, Column]]
    checked: list[Column]
    helpers: list[str]
    reason: list[Column]


@dataclass(frozen=True)
class _JvmSteps:
    """``_Projections`` as the JVM's own sequences, each step one py4j call: through
    PySpark's API a list of columns is converted column by column, a call each (about 230
    calls and 25 to 45 ms of a batch's two parses, docs/streaming-facts.md)."""

    stages: list[tuple[object, object]]  # names, columns
    checked: object  # every column, then the typed ones and _reason
    helpers: object
    reason: object  # every column, then reason_code and reason

    @classmethod
    def of(cls, projections: _Projections) -> "_JvmSteps":
        from pyspark import SparkContext

        def seq(items: list) -> object:
            return SparkContext._jvm.PythonUtils.toSeq([c._jc if isinstance(c, Column) else c for c in items])

        every = F.col("*")
        return cls(stages=[(seq(list(stage)), seq(list(stage.values()))) for stage in projections.stages],
                   checked=seq([every, *projections.checked]), helpers=seq(projections.helpers),
                   reason=seq([every, *projections.reason]))


_built: dict[tuple[str, str, bool], tuple[object, _JvmSteps]] = {}  # with the JVM they were built in


def _contract_projections(contract: Contract, max_ahead: str, flat_parser: bool) -> _JvmSteps:
    """The contract's columns, built once per JVM: they are unresolved expressions, the same
    for every micro-batch, and building them took about 2,300 py4j calls a parse (260 to
    450 ms of each ingest batch's two, docs/streaming-facts.md)."""
    from pyspark import SparkContext

    key = (contract.name, max_ahead, flat_parser)
    jvm, steps = _built.get(key, (None, None))
    if steps is None or jvm is not SparkContext._jvm:
        steps = _JvmSteps.of(_build_projections(
            contract, max_ahead, flat_records.parser(contract) if flat_parser else None))
        _built[key] = (SparkContext._jvm, steps)
    return steps


@dataclass(frozen=True)
class _Flat:
    """What the flat-record parser gives: ``accepted`` when it took the record and every
    check passed, then ``typed`` holds its columns."""

    stages: list[dict[str, Column]]
    accepted: Column
    typed: dict[str, Column]
    helpers: list[str]


def _flat_projections(flat: Column, contract: Contract, max_ahead: str) -> _Flat:
    # The parser returns a time's text or its epoch milliseconds; what either means, and
    # whether it is in time, is decided here, as for every other record. The times and the
    # verdict are one projection: as two, the readings' plan (key, time and signal) made a
    # method of 8,252 bytes, over the 8,000 the JIT compiles, and ran interpreted.
    times = {f"_ft_{f}": F.coalesce(_zoned(F.col(f"_f.{f}_text")), F.timestamp_millis(F.col(f"_f.{f}_ms")))
             for f in contract.times}
    ahead_ms = Duration(max_ahead, "max_clock_ahead").ms
    accepted = F.col("_f.accepted")
    for time in times.values():
        accepted = accepted & time.isNotNull() & ~_ahead(time, ahead_ms) & ~_too_old(time)
    typed = {f: F.col(f"_f.{f}") for f in (*contract.strings, *contract.numbers)}
    typed.update({f: F.col(f"_ft_{f}") for f in contract.times})
    typed["extras"] = F.col("_f.extras")
    return _Flat(
        stages=[{"_f": flat}, {**times, "_ok": F.coalesce(accepted, F.lit(False))}],
        accepted=F.col("_ok"),
        typed=typed,
        helpers=["_f", *times, "_ok"],
    )


def _build_projections(contract: Contract, max_ahead: str, flat: Column | None) -> _Projections:
    """``flat``: the JVM's flat-record parser over ``value`` (flat_records.py), or None
    without it; the checks below decide every record it does not accept."""
    fast = _flat_projections(flat, contract, max_ahead) if flat is not None else None
    # An oversized payload is quarantined for its size before anything else is looked at,
    # so it is not parsed: in a 10% malformed storm the 1% of 300 KiB payloads were most
    # of the parsing work. Nor is a record the flat parser accepted.
    parse = F.length("value") <= MAX_PAYLOAD_BYTES
    if fast is not None:
        parse = parse & ~fast.accepted
    parsed = F.when(parse, F.expr("try_parse_json(CAST(value AS STRING))"))
    # Each field's JSON type and text are computed once, in their own projection: the
    # checks below read them many times, inside CASE branches that codegen's common
    # subexpression elimination does not share (inlined, each check walked the variant
    # again: 4.3 s against 3.5 s for 200,000 records on 2 cores).
    kinds = {f"_k_{f}": F.expr(f"schema_of_variant(variant_get(_v, '$.{f}'))") for f in contract.required}
    texts = {f"_s_{f}": F.expr(f"try_variant_get(_v, '$.{f}', 'string')")
             for f in (*contract.strings, *contract.times)}
    values = {
        **{f"_n_{f}": _number(f) for f in contract.numbers},
        **{f"_t_{f}": _time(f) for f in contract.times},
    }
    # from the parsed variant rather than a second JSON parse (from_json gives the same map)
    extras = F.map_filter(
        F.expr("try_variant_get(_v, '$', 'map<string,string>')"),
        lambda k, _: ~k.isin(*contract.required),
    )
    typed = {f: _text(f) for f in contract.strings}
    typed.update({f: F.col(f"_n_{f}") for f in contract.numbers})
    typed.update({f: F.col(f"_t_{f}") for f in contract.times})
    typed["extras"] = extras
    reason = _reason(contract, max_ahead)
    if fast is not None:
        typed = {name: F.when(fast.accepted, fast.typed[name]).otherwise(col) for name, col in typed.items()}
        reason = F.when(~fast.accepted, reason)
    return _Projections(
        stages=[*(fast.stages if fast is not None else []), {"_v": parsed}, {**kinds, **texts}, values],
        checked=[*[col.alias(name) for name, col in typed.items()], reason.alias("_reason")],
        helpers=[*(fast.helpers if fast is not None else []), "_v", *kinds, *texts, *values],
        reason=[F.col("_reason.code").alias("reason_code"), F.col("_reason.detail").alias("reason")],
    )


Keep = Callable[[DataFrame], DataFrame]  # BatchContext.cache: persist a frame for this batch


EVENT_COLUMNS = ["event_id", "device_id", "event_time", "signal"]
ALERT_COLUMNS = ["alert_id", "device_id", "alert_time", "severity", "kind"]
COORDINATES = ["topic", "partition", "offset", "kafka_timestamp"]  # where a record was in Kafka


def _split(
    kafka_df: DataFrame, contract: Contract, columns: list[str], max_ahead: str, keep: Keep | None
) -> tuple[DataFrame, DataFrame]:
    checked = _checked(kafka_df, contract, max_ahead, keep)
    return _valid(checked, columns), checked.where(F.col("reason").isNotNull()).select(
        "reason_code", "reason",
        _payload_text().alias("payload_text"),
        "key", "value", *COORDINATES, _named_device().alias("device_id"),
    )


def _checked(kafka_df: DataFrame, contract: Contract, max_ahead: str, keep: Keep | None) -> DataFrame:
    checked = with_contract_columns(kafka_df, contract, max_ahead).withColumn("kafka_timestamp", F.col("timestamp"))
    return keep(checked) if keep else checked


def _valid(checked: DataFrame, columns: list[str]) -> DataFrame:
    return checked.where(F.col("reason").isNull()).select(*columns, "extras", *COORDINATES)


def _payload_text() -> Column:
    """A quarantined record's value as text for people (invalid UTF-8 replaced): whole, or the
    first ``OVERSIZED_TEXT_BYTES`` of a payload over the size limit."""
    shown = f"CASE WHEN length(value) <= {MAX_PAYLOAD_BYTES} THEN value ELSE substring(value, 1, {OVERSIZED_TEXT_BYTES}) END"
    return F.expr(f"make_valid_utf8(CAST({shown} AS STRING))")


def _named_device() -> Column:
    """The device a quarantined record names: its device_id where the record is JSON and that
    is a string, never a number's text. Parsed again here, for quarantined records only, so
    that the valid records' parse stays within the methods the JIT compiles
    (tests/spark_jobs/contracts/test_flat_records.py)."""
    named = F.expr("schema_of_variant(variant_get(try_parse_json(CAST(value AS STRING)), '$.device_id'))")
    return F.when((F.length("value") <= MAX_PAYLOAD_BYTES) & (named == "STRING"), F.col("device_id"))


def parse_device_events(
    kafka_df: DataFrame, max_ahead: str, keep: Keep | None = None
) -> tuple[DataFrame, DataFrame]:
    """Split Kafka records into (valid typed events, quarantined records with reasons).
    ``keep`` (a micro-batch's ``BatchContext.cache``) makes both read one parse."""
    return _split(kafka_df, EVENT_CONTRACT, EVENT_COLUMNS, max_ahead, keep)


def valid_device_events(kafka_df: DataFrame, max_ahead: str) -> DataFrame:
    """The valid typed events alone, for a job that leaves the others to ingest's quarantine:
    the quarantined rows' plan is not built (each step of a plan is analysed as it is made,
    a few ms each over a stream's plan)."""
    return _valid(_checked(kafka_df, EVENT_CONTRACT, max_ahead, None), EVENT_COLUMNS)


def records_maybe_at_or_before(kafka_df: DataFrame, epoch_ms: int) -> DataFrame:
    """The records that may be valid events with ``event_time`` at or before ``epoch_ms``:
    all but those whose time is surely after it (``flat_records.time_surely_after``), so
    that a batch's few late events are found without parsing each of its records (all of
    them without the parser's JAR)."""
    surely_after = flat_records.time_surely_after("event_time", epoch_ms)
    return kafka_df if surely_after is None else kafka_df.where(~surely_after)


def parse_device_alerts(
    kafka_df: DataFrame, max_ahead: str, keep: Keep | None = None
) -> tuple[DataFrame, DataFrame]:
    """Split Kafka records into (valid typed alerts, quarantined records with reasons)."""
    return _split(kafka_df, ALERT_CONTRACT, ALERT_COLUMNS, max_ahead, keep)


def valid_device_alerts(kafka_df: DataFrame, max_ahead: str) -> DataFrame:
    """The valid typed alerts alone (``valid_device_events``)."""
    return _valid(_checked(kafka_df, ALERT_CONTRACT, max_ahead, None), ALERT_COLUMNS)
