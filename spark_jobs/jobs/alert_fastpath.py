"""Job ``alert-fastpath``: critical alerts forwarded to a Kafka topic within milliseconds.

Each device-alerts record is checked against the alert contract, the same expressions
ingest applies (``contracts.events.parse_device_alerts``): a record ingest would quarantine
is never forwarded. A valid alert is critical when its severity is one of
``critical_severities`` or its kind one of ``critical_kinds``; it goes to
``critical_alerts_topic`` keyed by its device, so one device's alerts stay in order. The
rest are not forwarded (ingest still keeps every record).

The plan is stateless so that it runs in Spark's real-time mode. Its Kafka sink is
at-least-once: after a failure the records of the batch in flight are sent again, so a
consumer deduplicates by ``alert_id`` (docs/jobs/alert-fastpath.md).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.config import StreamingSettings
from spark_jobs.contracts.contract import ALERT_CONTRACT
from spark_jobs.contracts.events import valid_device_alerts
from spark_jobs.errors import ConfigError
from spark_jobs.jobs.base import RealTimeJob

SEVERITIES = ALERT_CONTRACT.choices["severity"]


def critical_rule(settings: StreamingSettings) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(severities, kinds) that make an alert critical, checked against the contract."""
    severities = tuple(filter(None, settings.critical_severities.split(",")))
    kinds = tuple(filter(None, settings.critical_kinds.split(",")))
    unknown = [s for s in severities if s not in SEVERITIES]
    if unknown:
        raise ConfigError(f"critical_severities names {', '.join(unknown)}, not a severity of the alert contract",
                          f"use any of {', '.join(SEVERITIES)} (docs/event-contract.md)")
    if not severities and not kinds:
        raise ConfigError("critical_severities and critical_kinds are both empty: alert-fastpath would forward nothing",
                          "set critical_severities (default critical) or critical_kinds")
    return severities, kinds


def _why_critical(severities: tuple[str, ...], kinds: tuple[str, ...]) -> Column:
    by_severity = F.when(F.col("severity").isin(*severities), F.concat(F.lit("severity "), F.col("severity")))
    by_kind = F.when(F.col("kind").isin(*kinds), F.concat(F.lit("kind "), F.col("kind")))
    return F.coalesce(by_severity, by_kind) if kinds else by_severity


def critical_alerts(settings: StreamingSettings, records: DataFrame) -> DataFrame:
    """Kafka records of device-alerts -> ``key`` (device id) and ``value`` (the alert as
    JSON, with why it is critical and where it was read) of each valid critical alert."""
    severities, kinds = critical_rule(settings)
    alerts = valid_device_alerts(records, settings.max_clock_ahead)
    critical = alerts.withColumn("critical_because", _why_critical(severities, kinds)).where(
        F.col("critical_because").isNotNull())
    message = F.struct(
        "alert_id", "device_id", "severity", "kind",
        F.date_format("alert_time", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("alert_time"),
        "critical_because",
        F.struct("topic", "partition", "offset").alias("source"),
        F.date_format("kafka_timestamp", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("kafka_timestamp"),
    )
    return critical.select(F.col("device_id").cast("binary").alias("key"), F.to_json(message).alias("value"))


ALERT_FASTPATH = RealTimeJob(
    name="alert-fastpath",
    summary="Kafka device-alerts -> critical alerts on Kafka device-alerts-critical, in real-time mode",
    topics=lambda settings: [settings.alerts_topic],
    build=critical_alerts,
    output_topic=lambda settings: settings.critical_alerts_topic,
)
