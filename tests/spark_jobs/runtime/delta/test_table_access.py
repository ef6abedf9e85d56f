"""Reading sigflow's tables outside Spark never takes the process down, in any fresh process."""

import subprocess
import sys
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from spark_jobs.runtime.delta.table_access import count_matching, read_pandas

pytestmark = pytest.mark.slow  # sixteen fresh Python processes

FRESH_PROCESSES = 16

READ_IN_A_FRESH_PROCESS = """
import sys
import pyarrow.dataset as ds
from spark_jobs.runtime.delta.table_access import count_matching, read_pandas
for uri in sys.argv[1:]:  # the whole table is read last: the process ends right after a scan
    rows = count_matching(uri)
    recent = read_pandas(uri, columns=["device_id"], where=ds.field("n") >= 1)
    frame = read_pandas(uri)
    print(uri, len(frame), len(recent), rows, flush=True)
"""


def _small_table(uri: str, appends: int) -> None:
    """A few files of a few rows: the shape that aborted the threaded Arrow scan at exit."""
    start = datetime(2026, 11, 23, 10, 0, tzinfo=timezone.utc)
    for n in range(appends):
        write_deltalake(uri, pa.table({
            "device_id": [f"device-{n}", "device-x"], "session_start": [start, start], "n": [n, n],
        }), mode="append")


def test_reading_tables_in_fresh_processes_never_aborts(tmp_path):
    uris = [str(tmp_path / name) for name in ("sessions", "averages", "alerts")]
    for appends, uri in enumerate(uris, start=2):
        _small_table(uri, appends)
    expected = [f"{uri} {2 * a} {2 * (a - 1)} {2 * a}" for a, uri in enumerate(uris, start=2)]

    for _ in range(FRESH_PROCESSES):
        done = subprocess.run([sys.executable, "-c", READ_IN_A_FRESH_PROCESS, *uris],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-500:]
        assert done.stdout.splitlines() == expected


def test_a_table_not_yet_written_reads_as_empty(tmp_path):
    assert len(read_pandas(str(tmp_path / "none"))) == 0 and count_matching(str(tmp_path / "none")) == 0


def test_a_text_filter_reads_files_a_partial_delete_rewrote(tmp_path):
    """delta-rs rewrites the rows a delete keeps of a file with its text columns as
    string_view; a filter on such a column then met the other files' string and Arrow
    refused it (what a rewind after maintenance's compaction ran into)."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    from spark_jobs.runtime.delta.table_access import read_arrow, scan

    uri = str(tmp_path / "shared")
    write_deltalake(uri, pa.table({"job": ["dedup", "sessions", "dedup"], "batch_id": [1, 1, 2]}), mode="append")
    DeltaTable(uri).delete("batch_id = 2")  # keeps two rows of the file: rewritten
    write_deltalake(uri, pa.table({"job": ["dedup", "sessions"], "batch_id": [3, 3]}), mode="append")
    dedup = ds.field("job") == "dedup"
    assert count_matching(uri, dedup) == 2
    assert sorted(read_arrow(uri, ["batch_id"], dedup).column("batch_id").to_pylist()) == [1, 3]
    assert sorted(n for part in scan(uri, ["batch_id"], dedup) for n in part.column("batch_id").to_pylist()) == [1, 3]
    assert read_arrow(uri, ["batch_id"], ds.field("job") == "nobody").num_rows == 0
