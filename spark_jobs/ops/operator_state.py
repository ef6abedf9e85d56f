"""What a job's stateful operators hold, read from its checkpoint with Spark's state data
source (``format("state-metadata")`` for the operators, ``format("statestore")`` for their
rows): a batch query over committed state files, so the job keeps running meanwhile.

Per operator: its rows at the latest committed batch or a given one, for every device or
one. The sessions job's state is shown as the sessions it holds, each with its events and
when it closes (last event + gap, docs/semantics.md); other rows as their key and value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

from spark_jobs.config import Settings
from spark_jobs.errors import SigflowError
from spark_jobs.ops.status import format_time
from spark_jobs.runtime.checkpoint.directory import Checkpoint

JOIN_OPERATOR = "symmetricHashJoin"


@dataclass(frozen=True)
class OperatorState:
    operator_id: int
    operator: str
    side: str | None  # a join's left or right input
    rows: int
    shown: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.operator} #{self.operator_id}" + (f" ({self.side} input)" if self.side else "")


@dataclass(frozen=True)
class StateReport:
    job: str
    batch_id: int
    device: str | None
    operators: list[OperatorState]

    def lines(self, limit: int) -> list[str]:
        scope = f"device {self.device}" if self.device else "all devices"
        lines = [f"{self.job}: state at batch {self.batch_id}, {scope}"]
        if not self.operators:
            lines.append("  no stateful operator: this job keeps no state between batches")
        for op in self.operators:
            lines.append(f"  {op.label}: {op.rows:,} row(s){op.note}")
            lines += [f"    {row}" for row in op.shown[:limit]]
            if op.rows > limit:
                lines.append(f"    ... {op.rows - limit:,} more (--limit)")
        return lines


def _plain(value):
    """A state row's field as JSON-ready data (timestamps as ISO strings)."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    return value


def _describe(job: str, key: dict, value: dict, gap_ms: int, device: str | None = None) -> list[str]:
    held = (value or {}).get("groupState") or {}  # applyInPandasWithState: the state, its timeout
    if job == "sessions" and "open_sessions" in held:
        from spark_jobs.jobs.sessions import open_sessions

        return [
            f"device {s.device_id}: session {format_time(s.start_ms)} .. {format_time(s.last_ms)}, {s.event_count} event(s), "
            f"closes when the watermark reaches {format_time(s.last_ms + gap_ms)}"
            for s in open_sessions(held["open_sessions"]) if device is None or s.device_id == device
        ]
    return [f"key {json.dumps(key, default=str)} value {json.dumps(value, default=str)}"]


def _of_device(key: dict, value: dict, device: str) -> bool:
    return device in ((key or {}).get("device_id"), (value or {}).get("device_id"))


def read_state(spark, settings: Settings, job: str, device: str | None = None,
               batch_id: int | None = None) -> StateReport:
    checkpoint = Checkpoint(settings.checkpoint_uri(job))
    committed = checkpoint.committed_batches()
    if not committed:
        raise SigflowError(f"{job} has no committed batch in {checkpoint.uri}: no state to read yet",
                           f"run it first (`sigflow run {job}`); `sigflow checkpoint inspect {job}` lists its batches")
    batch = committed[-1] if batch_id is None else batch_id
    if batch not in committed:
        raise SigflowError(f"batch {batch} of {job} is not committed (committed: {committed[0]}..{committed[-1]})",
                           "pick a committed batch, or leave out --batch for the latest")
    operators = spark.read.format("state-metadata").load(checkpoint.uri).collect()
    gap_ms = settings.streaming.session_gap.ms
    found: list[OperatorState] = []
    for op in sorted({(o.operatorId, o.operatorName) for o in operators}):
        operator_id, name = op
        sides = ("left", "right") if name == JOIN_OPERATOR else (None,)
        for side in sides:
            reader = spark.read.format("statestore").option("batchId", batch).option("operatorId", operator_id)
            if side:
                reader = reader.option("joinSide", side)
            rows = [(_plain(r.key), _plain(r.value)) for r in reader.load(checkpoint.uri).collect()]
            note = ""
            # the sessions' state: a row per bucket of devices, each device's sessions inside it
            per_bucket = job == "sessions" and any("open_sessions" in ((v or {}).get("groupState") or {})
                                                   for _, v in rows)
            if device and not per_bucket and any("device_id" in (k or {}) or "device_id" in (v or {})
                                                 for k, v in rows):
                rows = [(k, v) for k, v in rows if _of_device(k, v, device)]
            elif device and rows and not per_bucket:
                note = " (its rows name no device: all of them)"
            shown = sorted(line for k, v in rows for line in _describe(job, k, v, gap_ms, device))
            found.append(OperatorState(operator_id, name, side, len(shown) if per_bucket else len(rows), shown, note))
    return StateReport(job, batch, device, found)
