"""One run's batch for the fence tests: five deduplicated events whose rows pass a gate (a
file) only once the test opens it, so a write can be held with its Delta transaction begun."""

from __future__ import annotations

import os
import time
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.contracts.tables import DEVICE_EVENTS_DEDUPLICATED as SPEC
from spark_jobs.runtime.delta.commit_info import CommitInfo

ROWS = 5
INFO = CommitInfo(job="dedup", checkpoint_id="cp", app_id="app", batch_id=7, watermark_ms=0, kafka_end_offsets={})


def batch_rows(spark: SparkSession, started: str, gate: str) -> DataFrame:
    """The batch's rows; reading them touches ``started`` (the write's transaction began before
    its rows are read), then waits for ``gate`` to exist."""
    def held(event_id):  # no type hints: Spark would read them as a pandas UDF's and warn
        open(started, "a").close()
        while not os.path.exists(gate):
            time.sleep(0.05)
        return event_id

    rows = [(f"e{i}", "d1", datetime(2026, 1, 1, 0, 0, i), float(i), {}, "t", 0, i, datetime(2026, 1, 1), "cp",
             INFO.batch_id) for i in range(ROWS)]
    frame = spark.createDataFrame(rows, SPEC.schema).coalesce(1)
    return frame.withColumn("event_id", F.udf(held)("event_id"))


def late_rows() -> list[tuple]:
    """The batch's late events, as a job's late-events step collects them (LATE_EVENTS' columns)."""
    return [("dedup", "event", f"e{i}", "d1", datetime(2026, 1, 1, 0, 0, i), float(i), "late",
             datetime(2026, 1, 1, 0, 1), INFO.batch_id, "t", 0, i, "cp") for i in range(ROWS)]
