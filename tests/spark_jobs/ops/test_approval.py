"""Which recorded answers let a sigflow_restart plan be applied (the DAG's paths over REST:
tests/dags/test_sigflow_restart.py)."""

import pytest

from spark_jobs.config import load_settings
from spark_jobs.errors import ConfigError
from spark_jobs.ops.restart.approval import refusal

DIGEST = "a" * 64


def answered(choice="Approve", digest=DIGEST, user="alice"):
    return {"chosen_options": [choice], "plan_digest": digest, "params_input": {},
            "responded_by_user": {"id": user, "name": user}}


def test_only_an_approve_of_the_plan_as_it_stands_is_applied():
    assert refusal(answered(), DIGEST, "bob", []) is None
    assert "no answer" in refusal(None, DIGEST, "bob", [])
    assert "no answer" in refusal({}, DIGEST, "bob", [])  # a return value without an answer
    assert "Reject, not Approve" in refusal(answered("Reject"), DIGEST, "bob", [])
    assert "digest aaaaaaaaaaaa) is not the plan now (digest bbbbbbbbbbbb)" in refusal(answered(), "b" * 64, "bob", [])
    assert "digest none" in refusal(answered(digest=None), DIGEST, "bob", [])


def test_with_approvers_set_only_they_approve_and_never_the_requester_alone():
    approvers = ["alice", "carol"]
    assert refusal(answered(user="alice"), DIGEST, "bob", approvers) is None
    assert "mallory answered, who is not in restart_approvers" in refusal(answered(user="mallory"), DIGEST, "bob", approvers)
    assert "alice requested this restart and cannot approve it too" in refusal(answered(user="alice"), DIGEST, "alice", approvers)
    assert refusal(answered(user="alice"), DIGEST, "alice", []) is None  # not set: one person may do both


def test_restart_approvers_are_user_ids_separated_by_commas():
    assert load_settings(env={"SIGFLOW_RESTART_APPROVERS": " alice, carol "}).operations.approvers == ["alice", "carol"]
    assert load_settings(env={}).operations.approvers == []
    with pytest.raises(ConfigError, match="restart_approvers"):
        load_settings(env={"SIGFLOW_RESTART_APPROVERS": "alice;rm -rf"})
