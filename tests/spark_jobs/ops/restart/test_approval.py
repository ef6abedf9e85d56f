"""Which recorded answers let a sigflow_restart plan be applied (the DAG's paths over REST:
tests/dags/test_sigflow_restart.py)."""

import pytest

from spark_jobs.config import load_settings
from spark_jobs.errors import ConfigError
from spark_jobs.ops.restart.approval import Answer, refusal

DIGEST = "a" * 64


def answered(choice="Approve", user="alice"):
    return Answer([choice], user, user)


def test_only_an_approve_of_the_plan_as_it_stands_is_applied():
    assert refusal(answered(), DIGEST, DIGEST, "bob", [], False) is None
    assert "nobody answered" in refusal(None, DIGEST, DIGEST, "bob", [], False)
    assert "nobody answered" in refusal(Answer([]), DIGEST, DIGEST, "bob", [], False)
    assert "Reject, not Approve" in refusal(answered("Reject"), DIGEST, DIGEST, "bob", [], False)
    assert "digest aaaaaaaaaaaa) is not the plan now (digest bbbbbbbbbbbb)" in refusal(
        answered(), DIGEST, "b" * 64, "bob", [], False)
    assert "digest none" in refusal(answered(), None, DIGEST, "bob", [], False)


def test_with_approvers_set_only_they_approve():
    approvers = ["alice", "carol"]
    assert refusal(answered(user="alice"), DIGEST, DIGEST, "bob", approvers, False) is None
    assert "mallory answered, who is not in restart_approvers" in refusal(
        answered(user="mallory"), DIGEST, DIGEST, "bob", approvers, False)


def test_four_eyes_unless_self_approval_is_on():
    assert "alice requested this restart and cannot approve it too" in refusal(
        answered(user="alice"), DIGEST, DIGEST, "alice", [], False)
    assert "alice requested" in refusal(answered(user="alice"), DIGEST, DIGEST, "alice", ["alice"], False)
    # the requester matches by id or by name: the Airflow CLI's requester is the OS user
    assert "requested" in refusal(Answer(["Approve"], "7", "alice"), DIGEST, DIGEST, "alice", [], False)
    assert "unknown" in refusal(answered(), DIGEST, DIGEST, None, [], False)
    assert refusal(answered(user="alice"), DIGEST, DIGEST, "alice", [], True) is None
    assert load_settings(env={}).operations.restart_self_approval is False


def test_restart_approvers_are_user_ids_separated_by_commas():
    assert load_settings(env={"SIGFLOW_RESTART_APPROVERS": " alice, carol "}).operations.approvers == ["alice", "carol"]
    assert load_settings(env={}).operations.approvers == []
    with pytest.raises(ConfigError, match="restart_approvers"):
        load_settings(env={"SIGFLOW_RESTART_APPROVERS": "alice;rm -rf"})
