"""A command's failure reaches the console as one line of what failed and one of what to
do; a traceback only with -v."""

from __future__ import annotations

import logging

import pytest

from spark_jobs.cli import observe
from tests.helpers import sigflow_here


def _failing(args):
    raise ValueError("the location holds files but no table\n\tat org.apache.spark.SomeFrame(Some.scala:1)")


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "-v"])
def test_a_failure_nothing_explains_is_one_line_and_its_traceback_is_behind_v(monkeypatch, capsys, verbose):
    monkeypatch.setattr(observe, "cmd_report", _failing)

    code = sigflow_here(["-v", "report"] if verbose else ["report"])

    err = capsys.readouterr().err
    assert code == 2
    assert "sigflow: error: ValueError: the location holds files but no table\n" in err
    assert "`sigflow -v` shows its traceback" in err
    assert ("Traceback (most recent call last)" in err) == verbose
    assert ("SomeFrame" in err) == verbose  # the error's further lines: with the traceback only


def test_a_command_run_in_the_tests_process_leaves_logging_as_it_found_it(monkeypatch):
    """`main` sets logging up as for a process of its own: with -v, DEBUG everywhere and a
    handler on the stderr the test captured, closed after it. Left so, every later test of
    the worker captured each library's records, each an error trace of its own."""
    monkeypatch.setattr(observe, "cmd_report", _failing)
    root, kafka = logging.getLogger(), logging.getLogger("kafka")
    found = (root.level, root.handlers[:], kafka.level, kafka.propagate)

    assert sigflow_here(["-v", "report"]) == 2

    assert (root.level, root.handlers[:], kafka.level, kafka.propagate) == found
