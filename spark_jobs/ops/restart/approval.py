"""Whether an answered sigflow_restart approval lets its plan be applied.

The approval task records what a person answered together with the digest of the plan it
showed them (``Plan.digest``). The plan is applied only when that answer is Approve and the
plan as it stands now has the same digest: a task marked success by hand, a Reject, or a
plan that changed after it was shown (the state moved, or ``plan`` was cleared and re-run)
applies nothing, however the apply task came to run.
"""

from __future__ import annotations

from typing import Any, Mapping

APPROVE = "Approve"


def refusal(approval: Mapping[str, Any] | None, digest: str, requester: str | None,
            approvers: list[str]) -> str | None:
    """Why this approval does not allow applying the plan whose digest is ``digest``, or None.

    ``approval``: what the approval task returned (None when it never recorded an answer);
    ``requester``: who triggered the restart; ``approvers``: the ``restart_approvers`` setting."""
    if not approval or "chosen_options" not in approval:
        return "the approval recorded no answer (a task marked success is not an approval)"
    chosen = list(approval["chosen_options"])
    if chosen != [APPROVE]:
        return f"the answer recorded was {', '.join(chosen) or 'none'}, not {APPROVE}"
    approved = approval.get("plan_digest") or "none"
    if approved != digest:
        return (f"the plan approved (digest {approved[:12]}) is not the plan now (digest {digest[:12]}): "
                "the state moved or the plan was made again after it was shown")
    if approvers:
        responder = approval.get("responded_by_user") or {}
        names = {str(responder[key]) for key in ("id", "name") if responder.get(key) is not None}
        if not names & set(approvers):
            return f"{responder.get('name') or 'nobody'} answered, who is not in restart_approvers"
        if requester and requester in names:
            return f"{requester} requested this restart and cannot approve it too (restart_approvers is set)"
    return None
