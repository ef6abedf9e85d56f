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
    from pyspark import SparkContext
    from pyspark.sql.classic.column import Column as JvmColumn

    jvm = SparkContext._jvm
    try:
        jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(PARSER_CLASS)
    except Exception:  # py4j wraps ClassNotFoundException: the JAR is not installed
        return None
    parse = getattr(jvm, PARSER_CLASS)(
        list(contract.strings), list(contract.numbers), list(contract.times),
        {field: list(allowed) for field, allowed in contract.choices.items()},
        MAX_PAYLOAD_BYTES, EPOCH_MS_MIN, EPOCH_MS_MAX,
    )
    udf = parse.asUdf(jvm.org.apache.spark.sql.types.DataType.fromJson(parsed_schema(contract).json()))
    return JvmColumn(udf.apply(jvm.PythonUtils.toSeq([F.col("value")._jc])))  # noqa: SLF001
