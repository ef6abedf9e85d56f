"""Every Delta table sigflow writes: its name and schema, declared once.

Readers of these tables: see docs/tables.md. Columns are nullable in the Delta schema so
both writers (delta-spark and delta-rs) produce identical table metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import StructType


@dataclass(frozen=True)
class TableSpec:
    name: str
    ddl: str  # Spark DDL column list
    description: str
    partition_by: tuple[str, ...] = ()

    @property
    def schema(self) -> StructType:
        schema = StructType.fromDDL(self.ddl)
        for f in schema.fields:
            f.nullable = True
        return schema


KAFKA_COORDINATES = "topic STRING, partition INT, offset BIGINT, kafka_timestamp TIMESTAMP"

DEVICE_EVENTS_RAW = TableSpec(
    "device_events_raw",
    f"key BINARY, value BINARY, {KAFKA_COORDINATES}, ingest_time TIMESTAMP, batch_id BIGINT",
    "Every Kafka record of device-events exactly as received, valid or not.",
)
DEVICE_EVENTS = TableSpec(
    "device_events",
    "event_id STRING, device_id STRING, event_time TIMESTAMP, signal DOUBLE, "
    f"extras MAP<STRING, STRING>, {KAFKA_COORDINATES}, ingest_time TIMESTAMP",
    "Valid device events, typed; extra producer fields kept in extras (JSON text values).",
)
QUARANTINED_EVENTS = TableSpec(
    "quarantined_events",
    f"reason STRING, payload_text STRING, key BINARY, value BINARY, {KAFKA_COORDINATES}, "
    "source_job STRING, ingest_time TIMESTAMP",
    "Records that broke the event contract, with the raw payload and the reason.",
)

ALL_TABLES = {t.name: t for t in (DEVICE_EVENTS_RAW, DEVICE_EVENTS, QUARANTINED_EVENTS)}


def register(*specs: TableSpec) -> None:
    for spec in specs:
        ALL_TABLES[spec.name] = spec
