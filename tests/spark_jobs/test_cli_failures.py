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


def test_a_command_run_in_the_tests_process_leaves_logging_to_the_next_test():
    """Runs after the -v case above (a file's tests run in order, on one worker): that
    command's DEBUG levels and its handler on a stderr since closed are gone, so this
    worker's later tests do not capture every library's chatter, each record an error trace."""
    root = logging.getLogger()
    assert root.level == logging.WARNING
    assert logging.getLogger("kafka").getEffectiveLevel() > logging.DEBUG
    assert not [h for h in root.handlers if getattr(getattr(h, "stream", None), "closed", False)]
