"""Resume: stop the running query after its batch in flight, check the checkpoint, run again."""

from __future__ import annotations

from spark_jobs.config import Settings
from spark_jobs.errors import SigflowError
from spark_jobs.jobs.registry import get_any_job
from spark_jobs.ops import status
from spark_jobs.ops.restart.plan import (
    RECOVER_RUNBOOK,
    Plan,
    refuse_if_applying,
    refuse_if_tables_lost,
    refuse_pending_rewind,
)
from spark_jobs.ops.restart.snapshot import JobSnapshot
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.lease import RUN, Lease
from spark_jobs.runtime.waiting import wait_until


def stop_running(settings: Settings, job: str, timeout_s: float = 120.0) -> int | None:
    """SIGTERM the run holding the job's lease (it finishes its batch in flight); its pid, or
    None. Only that very process (pid and start time, psutil) is signalled, never one that
    reused its pid, and a run on another host is left to that host. A run that shares its
    application with other jobs (`sigflow pipeline --processing-time`) is asked to stop
    instead, on any host: the others go on; so is a job its application, still running here,
    would start again after a failure."""
    get_any_job(job)  # a name that is no job never becomes a checkpoint path
    holder = status.running_holder(settings, job)
    if holder is None:
        lease = Lease(Checkpoint(settings.checkpoint_uri(job)), job, settings.operations.lease_ttl.seconds)
        last = lease.holder()
        if last is not None and last.left_in_application():  # it would start the job again: asked not to
            lease.request_stop()
            return last.pid
        return None
    if holder.purpose != RUN:
        raise SigflowError(f"{job} is not running: a {holder.purpose} of its checkpoint is being applied "
                           f"({holder.describe()})", "let it finish; its plan says what comes next")
    if holder.shared:  # one job of several in one application: asked, not signalled
        lease = Lease(Checkpoint(settings.checkpoint_uri(job)), job, settings.operations.lease_ttl.seconds)
        lease.request_stop()
        if not wait_until(lambda: status.running_holder(settings, job) is None, timeout_s=timeout_s, every_s=0.5):
            raise SigflowError(
                f"{job} (in the application of pid {holder.pid}) did not stop within {timeout_s:g}s of the request",
                f"it may be stuck in a batch: check its log; stopping the whole application (`kill {holder.pid}`) "
                "stops every job in it, each after its batch in flight")
        return holder.pid  # the request stays until a restart of the job has been applied
    process = holder.process()
    if process is None:
        raise SigflowError(
            f"{job} runs on {holder.host} (pid {holder.pid}), not on this host",
            f"stop it there with `sigflow stop {job}`; its lease lapses {holder.ttl_s:.0f} s after it stops renewing",
        )
    process.terminate()
    if not wait_until(lambda: status.running_holder(settings, job) is None, timeout_s=timeout_s, every_s=0.5):
        raise SigflowError(
            f"{job} (pid {holder.pid}) did not stop within {timeout_s:g}s of SIGTERM",
            f"it may be stuck in a batch: check its log, then `kill -9 {holder.pid}` (safe: the "
            "checkpoint and Delta transactions make the next run redo the batch exactly once)",
        )
    return holder.pid


def plan_resume(settings: Settings, job_name: str, lease: Lease | None = None) -> Plan:
    snapshot = JobSnapshot.take(settings, job_name, "resume", lease)
    job, holder, problems = snapshot.job, snapshot.holder, snapshot.problems
    plan = Plan.of(snapshot, "resume", runbook="docs/runbooks/job-crashed.md")
    refuse_pending_rewind(snapshot, plan)
    if holder is not None and not refuse_if_applying(holder, plan):
        plan.stop_step(f"ask {job.name}'s query in the application of pid {holder.pid} to stop after its batch "
                       "in flight (its other jobs go on)" if holder.shared else
                       f"stop the running query (pid {holder.pid}) with SIGTERM after its batch in flight",
                       lambda: stop_running(settings, job.name))
    refuse_if_tables_lost(snapshot, plan)
    if problems:
        plan.refuse(f"the checkpoint is damaged ({'; '.join(problems)}): recover it instead")
        plan.runbook = RECOVER_RUNBOOK
    # no batch number: a running job commits while the plan waits for approval, and what is
    # approved (the page, digest included) must not move with it
    where = "after its last committed batch" if snapshot.committed else \
        "from the start (no checkpoint yet)"
    plan.afterwards.append(f"{snapshot.run_again()}, from its checkpoint, {where}")
    return plan
