"""What the jobs computing from readings keep in their events' dedup state: each event's key,
time and signal only. Spark prunes the columns nothing after the dedup reads (extras, Kafka
coordinates), so they are never computed nor stored (docs/benchmarks.md). A change that
reads one of them after the dedup would change the state's layout, which an old checkpoint
cannot be resumed with (its job's ``state_format``): this fails first."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from spark_jobs.jobs.registry import get_job

READINGS = {"device_id", "event_id", "event_time", "signal"}


def _events_dedup_input(spark, settings, job: str) -> set[str]:
    """The columns of the projection under the job's events dedup (keyed by device and id),
    from its physical plan over a stream shaped like the Kafka source's records."""
    records = spark.readStream.format("rate").load().selectExpr(
        "CAST(value AS STRING) AS key", "CAST(CAST(value AS STRING) AS BINARY) AS value",
        f"'{settings.streaming.events_topic}' AS topic", "0 AS partition", "value AS offset", "timestamp",
        "0 AS timestampType")
    plan = io.StringIO()
    with contextlib.redirect_stdout(plan):
        get_job(job).build(settings.streaming, records).explain("extended")
    physical = plan.getvalue().split("== Physical Plan ==")[1].splitlines()
    dedup = next(i for i, line in enumerate(physical)
                 if re.search(r"StreamingDeduplicateWithinWatermark \[device_id#\d+, event_id#\d+\]", line))
    below = next(line for line in physical[dedup + 1:] if "Project [" in line)
    return {re.sub(r"#\d+L?$", "", column.strip().split(" AS ")[-1])
            for column in below.split("Project [", 1)[1].rsplit("]", 1)[0].split(",")}


@pytest.mark.parametrize("job", ["windowed-averages", "sessions", "fleet-rollup", "alert-join"])
def test_the_events_dedup_of_a_job_computing_from_readings_holds_key_time_and_signal_only(spark, settings, job):
    assert _events_dedup_input(spark, settings, job) == READINGS


def test_the_dedup_job_keeps_extras_and_kafka_coordinates_it_writes(spark, settings):
    assert _events_dedup_input(spark, settings, "dedup") >= READINGS | {"extras", "topic", "partition", "offset"}
