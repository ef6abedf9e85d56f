"""On-call operations on one job: resume, rewind to a batch, recover a lost checkpoint.

Each operation is planned before anything changes, from one look at the job (``snapshot``).
A ``Plan`` lists every change it will
make, every reason it refuses to, and what the operator must do afterwards; ``apply()``
does exactly the listed changes, so the dry run is the truth. ``sigflow stop`` and
``sigflow checkpoint rewind|recover`` and the ``sigflow_restart`` DAG all call this module.
"""

from __future__ import annotations

from spark_jobs.config import Settings
from spark_jobs.ops.restart.plan import (
    Plan,
    refuse_if_reconciling,
    refuse_if_unfinished_restart,
)
from spark_jobs.ops.restart.recover import plan_recover
from spark_jobs.ops.restart.request import ACTIONS, RECOVER_FROM, RestartRequest
from spark_jobs.ops.restart.resume import plan_resume, stop_running
from spark_jobs.ops.restart.rewind import plan_rewind
from spark_jobs.runtime.checkpoint.lease import Lease


def plan(
    settings: Settings, job: str, action: str, *, to_batch: int | None = None, to_time: str | None = None,
    recover_from: str = "delta", force: bool = False, accept_state_loss: bool = False,
) -> Plan:
    """The plan of one on-call action; the CLI and the sigflow_restart DAG both call this.
    Its ``apply`` plans it again once it holds the job's lease (``replan``)."""
    request = RestartRequest(job, action, to_batch=to_batch, to_time=to_time, recover_from=recover_from,
                             force=force, accept_state_loss=accept_state_loss)

    def planned(lease: Lease | None = None, raw_version: int | None = None) -> Plan:
        if request.action == "resume":
            made = plan_resume(settings, request.job, lease=lease)
        elif request.action == "rewind":
            made = plan_rewind(settings, request.job, request.to_batch, request.rewind_time(), lease=lease,
                               raw_version=raw_version)
        else:
            made = plan_recover(settings, request.job, request.recover_from, request.force, request.accept_state_loss,
                                lease=lease, raw_version=raw_version)
        made.command = request.command()
        rebuilds = request.action == "recover" and request.recover_from in ("earliest", "raw")
        refuse_if_unfinished_restart(made, supersedes=rebuilds)
        if request.action != "resume":  # resume deletes no row
            refuse_if_reconciling(made)
        return made

    first = planned()
    first.replan = lambda: planned(first.lease, first.raw_version)
    return first


__all__ = ["ACTIONS", "RECOVER_FROM", "Plan", "RestartRequest", "plan", "plan_recover", "plan_resume", "plan_rewind",
           "stop_running"]
