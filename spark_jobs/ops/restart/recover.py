"""Recover: a fresh checkpoint for a job whose checkpoint is lost or corrupt."""

from __future__ import annotations

import functools
import json
from datetime import datetime, timezone
from typing import Callable

from spark_jobs.config import Settings
from spark_jobs.errors import SigflowError
from spark_jobs.jobs.base import StreamingJob
from spark_jobs.jobs.registry import get_job
from spark_jobs.ops.restart.plan import (
    RECOVER_RUNBOOK,
    Plan,
    holding_the_job,
    offsets_text,
    refuse_if_kafka_dropped,
    refuse_if_running,
    shared_tables,
)
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.delta.delta_rs import count_rows, delete_rows, history, restore

# What a checkpoint rebuilt from Delta metadata gets wrong, per stateful job.
STATE_LOSS = {
    "dedup": "event ids seen before the recovery point are forgotten, so re-sent copies of "
    "them within the watermark delay are written again to device_events_deduplicated",
    "windowed-averages": "windows open at the recovery point are emitted with only the events "
    "after it (low event_count), in device_signal_averages",
    "fleet-rollup": "fleet windows open at the recovery point are emitted with only the devices' "
    "windows after it, in fleet_signal_rollups",
    "sessions": "sessions open at the recovery point are split: their first part is never "
    "written, the rest starts a new session in device_sessions",
    "alert-join": "alerts and events buffered for the join are forgotten: alerts just before the "
    "recovery point miss their context rows and some are reported as without telemetry",
}


def plan_recover(
    settings: Settings, job_name: str, source: str = "delta",
    force: bool = False, accept_state_loss: bool = False,
) -> Plan:
    """A fresh checkpoint for a job whose checkpoint is lost or corrupt.

    ``source="delta"`` starts after the last batch its tables committed (offsets from the
    Delta commit metadata): exact for stateless jobs. ``source="earliest"`` empties the job's
    tables and re-runs it over everything Kafka still holds: nothing lost or counted twice,
    but batches cut differently make other events late (docs/runbooks/checkpoint-lost-or-corrupt.md).
    """
    job = get_job(job_name)
    plan = holding_the_job(settings, job, Plan(job.name, "recover", runbook=RECOVER_RUNBOOK))
    checkpoint = Checkpoint(settings.checkpoint_uri(job.name))
    refuse_if_running(settings, job, plan)
    problems = checkpoint.problems()
    if checkpoint.exists() and not problems and not force:
        plan.refuse(f"the checkpoint at {checkpoint.uri} looks sound (last committed batch "
                    f"{checkpoint.last_committed()}): resume or rewind it; --force replaces it anyway")
    applied_at = _applied_at()
    if checkpoint.exists() or checkpoint.identity():
        # first: a recover that fails after this leaves a job with no checkpoint, which stays
        # refused until recovered; one that deleted rows first could resume past them
        plan.step(f"move the old checkpoint aside to {checkpoint.uri}.lost-<UTC time> (kept for study)",
                  lambda: checkpoint.move_aside(f"lost-{applied_at()}"))
    if source == "delta":
        start = _plan_start_from_delta(settings, job, plan)
        if job.stateful and not accept_state_loss:
            plan.refuse(f"{job.name} is stateful and its state cannot be rebuilt from Delta metadata: "
                        f"{STATE_LOSS.get(job.name, 'its open state is lost')}. Rebuild exactly with "
                        "--from earliest, or accept this with --accept-state-loss")
        elif job.stateful:
            plan.afterwards.append(f"known gap (accepted): {STATE_LOSS.get(job.name)}")
    elif source == "earliest":
        start = "earliest"
        refuse_if_kafka_dropped(settings, {t: None for t in job.topics(settings.streaming)}, plan)
        for spec in job.tables:
            uri = settings.table_uri(spec.name)
            plan.step(f"delete every row of {spec.name} ({count_rows(uri)} rows); the job rebuilds it",
                      lambda uri=uri: delete_rows(uri))
        for spec in shared_tables(job):
            uri = settings.table_uri(spec.name)
            plan.step(f"delete the {count_rows(uri, job.name)} {spec.name} rows of {job.name}",
                      lambda uri=uri: delete_rows(uri, job.name))
        plan.afterwards.append("readers see these tables empty until the re-run has caught up")
    else:
        raise SigflowError(f"unknown recovery source {source!r}", "use delta or earliest")
    if plan.refusals:
        plan.steps.clear()
        return plan
    plan.step(f"start a new checkpoint at {checkpoint.uri} whose first batch reads from "
              f"{offsets_text(start) if isinstance(start, dict) else start}",
              lambda: checkpoint.start_fresh(
                  job.name, start if isinstance(start, str) else json.dumps(start),
                  {"source": source, "at": applied_at()}))
    plan.afterwards.append(f"run {job.name}")
    return plan


def _applied_at() -> Callable[[], str]:
    """The UTC time the plan is applied, read once: an approved plan is applied later than it
    was made, and its text (what was approved) must not depend on when it was made."""
    return functools.cache(lambda: datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"))


def _plan_start_from_delta(settings: Settings, job: StreamingJob, plan: Plan) -> dict | None:
    """Kafka offsets after the last batch every table of the job committed."""
    newest = {}
    for spec in job.tables:
        uri = settings.table_uri(spec.name)
        commits = [e for e in history(uri) if e.get("job") == job.name and e.get("kafka_end_offsets")]
        if commits:
            newest[spec.name] = (uri, commits)
    if len(newest) < len(job.tables):
        missing = sorted({s.name for s in job.tables} - set(newest))
        plan.refuse(f"no sigflow commit metadata in {', '.join(missing)}: nothing to start from; "
                    "use --from earliest")
        return None

    def position(entry: dict) -> int:
        return sum(int(o) for parts in entry["kafka_end_offsets"].values() for o in parts.values())

    common = min((commits[0] for _, commits in newest.values()), key=position)
    for name, (uri, commits) in newest.items():
        if commits[0]["kafka_end_offsets"] == common["kafka_end_offsets"]:
            continue
        match = next((e for e in commits if e["kafka_end_offsets"] == common["kafka_end_offsets"]), None)
        if match is None:
            plan.refuse(f"{name} never committed the batch its sibling tables stopped at")
        else:  # a crash between two tables of one batch: bring the one ahead back in line
            plan.step(f"restore {name} to version {match['version']}, the batch all tables hold",
                      lambda uri=uri, v=match["version"]: restore(uri, v))
    return common["kafka_end_offsets"]
