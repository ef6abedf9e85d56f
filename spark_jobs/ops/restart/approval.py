"""Whether a person's answer to a sigflow_restart approval lets its plan be applied.

The approval page is made by the waiting task itself from a plan it makes then (never from
another task's XCom, which whoever may trigger a run may also edit), and the digest of that
page, which holds the plan's own digest, travels with the waiting task (its resume
arguments). The answer is read from Airflow's own record of the human response, which only
the response endpoint writes, with its permission checks: who answered, what and when. The
plan is applied only when that answer is Approve, the page made again from the plan as it
stands now has the digest approved, and the answer comes from someone allowed to give it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from spark_jobs.ops.restart.plan import Plan

APPROVE = "Approve"


@dataclass(frozen=True)
class Answer:
    """Airflow's record of the response to one approval (its HITL detail)."""

    chosen_options: list[str]
    responder_id: str | None = None
    responder_name: str | None = None
    responded_at: datetime | None = None

    def responder(self) -> set[str]:
        return {name for name in (self.responder_id, self.responder_name) if name}

    def who(self) -> str:
        return self.responder_name or self.responder_id or "nobody"


def page(plan: Plan) -> str:
    """What the approval page shows: the plan, and its digest."""
    return f"{plan.markdown()}\n\nPlan digest: `{plan.digest()}`"


def page_digest(text: str) -> str:
    """What an approval binds to: the page shown, which holds the plan's digest, so neither
    the plan nor the words shown for it can change after the page was made."""
    return hashlib.sha256(text.encode()).hexdigest()


def refusal(answer: Answer | None, approved_digest: str | None, digest_now: str, requester: str | None,
            approvers: list[str], self_approval: bool) -> str | None:
    """Why this answer does not allow applying the plan whose page now has ``digest_now``, or None.

    ``answer``: Airflow's record of the response (None when nobody answered: a task marked
    success by hand); ``approved_digest``: the digest of the page the waiting task showed;
    ``requester``: who triggered the restart; ``approvers``: ``restart_approvers``;
    ``self_approval``: ``restart_self_approval``."""
    if answer is None or not answer.chosen_options:
        return "nobody answered the approval (a task marked success is not an approval)"
    if answer.chosen_options != [APPROVE]:
        return f"the answer recorded was {', '.join(answer.chosen_options)}, not {APPROVE}"
    approved = approved_digest or "none"
    if approved != digest_now:
        return (f"the plan approved (digest {approved[:12]}) is not the plan now (digest {digest_now[:12]}): "
                "the state moved after it was shown")
    if approvers and not answer.responder() & set(approvers):
        return f"{answer.who()} answered, who is not in restart_approvers"
    if not self_approval:
        if not requester:
            return ("who triggered this restart is unknown, so the approval cannot be told apart from "
                    "self-approval (restart_self_approval is off)")
        if requester in answer.responder():
            return f"{requester} requested this restart and cannot approve it too (restart_self_approval is off)"
    return None
