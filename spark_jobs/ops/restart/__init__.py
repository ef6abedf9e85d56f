"""On-call operations on one job: resume, rewind to a batch, recover a lost checkpoint.

Each operation is planned before anything changes. A ``Plan`` lists every change it will
make, every reason it refuses to, and what the operator must do afterwards; ``apply()``
does exactly the listed changes, so the dry run is the truth. ``sigflow stop`` and
``sigflow checkpoint rewind|recover`` and the ``sigflow_restart`` DAG all call this module.
"""

from __future__ import annotations

from datetime import datetime, timezone

from spark_jobs.config import Settings
from spark_jobs.errors import ConfigError
from spark_jobs.ops.restart.plan import Plan
from spark_jobs.ops.restart.recover import plan_recover
from spark_jobs.ops.restart.resume import plan_resume, stop_running
from spark_jobs.ops.restart.rewind import plan_rewind

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
    """The plan of one on-call action; the CLI and the sigflow_restart DAG both call this."""
    if action == "resume":
        return plan_resume(settings, job)
    if action == "rewind":
        return plan_rewind(settings, job, to_batch, parse_utc(to_time))
    if action == "recover":
        return plan_recover(settings, job, source, force, accept_state_loss)
    raise ConfigError(f"unknown restart action {action!r}", f"one of {', '.join(ACTIONS)}")


__all__ = ["ACTIONS", "Plan", "parse_utc", "plan", "plan_recover", "plan_resume", "plan_rewind", "stop_running"]
