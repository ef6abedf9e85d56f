"""docs/adding-a-job.md, followed: its code blocks run in its order, and the job they make
runs on a real broker, Spark and Delta, its table created by deploy, documented, checked by
Great Expectations and filled as its rule says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.config import StreamingSettings
from spark_jobs.contracts import tables
from spark_jobs.jobs import JOB_TABLES
from spark_jobs.jobs.base import BatchContext, StreamingJob
from spark_jobs.jobs.event_time import valid_events
from spark_jobs.jobs.registry import JOBS, _by_name
from spark_jobs.ops import deploy, quality, table_docs
from tests.helpers import at, run_job, send, single_partition, table
from tests.oracle import Event

PAGE = (Path(__file__).resolve().parent.parent / "docs" / "adding-a-job.md").read_text()


def _followed() -> dict:
    """The page's code blocks run in order, where its steps place them: the table among the
    declarations, the job with what a job module imports, the names in copies of the two lists."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE, re.S)
    assert len(blocks) == 3, "the page has a block per step: the table, the job, its names"
    names = {**vars(tables), "F": F, "DataFrame": DataFrame, "StreamingSettings": StreamingSettings,
             "BatchContext": BatchContext, "StreamingJob": StreamingJob, "valid_events": valid_events,
             "JOB_TABLES": dict(JOB_TABLES), "JOBS": dict(JOBS)}
    for block in blocks:
        exec(block, names)
    return names


def test_a_job_added_as_the_page_says_is_created_documented_checked_and_filled_by_its_rule(
        spark, settings, monkeypatch):
    followed = _followed()
    spec, job = followed["HIGH_SIGNALS"], followed["JOBS"]["high-signals"]
    assert followed["JOB_TABLES"]["high-signals"] == job.tables == (spec,)
    monkeypatch.setitem(tables.ALL_TABLES, spec.name, spec)  # a declaration in contracts/tables.py is in it

    assert f"table {spec.name}: created" in deploy.ensure_tables(settings)
    assert f"## `{spec.name}`" in table_docs.markdown()

    s = single_partition(settings)
    first = [Event("a", "d1", at(9, 0), 95.0), Event("b", "d1", at(9, 1), 20.0), Event("c", "d2", at(9, 2), 91.5)]
    send(s, first)
    run_job(spark, s, job)
    later = [Event("c", "d2", at(9, 2), 91.5), Event("d", "d2", at(9, 3), 90.0), Event("e", "d3", at(9, 4), 99.0)]
    send(s, later)  # c re-sent: a Kafka record of its own, so a row of its own
    run_job(spark, s, job)  # a restart from the checkpoint

    rows = table(s, spec.name)
    expected = sorted((e.event_id, e.signal) for e in first + later if e.signal > 90)
    assert sorted(zip(rows.event_id, rows.signal)) == expected
    assert rows.batch_id.nunique() == 2 and rows.checkpoint_id.nunique() == 1  # written_by's stamps

    report = quality.run(s, [spec.name])[0]
    assert report.failed_critical == [] and len(report.outcomes) >= 4


def test_a_job_named_in_one_list_and_not_the_other_fails_the_registry_naming_both():
    with pytest.raises(RuntimeError, match="registry.py.*__init__.py.*named in both"):
        _by_name(("ingest", "high-signals"), (JOBS["ingest"],))
