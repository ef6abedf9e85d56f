"""How the on-call commands' cost grows with the tables: `sigflow quality run` of
device_events and of device_events_deduplicated (whose event_id must be unique: new ids are
checked against the older rows), each first over every row and then after --new more
events (100,000 by default), which it reads alone; then `sigflow status` and `sigflow
report`. Each runs in a fresh process, on tables of N device events (with the other tables
they read in proportion: a quarantined record and a late one per 100 events, an average
row per 10, a pipeline_metrics row per 1,000, as in a run of `make run`'s traffic). Prints
wall time and the process's peak resident memory for each N.

    python -m bench.scale [--rows 1000000 10000000] [--new 100000] [--keep DIR]

Rows are written with delta-rs in chunks of 1,000,000, no Spark or broker involved.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.runtime.delta.schema import arrow_schema

CHUNK = 1_000_000
# rows of each table per device event
SHARE = {"device_events": 1, "device_events_deduplicated": 1, "quarantined_events": 0.01, "late_events": 0.01,
         "device_signal_averages": 0.1, "pipeline_metrics": 0.001}
CHECKED = ("device_events", "device_events_deduplicated")  # the tables quality runs on
COMMANDS = {
    **{f"quality {table} first": ["quality", "run", table] for table in CHECKED},
    **{f"quality {table} new": ["quality", "run", table] for table in CHECKED},
    "status": ["status"], "report": ["report"],
}
START_US = 1_795_000_000_000_000  # event times from here, one per 10 ms


def _column(field: pa.Field, start: int, rows: int, rng: np.random.Generator) -> pa.Array:
    """Plausible values of one column for rows start..start+rows (unique ids, times in order)."""
    index = np.arange(start, start + rows)
    kind, name = field.type, field.name
    if pa.types.is_timestamp(kind):
        return pa.array(START_US + index * 10_000, type=kind)
    if pa.types.is_floating(kind):
        return pa.array(rng.normal(50, 15, rows).round(3), type=kind)
    if pa.types.is_integer(kind):
        return pa.array(index % (2**31 - 1), type=kind)
    if pa.types.is_map(kind):
        return pa.array([[] for _ in range(rows)], type=kind)
    if pa.types.is_binary(kind):
        return pa.array([b"{}"] * rows, type=kind)
    if name in ("event_id", "alert_id"):
        return pa.array(np.char.add("evt-", index.astype(str)), type=kind)
    if name == "device_id":
        return pa.array(np.char.add("device-", (index % 1000).astype(str)), type=kind)
    choices = {"window_kind": ["tumbling", "sliding"], "job": ["ingest", "dedup", "windowed-averages"],
               "reason_code": ["bad_json", "bad_time"], "missed": ["watermark"], "record_kind": ["event", "alert"], "topic": ["device-events"],
               "progress_json": ["{}"]}
    values = choices.get(name, [name])
    return pa.array(np.array(values)[index % len(values)], type=kind)


def write_tables(data_dir: Path, events: int, first: int = 0, tables: dict[str, float] = SHARE) -> None:
    """Events first..first+events, and the other tables' rows in proportion."""
    rng = np.random.default_rng(7 + first)
    for name, share in tables.items():
        schema, total = arrow_schema(ALL_TABLES[name]), int(events * share)
        uri = str(data_dir / "delta" / name)
        for start in range(int(first * share), int(first * share) + total, CHUNK):
            rows = min(CHUNK, int(first * share) + total - start)
            chunk = pa.table([_column(f, start, rows, rng) for f in schema], schema=schema)
            write_deltalake(uri, chunk, mode="append")


# Runs the command and prints its peak RSS in KB. A child forked from this process, which
# holds the tables it just wrote, starts with this process's pages counted in its own peak
# (measured: three commands all "peaked" at the bench's 734 MB); a child of this small
# launcher does not.
LAUNCHER = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")


def measure(data_dir: Path, command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MB of one fresh `sigflow` process, which must succeed
    (quality's freshness warning aside: the generated rows are old)."""
    env = {**os.environ, "SIGFLOW_DATA_DIR": str(data_dir), "SIGFLOW_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9"}
    began = time.perf_counter()
    launched = subprocess.run([sys.executable, "-c", LAUNCHER, sys.executable, "-m", "spark_jobs.cli", *command],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seconds = time.perf_counter() - began
    if launched.returncode != 0:
        raise SystemExit(f"`sigflow {' '.join(command)}` failed on {data_dir}; run it there to see why")
    return seconds, int(launched.stdout.split()[-1]) / 1024


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--new", type=int, default=100_000, help="events added before quality's second run")
    parser.add_argument("--keep", help="write the tables under this directory and keep them")
    args = parser.parse_args(argv)
    root = Path(args.keep or tempfile.mkdtemp(prefix="sigflow-scale-"))
    figures: dict[str, dict[int, tuple[float, float]]] = {name: {} for name in COMMANDS}
    for events in args.rows:
        data_dir = root / f"events-{events}"
        began = time.perf_counter()
        write_tables(data_dir, events)
        print(f"tables of {events:,} device events written in {time.perf_counter() - began:.0f} s", flush=True)
        for name, command in COMMANDS.items():
            if name == f"quality {CHECKED[0]} new":
                write_tables(data_dir, args.new, first=events, tables=dict.fromkeys(CHECKED, 1))
            figures[name][events] = measure(data_dir, command)
            seconds, mb = figures[name][events]
            print(f"  {name}: {seconds:.1f} s, peak {mb:,.0f} MB", flush=True)
    smallest, largest = min(args.rows), max(args.rows)
    for name, by_size in figures.items():
        (t0, m0), (t1, m1) = by_size[smallest], by_size[largest]
        label = name.replace("quality device_events_deduplicated", "quality_dedup").replace("device_events ", "")
        print(f"scale {label.replace(' ', '_')} rows={smallest}->{largest} seconds={t0:.1f}->{t1:.1f} "
              f"peak_mb={m0:.0f}->{m1:.0f} memory_growth={m1 / m0:.2f}")
    if not args.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
