"""What a consumer's typical query costs on a large table: as the stream leaves it (a file per
micro-batch), after maintenance's compaction (the files merged in the order they were written:
time), and Z-ordered by device and time instead (delta-rs ``optimize.z_order``), the layout
maintenance does not use because of what this measures.

    python -m bench.layout [--rows 10000000] [--devices 1000] [--appends 200] [--tries 3]

device_events_deduplicated of N rows, every device sending every 5 s, written in ``appends``
appends of time-ordered rows (each as a micro-batch writes it). The two reads
docs/consumers.md names, through delta-rs's Arrow dataset as documented (file statistics skip
files whose rows cannot match): one device over an hour, the fleet over an hour. Each read is
timed ``tries`` times after one unmeasured read, in the same order in every state; the files
a read opens and its rows are printed beside the time. Then what compaction and the Z-order
took.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as fs
from deltalake import DeltaTable

from bench.reconcile import EVERY_US, START_US, device_events
from spark_jobs.contracts.tables import DEVICE_EVENTS_DEDUPLICATED
from spark_jobs.runtime.delta.schema import arrow_schema, create_table

HOUR_US = 3_600_000_000
Z_ORDER = ("device_id", "event_time")


def _queries(devices: int, rows: int) -> dict[str, ds.Expression]:
    """A device over an hour, the fleet over an hour, both in the middle of the table's span."""
    span_us = rows // devices * EVERY_US
    start = START_US + span_us // 2
    utc = pa.timestamp("us", tz="UTC")
    hour = (pc.field("event_time") >= pa.scalar(start, utc)) & (pc.field("event_time") < pa.scalar(start + HOUR_US, utc))
    return {"one device, one hour": hour & (pc.field("device_id") == f"d{devices // 3}"),
            "the fleet, one hour": hour}


def _dataset(path: str) -> ds.Dataset:
    # the read docs/consumers.md documents: delta-rs's file list, Arrow's own file system
    return DeltaTable(path).to_pyarrow_dataset(filesystem=fs.SubTreeFileSystem(path, fs.LocalFileSystem()))


def _measure(path: str, queries: dict[str, ds.Expression], tries: int) -> dict[str, tuple[float, int, int]]:
    """Per query: median seconds, files opened, rows returned."""
    figures = {}
    for name, where in queries.items():
        _dataset(path).to_table(filter=where)  # unmeasured: the OS cache holds the same files for every try
        times, rows = [], 0
        for _ in range(tries):
            started = time.perf_counter()
            rows = _dataset(path).to_table(filter=where).num_rows
            times.append(time.perf_counter() - started)
        files = sum(1 for _ in _dataset(path).get_fragments(filter=where))
        figures[name] = (statistics.median(times), files, rows)
    return figures


def _write(path: str, rows: int, devices: int, appends: int) -> None:
    from deltalake import write_deltalake

    create_table(path, DEVICE_EVENTS_DEDUPLICATED, {})
    per_append = rows // appends
    schema = arrow_schema(DEVICE_EVENTS_DEDUPLICATED)
    for n in range(appends):
        frame = device_events(n * per_append, per_append, devices).drop(columns=["ingest_time"])
        write_deltalake(path, pa.Table.from_pandas(frame, schema=schema, preserve_index=False), mode="append")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--devices", type=int, default=1_000)
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--tries", type=int, default=3)
    args = parser.parse_args(argv)
    queries = _queries(args.devices, args.rows)
    with tempfile.TemporaryDirectory(prefix="sigflow-layout-") as work:
        path = str(Path(work, DEVICE_EVENTS_DEDUPLICATED.name))
        started = time.perf_counter()
        _write(path, args.rows, args.devices, args.appends)
        print(f"layout {DEVICE_EVENTS_DEDUPLICATED.name}: {args.rows:,} rows, {args.devices:,} devices, "
              f"{args.appends} appends ({time.perf_counter() - started:.1f} s to write)")
        states = {"as written": _measure(path, queries, args.tries)}
        table = DeltaTable(path)
        started = time.perf_counter()
        table.optimize.compact()
        compacted_s = time.perf_counter() - started
        states["compacted"] = _measure(path, queries, args.tries)
        started = time.perf_counter()
        DeltaTable(path).optimize.z_order(list(Z_ORDER))
        z_ordered_s = time.perf_counter() - started
        states["z-ordered"] = _measure(path, queries, args.tries)
        print(f"  compaction {compacted_s:.1f} s, Z-order by {', '.join(Z_ORDER)} {z_ordered_s:.1f} s "
              f"(medians of {args.tries} reads each)")
        for name in queries:
            print(f"  {name}:")
            for state, figures in states.items():
                seconds, files, rows = figures[name]
                print(f"    {state:<11} {seconds * 1000:>9.1f} ms  {files:>5} files  {rows:>9,} rows")
            written, compacted, z_ordered = (states[state][name][0] for state in states)
            print(f"    compacted / as written {compacted / written:.2f}, z-ordered / compacted {z_ordered / compacted:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
