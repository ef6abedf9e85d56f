"""The jobs (each reads Kafka, none reads another job's tables) and the Delta tables each one writes.

Importing this package loads no Spark: DAG files read these names when Airflow parses
them. The runnable jobs (their plans over DataFrames) are in ``spark_jobs.jobs.registry``.
"""

from __future__ import annotations

from spark_jobs.contracts.tables import (
    ALERT_SIGNAL_CONTEXT,
    ALERTS_WITHOUT_TELEMETRY,
    DEVICE_ALERTS,
    DEVICE_EVENTS,
    DEVICE_EVENTS_DEDUPLICATED,
    DEVICE_EVENTS_RAW,
    DEVICE_SESSIONS,
    DEVICE_SIGNAL_AVERAGES,
    FLEET_SIGNAL_ROLLUPS,
    QUARANTINED_EVENTS,
    TableSpec,
)

JOB_TABLES: dict[str, tuple[TableSpec, ...]] = {
    "ingest": (DEVICE_EVENTS_RAW, DEVICE_EVENTS, DEVICE_ALERTS, QUARANTINED_EVENTS),
    "dedup": (DEVICE_EVENTS_DEDUPLICATED,),
    "windowed-averages": (DEVICE_SIGNAL_AVERAGES,),
    "fleet-rollup": (FLEET_SIGNAL_ROLLUPS,),
    "sessions": (DEVICE_SESSIONS,),
    "alert-join": (ALERT_SIGNAL_CONTEXT, ALERTS_WITHOUT_TELEMETRY),
}
JOB_NAMES: tuple[str, ...] = tuple(JOB_TABLES)
