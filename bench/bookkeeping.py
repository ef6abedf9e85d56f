"""What a job's own bookkeeping costs per batch as its tables' logs grow: each batch's
pipeline_metrics row and its table_status rows (five, one per table, as ingest writes them)
appended by the driver as the metrics recorder appends them (DeltaSink.append_unwritten),
on tables checkpointed every 100 commits (sigflow's interval for the tables Spark writes) and
every 10 (the tables only drivers commit to), one after the other in each try. Prints the CPU
(every thread of the process: delta-rs' included) per batch over the first and the last 50
batches, and over all of them.

    python -m bench.bookkeeping [--batches 600] [--tries 2]

No Spark or broker: the appends are the driver's own, through delta-rs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from operator import itemgetter
from pathlib import Path

from spark_jobs.config import load_settings
from spark_jobs.contracts.tables import (
    CHECKPOINT_INTERVAL,
    DRIVER_CHECKPOINT_INTERVAL,
    PIPELINE_METRICS,
    TABLE_STATUS,
)
from spark_jobs.runtime.delta.commit_info import CommitInfo
from spark_jobs.runtime.delta.schema import create_table
from spark_jobs.runtime.delta.sink import DeltaSink

JOB, APP_ID, CHECKPOINT_ID = "ingest", "bench-app", "bench-checkpoint"
TABLES = ("device_events_raw", "device_events", "device_alerts", "quarantined_events", "device_status")
PROGRESS_JSON = "{" + ", ".join(f'"field{i}": {i}' for i in range(300)) + "}"  # about Spark's 3 KB a batch
EDGE = 50  # batches at each end whose CPU is shown


def _batch_rows(batch: int) -> tuple[list[dict], list[dict]]:
    now = datetime.now(timezone.utc)
    metrics = [{"job": JOB, "batch_id": batch, "batch_time": now, "input_rows": 25_000, "output_rows": 25_000,
                "duration_ms": 10_000, "progress_json": PROGRESS_JSON, "checkpoint_id": CHECKPOINT_ID}]
    status = [{"table_name": table, "job": JOB, "checkpoint_id": CHECKPOINT_ID, "batch_id": batch,
               "batch_time": now, "rows_written": 25_000, "recorded_at": now} for table in TABLES]
    return metrics, status


def run(interval: int, batches: int) -> list[float]:
    """The CPU seconds of each batch's two appends, on fresh tables at ``interval``."""
    with tempfile.TemporaryDirectory(prefix="sigflow-bench-bookkeeping-") as data:
        settings = load_settings(env={}, overrides={"data_dir": data})
        sink = DeltaSink(None, settings)
        for spec in (PIPELINE_METRICS, TABLE_STATUS):
            create_table(sink.uri(spec), spec, {"delta.checkpointInterval": str(interval)})
        costs = []
        for batch in range(batches):
            metrics, status = _batch_rows(batch)
            began = time.process_time()
            sink.append_unwritten(metrics, PIPELINE_METRICS, APP_ID, CommitInfo(job=JOB), itemgetter("batch_id"))
            sink.append_unwritten(status, TABLE_STATUS, APP_ID, CommitInfo(job=JOB), itemgetter("batch_id"))
            costs.append(time.process_time() - began)
        checkpoints = len(list((Path(sink.uri(TABLE_STATUS)) / "_delta_log").glob("*.checkpoint.parquet")))
    print(f"bookkeeping interval={interval}: first {EDGE} batches {_ms(costs[:EDGE])} ms a batch, last {EDGE}"
          f" {_ms(costs[-EDGE:])}, all {batches} {sum(costs):.1f} CPU-s; table_status checkpoints: {checkpoints}",
          flush=True)
    return costs


def _ms(costs: list[float]) -> str:
    return f"{1000 * sum(costs) / len(costs):.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=600)
    parser.add_argument("--tries", type=int, default=2)
    args = parser.parse_args(argv)
    if args.batches < 2 * EDGE:
        parser.error(f"--batches must be at least {2 * EDGE}: the first and the last {EDGE} are shown")
    intervals = (CHECKPOINT_INTERVAL, DRIVER_CHECKPOINT_INTERVAL)
    run(intervals[0], EDGE)  # warm-up: delta-rs' and Arrow's first calls
    totals: dict[int, list[float]] = {interval: [] for interval in intervals}
    for attempt in range(args.tries):
        for interval in intervals if attempt % 2 == 0 else reversed(intervals):
            totals[interval].append(sum(run(interval, args.batches)))
    medians = {interval: statistics.median(values) for interval, values in totals.items()}
    print(f"bookkeeping: {args.batches} batches' appends, median of {args.tries}: "
          + ", ".join(f"{medians[interval]:.1f} CPU-s at interval {interval}" for interval in intervals)
          + f" ({medians[intervals[1]] / medians[intervals[0]]:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
