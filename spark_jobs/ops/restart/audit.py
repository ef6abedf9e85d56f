"""restart_audit: one row per restart applied or attempted, whoever applied it and however
(the sigflow_restart DAG or `sigflow checkpoint ... --yes`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from spark_jobs.contracts.tables import RESTART_AUDIT
from spark_jobs.runtime.delta import table_access

CLI_APPROVAL = "CLI --yes"
APPLIED, REFUSED, FAILED = "applied", "refused", "failed"


@dataclass(frozen=True)
class Approval:
    """Who asked for a restart and who let it be applied."""

    requested_by: str | None
    approved_by: str

    @classmethod
    def cli(cls) -> Approval:
        """The CLI's: the operating-system user, approved by the --yes flag (no approval gates it)."""
        import getpass

        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # a uid without a name (some containers)
            user = None
        return cls(user, CLI_APPROVAL)


def record(uri: str, plan, approval: Approval, outcome: str, detail: str = "") -> None:
    """Append one row for ``plan``'s apply (created with the table when missing)."""
    import pyarrow as pa

    from spark_jobs.runtime.delta.schema import arrow_schema, create_table

    create_table(uri, RESTART_AUDIT)
    row = {"applied_at": datetime.now(timezone.utc), "job": plan.job, "action": plan.action,
           "requested_by": approval.requested_by, "approved_by": approval.approved_by,
           "plan_digest": plan.digest(), "steps": json.dumps(plan.steps), "outcome": outcome,
           "detail": detail[:2000], "command": plan.command}
    table_access.append(uri, pa.Table.from_pylist([row], schema=arrow_schema(RESTART_AUDIT)))
