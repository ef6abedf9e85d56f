"""What on-call asks first: is each job running, how far has it got, how far behind is it.

Read from the checkpoints, the pipeline_metrics table and Kafka only (no Spark needed), so
`sigflow status` answers in a second even while the jobs are down.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

from spark_jobs.config import Settings
from spark_jobs.errors import SigflowError
from spark_jobs.jobs.registry import JOBS
from spark_jobs.local import broker
from spark_jobs.runtime import kafka_client
from spark_jobs.runtime.checkpoint import Checkpoint
from spark_jobs.runtime.delta_tables import read_pandas
from spark_jobs.runtime.lease import Holder, Lease


def running_holder(settings: Settings, job: str) -> Holder | None:
    """The live run holding the job's checkpoint lease, on any host, or None."""
    holder = Lease(Checkpoint(settings.checkpoint_uri(job)), job, settings.lease_ttl.seconds).holder()
    return holder if holder is not None and holder.alive() else None


def running_pid(settings: Settings, job: str) -> int | None:
    """The pid of the job's live run (on its host: see ``running_holder``), or None."""
    holder = running_holder(settings, job)
    return holder.pid if holder else None


@dataclass
class JobStatus:
    job: str
    running_pid: int | None
    last_batch: int | None = None
    last_batch_time: str | None = None
    watermark: str | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    state_rows: int | None = None
    rows_dropped_by_watermark: int = 0
    lag: dict[str, int] = field(default_factory=dict)  # "topic[partition]" -> records behind

    def lines(self) -> list[str]:
        state = f"running (pid {self.running_pid})" if self.running_pid else "not running"
        if self.last_batch is None:
            return [f"{self.job}: {state}, no batch yet"]
        out = [
            f"{self.job}: {state}, last batch {self.last_batch} at {self.last_batch_time}, "
            f"watermark {self.watermark or '-'}",
            f"  rates: {self.input_rows_per_second or 0:,.1f} rows/s in, "
            f"{self.processed_rows_per_second or 0:,.1f} rows/s processed; state rows "
            f"{self.state_rows if self.state_rows is not None else '-'}; "
            f"dropped late (all batches): {self.rows_dropped_by_watermark}",
        ]
        if self.lag:
            out.append("  kafka lag: " + ", ".join(f"{k}={v}" for k, v in sorted(self.lag.items())))
        return out


def _metrics(settings: Settings):
    from deltalake import DeltaTable

    uri = settings.table_uri("pipeline_metrics")
    if not DeltaTable.is_deltatable(uri):
        return None
    return read_pandas(uri, columns=[
        "job", "batch_id", "watermark", "input_rows_per_second", "processed_rows_per_second",
        "state_rows", "rows_dropped_by_watermark",
    ])


def job_status(settings: Settings, job: str, metrics=None, with_lag: bool = True) -> JobStatus:
    status = JobStatus(job, running_pid(settings, job))
    checkpoint = Checkpoint(settings.checkpoint_uri(job))
    last = checkpoint.last_committed()
    if last is None:
        return status
    offsets = checkpoint.offsets(last)
    status.last_batch = last
    status.last_batch_time = datetime.fromtimestamp(offsets.batch_timestamp_ms / 1000, timezone.utc).isoformat()
    if metrics is not None:
        mine = metrics[metrics.job == job].sort_values("batch_id")
        if len(mine):
            row = mine.iloc[-1]
            status.watermark = None if row.watermark is None else str(row.watermark)
            status.input_rows_per_second = float(row.input_rows_per_second)
            status.processed_rows_per_second = float(row.processed_rows_per_second)
            status.state_rows = int(row.state_rows)
            status.rows_dropped_by_watermark = int(mine.rows_dropped_by_watermark.sum())
    if with_lag and offsets.sources and offsets.sources[0]:
        bootstrap = broker.connection(settings)
        for topic, parts in offsets.sources[0].items():
            ends = kafka_client.offset_bounds(bootstrap, topic, [int(p) for p in parts])
            for p, done in parts.items():
                status.lag[f"{topic}[{p}]"] = max(ends[int(p)][1] - int(done), 0)
    return status


def all_status(settings: Settings, with_lag: bool = True) -> list[JobStatus]:
    metrics = _metrics(settings)
    try:
        if with_lag:
            kafka_client.check_reachable(broker.connection(settings), timeout_s=3)
    except SigflowError:
        with_lag = False  # status must still answer while Kafka is down
    return [job_status(settings, job, metrics, with_lag) for job in JOBS]


def inspect_checkpoint(settings: Settings, job: str) -> list[str]:
    checkpoint = Checkpoint(settings.checkpoint_uri(job))
    if not checkpoint.exists():
        return [f"{job}: no checkpoint at {checkpoint.uri}"]
    committed = set(checkpoint.committed_batches())
    lines = [f"{job}: checkpoint {checkpoint.uri}, app id {checkpoint.app_id(job)}"]
    for batch_id in checkpoint.offset_batches():
        batch = checkpoint.offsets(batch_id)
        watermark = datetime.fromtimestamp(batch.watermark_ms / 1000, timezone.utc).isoformat()
        flag = "committed" if batch_id in committed else "NOT committed (re-runs on restart)"
        lines.append(f"  batch {batch_id}: {flag}; watermark {watermark}; offsets {json.dumps(batch.sources)}")
    return lines


def quarantine_summary(settings: Settings, since: str = "24 hours", samples: int = 3) -> list[str]:
    """What broke the contract lately: counts by reason and by topic partition, and samples."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    from spark_jobs.config import duration_seconds

    uri = settings.table_uri("quarantined_events")
    if not DeltaTable.is_deltatable(uri):
        return ["quarantined_events: no table yet (ingest has not run)"]
    cutoff = datetime.now(timezone.utc).timestamp() - duration_seconds(since, "since")
    recent = read_pandas(uri, where=ds.field("ingest_time") >= datetime.fromtimestamp(cutoff, timezone.utc))
    lines = [f"quarantined in the last {since}: {len(recent)} records"]
    if recent.empty:
        return lines
    for code, group in recent.groupby("reason_code"):
        lines.append(f"  {len(group):6d}  {code}")
        for _, row in group.head(samples).iterrows():
            lines.append(f"            e.g. {row.reason}: {str(row.payload_text)[:100]!r}")
    by_partition = recent.groupby(["topic", "partition"]).size().sort_values(ascending=False)
    lines.append("by topic partition: " + ", ".join(f"{t}[{p}]={n}" for (t, p), n in by_partition.items()))
    return lines
