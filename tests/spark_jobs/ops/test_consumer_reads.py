"""docs/consumers.md's delta-rs and polars examples, run as written in fresh processes over
every table a job wrote: each process reads the right rows and ends with exit status 0. The
default read (``to_pandas()`` through delta-rs's Python file system handler) aborts at exit in some
processes (docs/streaming-facts.md); the documented one must never."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

from spark_jobs.jobs import JOB_TABLES
from spark_jobs.runtime.delta.table_access import count_rows
from tests.helpers import REPO, run_job, send, single_partition
from tests.oracle import Event

PROCESSES = 10


def _examples() -> list[str]:
    """The delta-rs and polars blocks of docs/consumers.md that read a table once or follow its
    feed, each as a program over the tables named on its command line that prints the rows it read
    of each."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "consumers.md").read_text(), re.S)
    programs = []
    readers = (b for b in blocks if ("deltalake" in b or "polars" in b) and ("frame =" in b or "load_cdf" in b))
    for block in readers:
        body = re.sub(r'^path = .*$', "", block, flags=re.M).replace('DeltaTable("data/delta/device_events_deduplicated")',
                                                                      "DeltaTable(path)")
        result = "frame" if "frame =" in body else "changes"
        programs.append("import sys\nfor path in sys.argv[1:]:\n    next_version = 0  # a follower that starts now\n"
                        + textwrap.indent(body, "    ") + f"    print(len({result}))\n")
    return programs


def test_the_documented_reads_end_cleanly_in_every_fresh_process(spark, settings):
    s = single_partition(settings)
    send(s, [Event(f"e{n}", f"d{n % 3}", 1_795_000_000_000 + n * 1000, float(n)) for n in range(30)])
    run_job(spark, s, "ingest")
    uris = [s.table_uri(spec.name) for spec in JOB_TABLES["ingest"]]
    expected = [str(count_rows(uri)) for uri in uris]
    programs = _examples()
    assert len(programs) == 3  # read once with delta-rs, with polars; follow the feed
    for program in programs:
        for _ in range(PROCESSES):
            done = subprocess.run([sys.executable, "-c", program, *uris], capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr[-500:]
            assert done.stdout.split() == expected


def test_the_documented_table_status_read_gives_each_table_and_writing_job_its_newest_row(spark, settings):
    s = single_partition(settings)
    send(s, [Event(f"e{n}", f"d{n % 3}", 1_795_000_000_000 + n * 1000, float(n)) for n in range(10)])
    run_job(spark, s, "ingest")
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "consumers.md").read_text(), re.S)
    (block,) = [b for b in blocks if "table_status" in b]
    program = block.replace('"data/delta/table_status"', repr(s.table_uri("table_status"))) + "print(sorted(current.index))\n"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.strip() == str(sorted((spec.name, "ingest") for spec in JOB_TABLES["ingest"]))


def test_the_documented_follower_loop_reads_each_change_once_and_nothing_when_nothing_is_new(spark, settings):
    """The delta-rs loop of docs/consumers.md, run as written again and again by one follower:
    the first run reads every row, a run with nothing new committed reads nothing (delta-rs
    refuses a change feed that starts past the table's version), the next one only the rows
    committed since."""
    s = single_partition(settings)
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "consumers.md").read_text(), re.S)
    (loop,) = [b for b in blocks if "deltalake" in b and "load_cdf" in b]
    path = s.table_uri("device_events_deduplicated")
    follower = {"next_version": 0}

    def run_loop() -> int:
        follower.pop("changes", None)
        exec(loop.replace('"data/delta/device_events_deduplicated"', repr(path)), follower)
        return follower["changes"].num_rows if "changes" in follower else 0

    send(s, [Event(f"a{n}", "d1", 1_795_000_000_000 + n * 1000, float(n)) for n in range(12)])
    run_job(spark, s, "dedup")
    assert run_loop() == 12
    assert run_loop() == 0  # nothing new
    send(s, [Event(f"b{n}", "d2", 1_795_000_100_000 + n * 1000, float(n)) for n in range(5)])
    run_job(spark, s, "dedup")
    assert run_loop() == 5 and run_loop() == 0
