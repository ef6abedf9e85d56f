"""The JVM's flat-record parser (infra/contract-parser): the contract's common case at the
cost of one JSON parse.

Most records are a flat JSON object of strings, numbers and booleans. The parser takes
such a record only when the contract's checks would give it exactly the values it
returns; any other record (nested values, nulls, escapes of lone surrogates, duplicate
keys, numbers a double cannot hold exactly, broken JSON) it leaves to those checks, which
decide every record it does not take (events.py). Without its JAR on the classpath every
record takes the checks.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from spark_jobs.contracts.contract import (
    EPOCH_MS_MAX,
    EPOCH_MS_MIN,
    MAX_PAYLOAD_BYTES,
    Contract,
)

PARSER_CLASS = "io.sigflow.contract.FlatRecordParser"
SURELY_AFTER_CLASS = "io.sigflow.contract.TimeSurelyAfter"
AT_OR_BEHIND_CLASS = "io.sigflow.contract.AtOrBehindBatchWatermark"


def parsed_schema(contract: Contract) -> StructType:
    """The parser's row: whether it took the record, each string and number field, each
    time's text or epoch milliseconds, and the other fields' texts."""
    fields = [StructField("accepted", BooleanType(), False)]
    fields += [StructField(f, StringType()) for f in contract.strings]
    fields += [StructField(f, DoubleType()) for f in contract.numbers]
    for f in contract.times:
        fields += [StructField(f"{f}_text", StringType()), StructField(f"{f}_ms", LongType())]
    fields.append(StructField("extras", MapType(StringType(), StringType())))
    return StructType(fields)


def parser(contract: Contract) -> Column | None:
    """The parser applied to a Kafka record's ``value``, or None when the JVM has no parser."""
    jvm = _jvm_with(PARSER_CLASS)
    if jvm is None:
        return None
    parse = getattr(jvm, PARSER_CLASS)(
        list(contract.strings), list(contract.numbers), list(contract.times),
        {field: list(allowed) for field, allowed in contract.choices.items()},
        MAX_PAYLOAD_BYTES, EPOCH_MS_MIN, EPOCH_MS_MAX,
    )
    return _on_value(jvm, parse.asUdf(jvm.org.apache.spark.sql.types.DataType.fromJson(parsed_schema(contract).json())))


def time_surely_after(field: str, epoch_ms: int) -> Column | None:
    """True for a record whose top-level ``field`` is a UTC ISO-8601 text of a second after
    ``epoch_ms``'s, read up to that field only; false for every other record (then only the
    contract's checks can say what its time is). None when the JVM has no parser. The
    function holds the instant: as a literal in the plan, Spark would compile it into each
    batch's code anew."""
    jvm = _jvm_with(SURELY_AFTER_CLASS)
    if jvm is None:
        return None
    return _on_value(jvm, getattr(jvm, SURELY_AFTER_CLASS)(field, epoch_ms).asUdf())


def at_or_behind_batch_watermark(time_micros: Column, property_name: str) -> Column | None:
    """Whether ``time_micros`` is at or behind the watermark the running batch's tasks carry in
    the local property ``property_name`` (as Spark's stateful operators compare it); null where
    a task carries none. None when the JVM has no parser's JAR."""
    jvm = _jvm_with(AT_OR_BEHIND_CLASS)
    if jvm is None:
        return None
    return _applied(jvm, getattr(jvm, AT_OR_BEHIND_CLASS)(property_name).asUdf(), time_micros)


def _jvm_with(class_name: str):
    """The JVM, when it can load the class (from the parser's JAR); else None."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    try:
        jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(class_name)
    except Exception:  # py4j wraps ClassNotFoundException: the JAR is not installed
        return None
    return jvm


def _on_value(jvm, udf) -> Column:
    return _applied(jvm, udf, F.col("value"))


def _applied(jvm, udf, column: Column) -> Column:
    from pyspark.sql.classic.column import Column as JvmColumn

    return JvmColumn(udf.apply(jvm.PythonUtils.toSeq([column._jc])))  # noqa: SLF001
