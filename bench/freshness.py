"""What the capacity bench reads back from the tables: each job's batch durations, and each
table's freshness (how long after the rules let a row exist its commit made it visible)."""

from __future__ import annotations

import json

import pandas as pd

from spark_jobs.config import Settings
from spark_jobs.runtime.delta import table_access


def _quantiles(values: pd.Series) -> tuple[int, float, float]:
    if values.empty:
        return 0, 0.0, 0.0
    return len(values), float(values.quantile(0.5)), float(values.quantile(0.95))


def batch_durations(settings: Settings, jobs: list[str], since_s: float, until_s: float
                    ) -> dict[str, tuple[int, float, float, float]]:
    """Per job: the batches that read records and began in [since, until), their p50 and p95
    ms, and the p50 of the part Spark spent in the job's own batch function (``addBatch``:
    the split and every table's commit); the rest is Spark's planning, offsets and log."""
    metrics = table_access.read_pandas(settings.table_uri("pipeline_metrics"),
                                       ["job", "batch_time", "duration_ms", "input_rows", "progress_json"])
    began = (metrics.batch_time - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    chosen = metrics[(began >= since_s) & (began < until_s) & (metrics.input_rows > 0)]
    found = {}
    for job in jobs:
        rows = chosen[chosen.job == job]
        in_batch = rows.progress_json.map(lambda text: json.loads(text)["durationMs"].get("addBatch", 0))
        found[job] = (*_quantiles(rows.duration_ms), float(in_batch.median()) if len(rows) else 0.0)
    return found


def due_times(settings: Settings) -> dict[str, tuple[list[str], object]]:
    """Per table: the columns it needs and when a row of it may exist at the earliest (epoch s).

    A fleet stamps each event with the clock that sends it, so an on-time event's time is its
    send's: a watermark passes a time t about ``watermark_delay`` after t."""
    streaming = settings.streaming
    delay, alert_delay = streaming.watermark_delay.seconds, streaming.alert_watermark_delay.seconds
    gap = streaming.session_gap.seconds

    def at(column: str, plus: float = 0.0):
        return lambda rows: (rows[column] - pd.Timestamp(0, tz="UTC")).dt.total_seconds() + plus

    sent = (["kafka_timestamp"], at("kafka_timestamp"))
    return {
        "device_events_raw": sent, "device_events": sent, "device_alerts": sent, "quarantined_events": sent,
        "device_events_deduplicated": sent,
        "device_signal_averages": (["window_end"], at("window_end", delay)),
        "fleet_signal_rollups": (["window_end"], at("window_end", delay)),
        "device_sessions": (["session_end"], at("session_end", gap + delay)),
        "alert_signal_context": (["alert_time"], at("alert_time")),
        "alerts_without_telemetry": (["alert_time"], at("alert_time", max(delay, alert_delay))),
    }


def freshness(settings: Settings, since_s: float, until_s: float) -> dict[str, tuple[int, float, float]]:
    """Per table: rows committed in [since, until), and p50/p95 of commit time - due time, in s."""
    found = {}
    for table, (columns, due) in due_times(settings).items():
        uri = settings.table_uri(table)
        if not table_access.exists(uri):
            continue
        committed = {(entry.get("checkpoint_id"), int(entry["batch_id"])): entry["timestamp"] / 1000
                     for entry in reversed(table_access.history(uri)) if "batch_id" in entry}  # newest wins
        rows = table_access.read_pandas(uri, [*columns, "checkpoint_id", "batch_id"])
        at = pd.Series([committed.get(key) for key in zip(rows.checkpoint_id, rows.batch_id)], index=rows.index,
                       dtype="float64")
        chosen = rows[(at >= since_s) & (at < until_s)]
        found[table] = _quantiles((at[chosen.index] - due(chosen)).dropna())
    return found
