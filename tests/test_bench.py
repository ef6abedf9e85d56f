"""`make bench` runs end to end at a toy size and prints what the issue fixes. Its speed is
not asserted: the figures are for people (docs/benchmarks.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench import JOBS

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(1800)
def test_bench_ends_with_one_rate_and_ratio_line_per_job_and_quarantines_the_whole_storm():
    result = subprocess.run(
        [sys.executable, "-m", "tests.bench", "--events", "2000", "--storm-events", "500",
         "--devices", "20", "--latency-rate", "200", "--latency-seconds", "3", "--no-write"],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,  # its own broker and JVM, beside the suite
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = re.findall(r"^bench (\S+) events_per_s=(\d+) ratio=(\d+\.\d\d)$", result.stdout, re.M)
    assert [job for job, _, _ in lines] == list(JOBS)
    assert all(int(rate) > 0 for _, rate, _ in lines)
    storm = re.search(r"storm \(10% malformed\): .* ([\d,]+) quarantined of ([\d,]+) malformed", result.stdout)
    assert storm and storm[1] == storm[2] != "0", result.stdout
