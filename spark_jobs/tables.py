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

EVENT_COLUMNS = "event_id STRING, device_id STRING, event_time TIMESTAMP, signal DOUBLE"
DEVICE_EVENTS_DEDUPLICATED = TableSpec(
    "device_events_deduplicated",
    f"{EVENT_COLUMNS}, extras MAP<STRING, STRING>, {KAFKA_COORDINATES}",
    "Valid device events with duplicates (same event_id within the watermark) removed.",
)
DEVICE_SIGNAL_AVERAGES = TableSpec(
    "device_signal_averages",
    "device_id STRING, window_start TIMESTAMP, window_end TIMESTAMP, window_kind STRING, "
    "avg_signal DOUBLE, min_signal DOUBLE, max_signal DOUBLE, event_count BIGINT",
    "Per device and event-time window (tumbling and sliding), written once when final.",
)
FLEET_SIGNAL_ROLLUPS = TableSpec(
    "fleet_signal_rollups",
    "window_start TIMESTAMP, window_end TIMESTAMP, device_count BIGINT, "
    "mean_device_avg_signal DOUBLE, max_signal DOUBLE, device_window_count BIGINT",
    "Fleet-wide rollup of the per-device tumbling windows (a chained aggregation).",
)
LATE_EVENTS = TableSpec(
    "late_events",
    f"job STRING, {EVENT_COLUMNS}, missed STRING, watermark TIMESTAMP, batch_id BIGINT, "
    "topic STRING, partition INT, offset BIGINT",
    "Valid events a stateful job dropped because the watermark had passed them.",
)
PIPELINE_METRICS = TableSpec(
    "pipeline_metrics",
    "job STRING, batch_id BIGINT, batch_time TIMESTAMP, input_rows BIGINT, output_rows BIGINT, "
    "rows_dropped_by_watermark BIGINT, late_events BIGINT, state_rows BIGINT, "
    "state_memory_bytes BIGINT, watermark TIMESTAMP, duration_ms BIGINT, "
    "input_rows_per_second DOUBLE, processed_rows_per_second DOUBLE, progress_json STRING",
    "One row per micro-batch per job, from Spark's query progress.",
)

ALL_TABLES = {
    t.name: t
    for t in (
        DEVICE_EVENTS_RAW, DEVICE_EVENTS, QUARANTINED_EVENTS, DEVICE_EVENTS_DEDUPLICATED,
        DEVICE_SIGNAL_AVERAGES, FLEET_SIGNAL_ROLLUPS, LATE_EVENTS, PIPELINE_METRICS,
    )
}


def register(*specs: TableSpec) -> None:
    for spec in specs:
        ALL_TABLES[spec.name] = spec
