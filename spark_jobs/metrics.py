"""Per-batch figures from Spark's query progress -> rows of the pipeline_metrics table."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Iterable


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def progress_row(job: str, progress: dict[str, Any], output_rows: int, late_events: int) -> dict[str, Any]:
    operators = progress.get("stateOperators") or []
    watermark = (progress.get("eventTime") or {}).get("watermark")
    return {
        "job": job,
        "batch_id": int(progress["batchId"]),
        "batch_time": _time(progress.get("timestamp")),
        "input_rows": int(progress.get("numInputRows") or 0),
        "output_rows": output_rows,
        "rows_dropped_by_watermark": sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in operators),
        "duplicates_dropped": sum(
            int((op.get("customMetrics") or {}).get("numDroppedDuplicateRows") or 0) for op in operators
        ),
        "late_events": late_events,
        "state_rows": sum(int(op.get("numRowsTotal") or 0) for op in operators),
        "state_memory_bytes": sum(int(op.get("memoryUsedBytes") or 0) for op in operators),
        "watermark": _time(watermark),
        "duration_ms": int((progress.get("durationMs") or {}).get("triggerExecution") or 0),
        "input_rows_per_second": float(progress.get("inputRowsPerSecond") or 0.0),
        "processed_rows_per_second": float(progress.get("processedRowsPerSecond") or 0.0),
        "progress_json": json.dumps(progress),
    }


def progress_dicts(query) -> Iterable[dict[str, Any]]:
    """Progress of the batches that ran (idle reports, without addBatch, are skipped)."""
    for progress in query.recentProgress:
        # StreamingQueryProgress objects carry their JSON; plain dicts may hold UUIDs
        parsed = json.loads(progress.json) if hasattr(progress, "json") else json.loads(
            json.dumps(progress, default=str)
        )
        if "addBatch" in (parsed.get("durationMs") or {}):
            yield parsed
