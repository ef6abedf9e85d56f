"""Resume: stop the running query after its batch in flight, check the checkpoint, run again."""

from __future__ import annotations

import os
import signal
import time

from spark_jobs.config import Settings
from spark_jobs.errors import SigflowError
from spark_jobs.jobs.registry import get_job
from spark_jobs.ops import status
from spark_jobs.ops.restart.plan import RECOVER_RUNBOOK, Plan, refuse_pending_rewind
from spark_jobs.runtime.checkpoint import Checkpoint


def stop_running(settings: Settings, job: str, timeout_s: float = 120.0) -> int | None:
    """SIGTERM the job's running query (it finishes its batch in flight); its pid, or None."""
    pid = status.running_pid(settings, job)
    if pid is None:
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while status.running_pid(settings, job) is not None:
        if time.monotonic() > deadline:
            raise SigflowError(
                f"{job} (pid {pid}) did not stop within {timeout_s:g}s of SIGTERM",
                f"it may be stuck in a batch: check its log, then `kill -9 {pid}` (safe: the "
                "checkpoint and Delta transactions make the next run redo the batch exactly once)",
            )
        time.sleep(0.5)
    return pid


def plan_resume(settings: Settings, job_name: str) -> Plan:
    job = get_job(job_name)
    plan = Plan(job.name, "resume", runbook="docs/runbooks/job-crashed.md")
    checkpoint = Checkpoint(settings.checkpoint_uri(job.name))
    refuse_pending_rewind(checkpoint, plan)
    pid = status.running_pid(settings, job.name)
    if pid:
        plan.step(f"stop the running query (pid {pid}) with SIGTERM after its batch in flight",
                  lambda: stop_running(settings, job.name))
    problems = checkpoint.problems()
    if problems:
        plan.refuse(f"the checkpoint is damaged ({'; '.join(problems)}): recover it instead")
        plan.runbook = RECOVER_RUNBOOK
    last = checkpoint.last_committed()
    where = f"after committed batch {last}" if last is not None else "from the start (no checkpoint yet)"
    plan.afterwards.append(f"run {job.name} from its checkpoint, {where}")
    return plan
