"""The jobs (each reads Kafka, none reads another job's tables), the Delta tables each one
writes, and the real-time jobs, which write a Kafka topic. A table kept current by merge may
have several writers, each merging its own part of a row (device_status).

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
    DEVICE_STATUS,
    FLEET_SIGNAL_ROLLUPS,
    QUARANTINED_EVENTS,
    TableSpec,
)

JOB_TABLES: dict[str, tuple[TableSpec, ...]] = {
    "ingest": (DEVICE_EVENTS_RAW, DEVICE_EVENTS, DEVICE_ALERTS, QUARANTINED_EVENTS, DEVICE_STATUS),
    "dedup": (DEVICE_EVENTS_DEDUPLICATED,),
    "windowed-averages": (DEVICE_SIGNAL_AVERAGES, DEVICE_STATUS),
    "fleet-rollup": (FLEET_SIGNAL_ROLLUPS,),
    "sessions": (DEVICE_SESSIONS, DEVICE_STATUS),
    "alert-join": (ALERT_SIGNAL_CONTEXT, ALERTS_WITHOUT_TELEMETRY),
}
JOB_NAMES: tuple[str, ...] = tuple(JOB_TABLES)


def writers_of(table: str) -> tuple[str, ...]:
    """The jobs writing ``table``, in JOB_TABLES' order (device_status: one per part of its rows)."""
    return tuple(job for job, specs in JOB_TABLES.items() if any(spec.name == table for spec in specs))

# Jobs whose results sigflow reconcile corrects from their late events (spark_jobs/ops/reconcile.py).
RECONCILED_JOBS: tuple[str, ...] = tuple(name for name, tables in JOB_TABLES.items()
                                         if any(spec.corrected for spec in tables))
# Jobs in Spark's real-time mode: Kafka to Kafka, no table, no micro-batch to wait for.
REAL_TIME_JOB_NAMES: tuple[str, ...] = ("alert-fastpath",)
ALL_JOB_NAMES: tuple[str, ...] = JOB_NAMES + REAL_TIME_JOB_NAMES
