"""`make bench` runs end to end at a toy size and prints what the issue fixes, without its
warm-up and state sections: seven of its fifteen job runs. The job tests bound dedup's and
sessions' state; windowed-averages' state is measured only by `make bench` itself. Its speed is not asserted: the figures are for people (docs/benchmarks.md).
In this process, on the session's SparkSession: a JVM of its own would only add its start-up
and warm-up."""

from __future__ import annotations

import re

import pytest

from tests import bench


@pytest.mark.timeout(1500)
def test_bench_ends_with_one_rate_and_ratio_line_per_job_and_quarantines_the_whole_storm(spark, capsys):
    assert bench.main(["--events", "1000", "--storm-events", "300", "--devices", "20",
                       "--latency-rate", "200", "--latency-seconds", "3", "--no-write",
                       "--skip", "warm-up", "state"]) == 0
    out = capsys.readouterr().out
    lines = re.findall(r"^bench (\S+) events_per_s=(\d+) ratio=(\d+\.\d\d) vs_plain=(\d+\.\d\d)$", out, re.M)
    assert [job for job, _, _, _ in lines] == list(bench.JOBS)
    assert all(int(rate) > 0 and float(vs_plain) > 0 for _, rate, _, vs_plain in lines)
    plain = re.findall(r"plain job (\S+): ([\d,]+) events/s", out)
    assert [kind for kind, _ in plain] == list(bench.PLAIN_JOBS)
    storm = re.search(r"storm \(10% malformed\): .* ([\d,]+) quarantined of ([\d,]+) malformed", out)
    assert storm and storm[1] == storm[2] != "0", out
