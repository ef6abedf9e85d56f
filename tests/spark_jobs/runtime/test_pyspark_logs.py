"""An error Spark raises with a query context reaches the console once, as the caller says
it: PySpark's own JSON line of it (with the JVM's stack) goes to sigflow's log at debug
level, shown with -v."""

from __future__ import annotations

import logging

import pytest
from pyspark.errors import AnalysisException, NumberFormatException
from pyspark.sql import functions as F

from spark_jobs.runtime import pyspark_logs


def _sigflow_records(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == pyspark_logs.LOGGER]


@pytest.fixture(autouse=True)
def _only_the_capturing_handler(caplog, monkeypatch):
    """sigflow's log here is pytest's capture alone: a handler another test of this worker
    left on the root logger may write to a stream already closed, and logging reports that
    on stderr."""
    monkeypatch.setattr(logging.getLogger(), "handlers", [caplog.handler])


def test_a_handled_spark_error_prints_nothing_of_its_own_on_stderr(spark, capfd, caplog):
    caplog.set_level(logging.INFO)  # the console's level without -v

    with pytest.raises(AnalysisException, match="no_such_column"):
        spark.range(3).select(F.col("no_such_column"))

    assert "no_such_column" not in capfd.readouterr().err
    assert _sigflow_records(caplog) == []


def test_with_verbose_logging_the_error_and_its_traceback_are_a_debug_record(spark, capfd, caplog):
    caplog.set_level(logging.DEBUG)  # -v

    with pytest.raises(NumberFormatException):
        spark.range(1).select(F.lit("not a number").cast("int")).collect()

    assert "not a number" not in capfd.readouterr().err
    records = _sigflow_records(caplog)  # PySpark converts the error and then its cause
    assert records and all(record.levelno == logging.DEBUG for record in records)
    assert "CAST_INVALID_INPUT" in records[0].getMessage() and records[0].exc_info is not None
