"""wait_until: the probe's first true answer, None at the deadline or when the waited-on
thing died, "not yet" exceptions retried and others raised at once."""

import time

import pytest

from spark_jobs.runtime.waiting import wait_until


def test_returns_the_first_true_answer():
    answers = iter([0, None, "", "ready", "later"])
    assert wait_until(lambda: next(answers), timeout_s=5, every_s=0.01) == "ready"


def test_gives_none_once_the_deadline_passes():
    calls = []
    began = time.monotonic()
    assert wait_until(lambda: calls.append(1), timeout_s=0.2, every_s=0.05) is None
    assert time.monotonic() - began >= 0.2 and len(calls) >= 3


def test_ends_early_when_told_to_give_up():
    calls = []
    assert wait_until(lambda: calls.append(1), timeout_s=60, every_s=0.01, give_up=lambda: len(calls) >= 2) is None
    assert len(calls) == 2


def test_not_yet_exceptions_are_retried_and_others_raise_at_once():
    attempts = iter([OSError("refused"), OSError("refused"), "up"])

    def probe():
        answer = next(attempts)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert wait_until(probe, timeout_s=5, every_s=0.01, not_yet=(OSError,)) == "up"
    with pytest.raises(KeyError):
        wait_until(lambda: {}["missing"], timeout_s=5, every_s=0.01, not_yet=(OSError,))


def test_reraise_gives_the_last_probes_own_error_at_the_deadline():
    def refused():
        raise ConnectionRefusedError("still refused")

    with pytest.raises(ConnectionRefusedError, match="still refused"):
        wait_until(refused, timeout_s=0.1, every_s=0.02, not_yet=(OSError,), reraise=True)
    assert wait_until(refused, timeout_s=0.1, every_s=0.02, not_yet=(OSError,)) is None
