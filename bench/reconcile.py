"""What `sigflow reconcile` costs as the tables grow: device_events of N events (1,000
devices by default, one event each every 5 s), 1% of them late for windowed-averages (in
late_events, missing from device_signal_averages, which holds the stream's windows over the
others), and one reconcile of windowed-averages in this process's Spark session. Then the
same number of late events as the smallest N, in each larger table: what the cost follows.

    python -m bench.reconcile [--rows 1000000 10000000] [--devices 1000] [--keep DIR]

The tables are written with delta-rs and the two checkpoints by hand (the job's and
ingest's last committed batch), no broker involved. One smaller reconcile warms the session
first, unmeasured. Prints per N: late events, rows corrected, seconds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from deltalake import write_deltalake

from spark_jobs.config import load_settings
from spark_jobs.contracts.tables import (
    DEVICE_EVENTS,
    DEVICE_SIGNAL_AVERAGES,
    LATE_EVENTS,
)
from spark_jobs.runtime.delta.schema import arrow_schema, create_table
from tests.helpers import committed_checkpoint

DEVICES = 1_000
EVERY_US = 5_000_000
START_US = 1_795_000_000_000_000 - 1_795_000_000_000_000 % 300_000_000  # on a window's start
CHUNK = 1_000_000
JOB = "windowed-averages"
TUMBLING_US, SLIDING_US = 300_000_000, 600_000_000


def device_events(start: int, rows: int, devices: int) -> pd.DataFrame:
    index = np.arange(start, start + rows)
    times = START_US + (index // devices) * EVERY_US
    stamp = pd.to_datetime(times, unit="us", utc=True)
    return pd.DataFrame({
        "event_id": np.char.add("e", index.astype(str)), "device_id": np.char.add("d", (index % devices).astype(str)),
        "event_time": stamp, "signal": np.round(50 + 15 * np.sin(index), 3), "extras": [[] for _ in range(rows)],
        "topic": "device-events", "partition": np.int32(0), "offset": index, "kafka_timestamp": stamp,
        "ingest_time": stamp, "checkpoint_id": "bench", "batch_id": index // CHUNK,
    })


def _write(uri: str, spec, frame: pd.DataFrame) -> None:
    write_deltalake(uri, pa.Table.from_pandas(frame, schema=arrow_schema(spec), preserve_index=False), mode="append")


def _late(frame: pd.DataFrame, every: int) -> pd.Series:
    """One event in ``every``, spread over devices and times (a multiplicative hash of the offset)."""
    return (frame["offset"] * 2_654_435_761) % 4_294_967_296 % every == 7


def _windows(on_time: pd.DataFrame) -> pd.DataFrame:
    """The stream's device_signal_averages over the on-time events: tumbling panes, and the
    sliding windows merged from them."""
    micros = on_time.event_time.astype("int64") // 1000
    pane = on_time.assign(start=micros - micros % TUMBLING_US).groupby(["device_id", "start"]).signal.agg(
        ["sum", "count", "min", "max"]).reset_index()
    frames = [pane.assign(kind="tumbling", end=pane.start + TUMBLING_US)]
    for shift in (0, TUMBLING_US):  # each pane is in the sliding window starting at it and the one before
        frames.append(pane.assign(kind="sliding", start=pane.start - shift))
    merged = pd.concat([frames[0], pd.concat(frames[1:]).groupby(["device_id", "start"]).agg(
        {"sum": "sum", "count": "sum", "min": "min", "max": "max"}).reset_index().assign(
        kind="sliding", end=lambda f: f.start + SLIDING_US)])
    return pd.DataFrame({
        "device_id": merged.device_id, "window_start": pd.to_datetime(merged.start, unit="us", utc=True),
        "window_end": pd.to_datetime(merged.end, unit="us", utc=True), "window_kind": merged.kind,
        "avg_signal": merged["sum"] / merged["count"], "min_signal": merged["min"], "max_signal": merged["max"],
        "event_count": merged["count"].astype("int64"), "checkpoint_id": "bench", "batch_id": 0,
        "revision": np.int32(0), "corrected_at": pd.Series(pd.NaT, index=merged.index, dtype="datetime64[us, UTC]"),
    })


def build(data_dir: Path, rows: int, late_every: int, devices: int = DEVICES) -> tuple:
    settings = load_settings(env={}, overrides={"data_dir": str(data_dir)})
    for spec in (DEVICE_EVENTS, LATE_EVENTS, DEVICE_SIGNAL_AVERAGES):
        create_table(settings.table_uri(spec.name), spec)
    last_us = START_US + ((rows - 1) // devices) * EVERY_US
    watermark_us = last_us - 600_000_000  # 10 minutes behind the newest event
    windows, late_rows = [], 0
    for start in range(0, rows, CHUNK):
        frame = device_events(start, min(CHUNK, rows - start), devices)
        _write(settings.table_uri(DEVICE_EVENTS.name), DEVICE_EVENTS, frame)
        late = frame[_late(frame, late_every)]
        late_rows += len(late)
        _write(settings.table_uri(LATE_EVENTS.name), LATE_EVENTS, pd.DataFrame({
            "job": JOB, "record_kind": "event", "event_id": late.event_id, "device_id": late.device_id, "event_time": late.event_time,
            "signal": late.signal, "missed": "event time at or behind the watermark",
            "watermark": late.event_time + pd.Timedelta(minutes=30), "batch_id": 0, "topic": late.topic,
            "partition": late.partition, "offset": late.offset, "checkpoint_id": "bench"}))
        windows.append(frame[~_late(frame, late_every)][["device_id", "event_time", "signal"]])
    on_time = pd.concat(windows)
    stream = _windows(on_time)
    stream = stream[stream.window_end.astype("int64") // 1000 <= watermark_us]
    _write(settings.table_uri(DEVICE_SIGNAL_AVERAGES.name), DEVICE_SIGNAL_AVERAGES, stream)
    for job in (JOB, "ingest"):
        committed_checkpoint(settings, job, rows, watermark_us // 1000)
    return settings, late_rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--devices", type=int, default=DEVICES)
    parser.add_argument("--keep", help="build the tables under this folder and keep them")
    args = parser.parse_args(argv)
    from spark_jobs.ops import reconcile
    from spark_jobs.runtime.spark import get_spark

    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sigflow-reconcile-"))
    # Warm-up, not measured: one reconcile of a table a tenth of the smallest, so the first
    # measured size does not pay the session's first plans and the JIT alone.
    warm_rows = max(min(args.rows) // 10, 1_000)
    settings, _ = build(base / "warm-up", warm_rows, 100, max(1, args.devices // 10))
    spark = get_spark(settings, "sigflow-bench-reconcile")
    reconcile.run(spark, settings, [JOB])
    smallest_late = None
    for rows in sorted(args.rows):
        for share, every in (("1%", 100), ("fixed", None)):
            if share == "fixed" and (smallest_late is None or rows == min(args.rows)):
                continue
            every = every or rows // smallest_late
            settings, late = build(base / f"events-{rows}-{share.replace('%', 'pct')}", rows, every, args.devices)
            smallest_late = smallest_late or late
            started = time.perf_counter()
            (done,) = reconcile.run(spark, settings, [JOB]).jobs
            seconds = time.perf_counter() - started
            corrected = sum(c.rows for c in done.corrected.values())
            print(f"reconcile rows={rows} late={late} ({share}) counted={done.counted} "
                  f"rows_corrected={corrected} seconds={seconds:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
