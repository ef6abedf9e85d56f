"""The forms a setting's value takes, each check stating the allowed form: durations
(``'10 minutes'``, ``'5m'``), JVM memory sizes, JVM options, Kafka starting offsets, URLs and
comma lists. The loader (``loading.py``) names the setting a value failed."""

from __future__ import annotations

import re
from typing import Annotated, Any, Callable

from pydantic import (
    AfterValidator,
    Field,
    PlainValidator,
)

from spark_jobs.errors import ConfigError

ENV_PREFIX = "SIGFLOW_"  # of every setting's environment variable
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?)\s*$")
_DURATION_FORM = "write it like '10 minutes', '30 seconds' or '5m'"
_JVM_MEMORY = re.compile(r"^\d+[kmgt]$", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str, name: str = "duration") -> float:
    """'10 minutes', '10m', '30s' -> seconds. Raises ConfigError naming the setting."""
    match = _DURATION.match(str(text))
    if not match:
        raise ConfigError(
            f"setting {name}={text!r} is not a duration",
            f"{_DURATION_FORM} (env {ENV_PREFIX}{name.upper()})",
        )
    unit = match.group(2)
    key = "ms" if unit.startswith("mil") or unit == "ms" else unit[0]
    return int(match.group(1)) * _UNIT_SECONDS[key]


def spark_interval(text: str, name: str = "duration") -> str:
    """A duration in the form Spark's withWatermark/window/trigger accept."""
    return Duration(text, name).spark


class Duration(str):
    """A duration setting as written ('10 minutes', '30s'), parsed once when the settings
    load: ``.seconds`` and ``.spark`` (the form Spark's watermarks, windows and triggers
    take). Still the text it was written as, for the checkpoint record and the docs."""

    seconds: float

    def __new__(cls, text: str, name: str = "duration") -> "Duration":
        seconds = duration_seconds(text, name)  # raises ConfigError naming the setting
        value = super().__new__(cls, str(text))
        value.seconds = seconds
        return value

    @property
    def spark(self) -> str:
        if self.seconds < 1:
            return f"{self.ms} milliseconds"
        return f"{int(self.seconds)} seconds"

    @property
    def ms(self) -> int:
        return int(self.seconds * 1000)


# ---- setting types: each check states the allowed form, and the loader names the setting --
def _as_duration(value: Any) -> Duration:
    if isinstance(value, Duration):
        return value
    if not _DURATION.match(str(value)):
        raise ValueError(f"not a duration; {_DURATION_FORM}")
    return Duration(str(value))


FOREVER = "forever"


def _as_retention(value: Any) -> Duration | str:
    """A retention: a duration, or ``forever`` (nothing is ever deleted)."""
    if str(value).strip().lower() == FOREVER:
        return FOREVER
    try:
        return _as_duration(value)
    except ValueError:
        raise ValueError(f"not a retention; write {FOREVER}, or a duration: {_DURATION_FORM}") from None


def _jvm_memory(value: str) -> str:
    if not _JVM_MEMORY.match(value):
        raise ValueError("not a JVM memory size; write it as Java does: 2g, 512m")
    return value


def _java_options(value: str) -> str:
    # Spark's own rules, as it applies them to the whole option string (SparkConf.validateSettings,
    # the launcher's SparkSubmitCommandBuilder): anything containing -Dspark or Xmx is refused
    # only at the session's start, with a Java and a Python traceback
    options = value.split()
    if spark_properties := [option for option in options if "-Dspark" in option]:
        raise ValueError(f"{spark_properties[0]} holds -Dspark, which Spark refuses among a JVM's options; set Spark "
                         "properties in spark-defaults.conf (in SPARK_CONF_DIR) or with spark-submit --conf")
    if heap := [option for option in options if "Xmx" in option]:
        raise ValueError(f"{heap[0]} sets the heap, which Spark refuses among a JVM's options; set "
                         "spark_driver_memory, spark_executor_memory or cluster_worker_memory instead")
    if not_options := [option for option in options if not option.startswith("-")]:
        raise ValueError(f"not JVM options: {', '.join(map(repr, not_options))}; write them as java takes them, "
                         "separated by spaces: -Xss4m -XX:+UseSerialGC")
    return " ".join(options)


def _starting_offsets(value: str) -> str:
    if value not in ("earliest", "latest") and not value.lstrip().startswith("{"):
        raise ValueError(
            "not earliest, latest or a JSON object; per-partition form: "
            '{"device-events": {"0": 42, "1": -2}} (-2 earliest, -1 latest)'
        )
    return value


def _http_url(value: str) -> str:
    if value and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
        raise ValueError("not an http(s) URL of an OpenLineage API, such as http://marquez:5000")
    return value.rstrip("/")


def _thrift_uri(value: str) -> str:
    if value and not re.fullmatch(r"thrift://[A-Za-z0-9.-]+:\d{1,5}", value):
        raise ValueError("not a Hive metastore's address: thrift://HOST:PORT, such as thrift://metastore:9083")
    return value


def _postgres_jdbc_url(value: str) -> str:
    if value and not re.fullmatch(r"jdbc:postgresql://[A-Za-z0-9.-]+(:\d{1,5})?/[A-Za-z0-9_]+", value):
        raise ValueError("not a PostgreSQL JDBC URL: jdbc:postgresql://HOST[:PORT]/DATABASE, such as "
                         "jdbc:postgresql://postgres:5432/metastore (user and password are settings of their own)")
    return value


def _sql_name(value: str) -> str:
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,127}", value):
        raise ValueError("not a database name: lower-case letters, digits and _, starting with a letter or _")
    return value


def _comma_list(pattern: str, what: str, example: str) -> Callable[[str], str]:
    """A validator of a comma-separated list whose items each match ``pattern``."""
    item = re.compile(pattern)

    def check(value: str) -> str:
        items = [part.strip() for part in value.split(",") if part.strip()]
        bad = [one for one in items if not item.fullmatch(one)]
        if bad:
            raise ValueError(f"not {what}: {', '.join(map(repr, bad))}; write them separated by commas: {example}")
        return ",".join(items)

    return check


def _unit(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9%/.*^\[\]()_ -]{1,32}", value):
        raise ValueError("not a unit: up to 32 letters, digits, spaces and % / . * ^ [ ] ( ) _ -, such as dBm, "
                         "Cel or %")
    return value


DurationSetting = Annotated[Duration, PlainValidator(_as_duration)]
RetentionSetting = Annotated[Duration | str, PlainValidator(_as_retention)]
RestartApprovers = Annotated[str, AfterValidator(_comma_list(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}", "Airflow user ids",
                                                                  "alice,bob"))]
LineageUrl = Annotated[str, AfterValidator(_http_url)]
ThriftUri = Annotated[str, AfterValidator(_thrift_uri)]
SqlName = Annotated[str, AfterValidator(_sql_name)]
PostgresJdbcUrl = Annotated[str, AfterValidator(_postgres_jdbc_url)]
Words = Annotated[str, AfterValidator(_comma_list(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", "plain words", "critical,warning"))]
JvmMemory = Annotated[str, AfterValidator(_jvm_memory)]
JavaOptions = Annotated[str, AfterValidator(_java_options)]
StartingOffsets = Annotated[str, AfterValidator(_starting_offsets)]
AtLeastOne = Annotated[int, Field(ge=1)]
Unit = Annotated[str, AfterValidator(_unit)]


