"""On-call operations on one job: resume, rewind to a batch, recover a lost checkpoint.

Each operation is planned before anything changes, from one look at the job (``snapshot``).
A ``Plan`` lists every change it will
make, every reason it refuses to, and what the operator must do afterwards; ``apply()``
does exactly the listed changes, so the dry run is the truth. ``sigflow stop`` and
``sigflow checkpoint rewind|recover`` and the ``sigflow_restart`` DAG all call this module.
"""

from __future__ import annotations

from datetime import datetime, timezone

from spark_jobs.config import Settings
from spark_jobs.errors import ConfigError
from spark_jobs.ops.restart.plan import (
    Plan,
    refuse_if_reconciling,
    refuse_if_unfinished_restart,
)
from spark_jobs.ops.restart.recover import plan_recover
from spark_jobs.ops.restart.resume import plan_resume, stop_running
from spark_jobs.ops.restart.rewind import plan_rewind
from spark_jobs.runtime.checkpoint.lease import Lease

ACTIONS = ("resume", "rewind", "recover")


def parse_utc(text: str | None) -> datetime | None:
    """An ISO 8601 time; one without a zone is UTC."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"to_time {text!r} is not an ISO 8601 time", "e.g. 2026-11-23T10:15:00") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def plan(
    settings: Settings, job: str, action: str, *, to_batch: int | None = None, to_time: str | None = None,
    source: str = "delta", force: bool = False, accept_state_loss: bool = False,
) -> Plan:
    """The plan of one on-call action; the CLI and the sigflow_restart DAG both call this.
    Its ``apply`` plans it again once it holds the job's lease (``replan``)."""
    def planned(lease: Lease | None = None) -> Plan:
        if action == "resume":
            made = plan_resume(settings, job, lease=lease)
        elif action == "rewind":
            made = plan_rewind(settings, job, to_batch, parse_utc(to_time), lease=lease)
        elif action == "recover":
            made = plan_recover(settings, job, source, force, accept_state_loss, lease=lease)
        else:
            raise ConfigError(f"unknown restart action {action!r}", f"one of {', '.join(ACTIONS)}")
        made.command = command(job, action, to_batch=to_batch, to_time=to_time, source=source, force=force,
                               accept_state_loss=accept_state_loss)
        refuse_if_unfinished_restart(made, supersedes=action == "recover" and source == "earliest")
        if action != "resume":  # resume deletes no row
            refuse_if_reconciling(made)
        return made

    first = planned()
    first.replan = lambda: planned(first.lease)
    return first


def command(job: str, action: str, *, to_batch: int | None = None, to_time: str | None = None,
            source: str = "delta", force: bool = False, accept_state_loss: bool = False) -> str:
    """The CLI command that applies this request."""
    options = []
    if action == "rewind":
        options += [f"--to-batch {to_batch}"] if to_batch is not None else [f"--to-time {to_time}"] if to_time else []
    if action == "recover":
        options += [f"--from {source}"] + ["--force"] * force + ["--accept-state-loss"] * accept_state_loss
    return " ".join(["sigflow checkpoint", action, job, *options, "--yes"])


__all__ = ["ACTIONS", "Plan", "parse_utc", "plan", "plan_recover", "plan_resume", "plan_rewind", "stop_running"]
