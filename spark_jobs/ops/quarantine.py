"""What broke the contract lately, read from quarantined_events without Spark: reasons by
count, each sample cut around the field its reason names, and who sent it (per device, per
producer key) on request."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

from spark_jobs.config import Settings, duration_seconds
from spark_jobs.ops.terminal_text import terminal
from spark_jobs.runtime.delta import table_access
from spark_jobs.runtime.delta.table_access import read_pandas

RUNBOOK = "docs/runbooks/malformed-surge.md"
SAMPLE_CHARS = 100
GROUPINGS = ("device", "key")  # --by: the payload's device_id, the producer's key
_FIELD = re.compile(r"field(?:\(s\))?:? '?([A-Za-z_][\w]*)'?")


def sample(payload: str, reason: str, width: int = SAMPLE_CHARS) -> str:
    """The part of a payload that shows what its reason says: around the field the reason
    names when the payload has it, else the payload's start."""
    payload = str(payload)
    named = _FIELD.search(reason or "")
    at = payload.find(f'"{named.group(1)}"') if named else -1
    if len(payload) <= width or at < 0:
        return payload[:width] + ("…" if len(payload) > width else "")
    start = max(at - width // 4, 0)
    end = min(start + width, len(payload))
    return ("…" if start else "") + payload[start:end] + ("…" if end < len(payload) else "")


def _device(payload: str) -> str:
    try:
        value = json.loads(payload)
    except (TypeError, ValueError):
        return "(not JSON)"
    device = value.get("device_id") if isinstance(value, dict) else None
    return device if isinstance(device, str) and device else "(no device_id)"


def _key(key) -> str:
    if key is None:
        return "(no key)"
    return bytes(key).decode("utf-8", "replace")


def counts_by_reason(settings: Settings) -> dict[str, int]:
    """Every quarantined record so far (within quarantine_retention), per reason code: one
    column read in chunks, so memory does not follow the table."""
    from collections import Counter

    from spark_jobs.runtime.delta.increments import CHUNK_ROWS, added_since, chunks

    uri = settings.table_uri("quarantined_events")
    if not table_access.exists(uri):
        return {}
    counts: Counter = Counter()
    for chunk in chunks(added_since(uri, None), CHUNK_ROWS, ["reason_code"]):
        counts.update(chunk.column("reason_code").to_pandas().value_counts().to_dict())
    return dict(counts)


def summary(settings: Settings, since: str = "24 hours", samples: int = 3, by: tuple[str, ...] = ()) -> list[str]:
    """Reasons by count, most first, with samples; topic partitions; per device or key."""
    import pyarrow.dataset as ds

    uri = settings.table_uri("quarantined_events")
    if not table_access.exists(uri):
        return ["quarantined_events: no table yet (ingest has not run)"]
    cutoff = datetime.now(timezone.utc).timestamp() - duration_seconds(since, "since")
    recent = read_pandas(uri, columns=["reason_code", "reason", "payload_text", "key", "topic", "partition", "offset"],
                         where=ds.field("ingest_time") >= datetime.fromtimestamp(cutoff, timezone.utc))
    lines = [f"quarantined in the last {since}: {len(recent):,} records (what to do: {RUNBOOK})"]
    if recent.empty:
        return lines
    counts = recent.reason_code.fillna("(no code)").value_counts()
    counts = counts.sort_index().sort_values(ascending=False, kind="stable")  # most first, ties by name
    for code, count in counts.items():
        lines.append(f"  {count:8,d}  {code}")
        group = recent[recent.reason_code.fillna("(no code)") == code]
        for row in group.head(samples).itertuples():
            lines.append(f"            {row.topic}[{row.partition}]@{row.offset}: {terminal(row.reason)}")
            lines.append(f"              {terminal(sample(row.payload_text, row.reason))}")
    by_partition = recent.groupby(["topic", "partition"]).size().sort_values(ascending=False)
    lines.append("by topic partition: " + ", ".join(f"{t}[{p}]={n:,}" for (t, p), n in by_partition.items()))
    if "device" in by:
        lines.append("by device: " + _top(recent.payload_text.map(_device)))
    if "key" in by:
        lines.append("by producer key: " + _top(recent.key.map(_key)))
    return lines


def _top(values, limit: int = 10) -> str:
    counts = values.value_counts()
    counts = counts.sort_index().sort_values(ascending=False, kind="stable")  # ties by name: the same every run
    shown = ", ".join(f"{terminal(name)}={n:,}" for name, n in counts.head(limit).items())
    return shown + (f", and {len(counts) - limit:,} more" if len(counts) > limit else "")
