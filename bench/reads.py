"""Which reads of a Delta table end their process cleanly: each read docs/consumers.md names,
run in fresh processes over tables of several shapes, counting the processes that read the
right rows and then aborted at exit (status 134, "terminate called without an active
exception").

    python -m bench.reads [--processes 40] [--rows 1000000]

Shapes (device_events_deduplicated's columns, written by delta-rs): 6 rows in one file; 3,000
rows in 100 files, as the stream leaves a table (a file per micro-batch); ``rows`` rows in 10
files. Reads: delta-rs's ``to_pandas()`` and ``to_pyarrow_table()``, each result dropped as
soon as counted; the same two followed by a garbage collection (``gc.collect()``) before the
process exits; the documented read (delta-rs's file list, Arrow's own file system); polars'
``read_delta``. The processes of a shape run two at a time, the reads taking turns, so that
a busy machine weighs on every read alike.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake
from tqdm import tqdm

from bench.reconcile import device_events
from spark_jobs.contracts.tables import DEVICE_EVENTS_DEDUPLICATED
from spark_jobs.runtime.delta.schema import arrow_schema

ABORTED = 134  # SIGABRT's exit status through a shell; a child killed by it reports -6
READS = {
    "to_pandas()": "rows = len(DeltaTable(path).to_pandas())",
    "to_pyarrow_table()": "rows = DeltaTable(path).to_pyarrow_table().num_rows",
    "to_pyarrow_table(), gc": "rows = DeltaTable(path).to_pyarrow_table().num_rows\ngc.collect()",
    "to_pandas(), gc": "rows = len(DeltaTable(path).to_pandas())\ngc.collect()",
    "Arrow's file system": "rows = DeltaTable(path).to_pyarrow_dataset(\n"
                           "    filesystem=fs.SubTreeFileSystem(path, fs.LocalFileSystem())).to_table().num_rows",
    "polars read_delta": "import polars as pl\nrows = pl.read_delta(path).height",
}
# each read imports only what it uses beside deltalake: polars is imported by its read alone
PROGRAM = "import gc, sys\nimport pyarrow.fs as fs\nfrom deltalake import DeltaTable\npath = sys.argv[1]\n{read}\nprint(rows)\n"


def _write(path: str, rows: int, files: int) -> None:
    schema = arrow_schema(DEVICE_EVENTS_DEDUPLICATED)
    per_file = rows // files
    for n in range(files):
        frame = device_events(n * per_file, per_file, 100).drop(columns=["ingest_time"])
        write_deltalake(path, pa.Table.from_pandas(frame, schema=schema, preserve_index=False), mode="append")


def _run(read: str, path: str) -> int | str:
    """The process's exit status, or what it printed where it read the wrong rows."""
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(read=READS[read]), path],
                          capture_output=True, text=True, timeout=300)
    return done.returncode if done.returncode else done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=40)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    shapes = {"6 rows, 1 file": (6, 1), "3,000 rows, 100 files": (3_000, 100),
              f"{args.rows:,} rows, 10 files": (args.rows, 10)}
    print(f"reads: processes that aborted at exit, of {args.processes} fresh processes per read and shape")
    print(f"  {'':<24}" + "".join(f"{read:>23}" for read in READS))
    with tempfile.TemporaryDirectory(prefix="sigflow-reads-") as work, ThreadPoolExecutor(2) as pool:
        for shape, (rows, files) in shapes.items():
            path = str(Path(work, f"{rows}-{files}"))
            _write(path, rows, files)
            turns = [read for _ in range(args.processes) for read in READS]
            outcomes = Counter()
            statuses = tqdm(pool.map(lambda read: _run(read, path), turns), total=len(turns), desc=shape,
                            unit="process", leave=False)
            for read, status in zip(turns, statuses):
                outcomes[read, "aborted" if status in (ABORTED, -6) else "ok" if status == str(rows) else status] += 1
            unexpected = {key: count for key, count in outcomes.items() if key[1] not in ("aborted", "ok")}
            print(f"  {shape:<24}" + "".join(f"{outcomes[read, 'aborted']:>23}" for read in READS))
            if unexpected:
                print(f"    other outcomes (read, exit status or rows printed): {unexpected}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
