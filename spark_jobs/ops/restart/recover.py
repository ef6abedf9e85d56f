"""Recover: a fresh checkpoint for a job whose checkpoint is lost or corrupt."""

from __future__ import annotations

import functools
import itertools
import json
from datetime import datetime, timezone
from typing import Callable

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import PIPELINE_METRICS
from spark_jobs.errors import CheckpointDamaged, SigflowError
from spark_jobs.jobs.base import StreamingJob
from spark_jobs.ops.restart.plan import (
    RECOVER_RUNBOOK,
    Plan,
    offsets_text,
    refuse_if_kafka_dropped,
    refuse_if_running,
)
from spark_jobs.ops.restart.replay import Replay, plan_replay, reads_raw
from spark_jobs.ops.restart.snapshot import JobSnapshot, shared_tables
from spark_jobs.runtime.checkpoint.lease import Lease
from spark_jobs.runtime.delta import log_damage
from spark_jobs.runtime.delta.table_access import (
    count_rows,
    delete_rows,
    every_row_stamped,
    history,
    read_arrow,
    restore,
    table_version,
)
from spark_jobs.runtime.metrics.progress import end_offsets

# What a checkpoint rebuilt from Delta metadata gets wrong, per stateful job.
STATE_LOSS = {
    "dedup": "events seen before the recovery point are forgotten, so re-sent copies of "
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
    settings: Settings, job_name: str, recover_from: str = "delta",
    force: bool = False, accept_state_loss: bool = False, lease: Lease | None = None,
    raw_version: int | None = None,
) -> Plan:
    """A fresh checkpoint for a job whose checkpoint is lost or corrupt, or whose tables must be
    computed again (a fix).

    ``recover_from="delta"`` starts after the last batch its tables committed (offsets from the
    Delta commit metadata): exact for stateless jobs. ``recover_from="earliest"`` empties the job's
    tables and re-runs it over everything Kafka still holds: nothing lost or counted twice,
    but batches cut differently make other events late (docs/runbooks/checkpoint-lost-or-corrupt.md).
    ``recover_from="raw"`` empties them too and re-runs it over device_events_raw (every record
    ingest kept, at ``raw_version``: the current one, or the one an earlier plan of it read), then
    goes on from Kafka where raw ends (docs/runbooks/recompute-beyond-retention.md).
    """
    snapshot = JobSnapshot.take(settings, job_name, "recover", lease)
    job, checkpoint = snapshot.job, snapshot.checkpoint
    plan = Plan.of(snapshot, "recover", runbook=RECOVER_RUNBOOK)
    refuse_if_running(snapshot, plan)
    damaged, lost = snapshot.unreadable_tables, snapshot.lost_tables
    if damaged or lost:
        plan.runbook = log_damage.RUNBOOK
    if checkpoint.exists() and not snapshot.problems and not damaged and not lost and not force:
        last = snapshot.committed[-1] if snapshot.committed else None
        plan.refuse(f"the checkpoint at {checkpoint.uri} looks sound (last committed batch "
                    f"{last}): resume or rewind it; --force replaces it anyway")
    applied_at = _applied_at()
    if checkpoint.exists() or _has_identity(checkpoint):
        # first: a recover that fails after this leaves a job with no checkpoint, which stays
        # refused until recovered; one that deleted rows first could resume past them
        damage = "".join(f"; {problem}" for problem in snapshot.problems)
        plan.step(f"move the old checkpoint aside to {checkpoint.uri}.lost-<UTC time> (kept for study{damage})",
                  lambda: checkpoint.move_aside(f"lost-{applied_at()}"))
    if recover_from == "delta" and damaged:
        start = None
        plan.refuse(f"{', '.join(damaged)} cannot be read, and the Delta metadata a recover --from delta "
                    "starts from with it: recover --from raw (or --from earliest), which rebuilds it")
    elif recover_from == "delta" and lost:
        start = None
        plan.refuse("; ".join(f"{name} {change} since {job.name} wrote it" for name, change in lost.items())
                    + ", and a recover --from delta starts from its tables' Delta metadata: recover --from raw "
                    "(or --from earliest), which rebuilds it")
    elif recover_from == "delta":
        start = _plan_start_from_delta(settings, job, plan)
        if job.stateful and not accept_state_loss:
            plan.refuse(f"{job.name} is stateful and its state cannot be rebuilt from Delta metadata: "
                        f"{STATE_LOSS.get(job.name, 'its open state is lost')}. Rebuild exactly with "
                        "--from earliest, or accept this with --accept-state-loss")
        elif job.stateful:
            plan.afterwards.append(f"known gap (accepted): {STATE_LOSS.get(job.name)}")
    elif recover_from in ("earliest", "raw"):
        if recover_from == "earliest":
            start = "earliest"
            refuse_if_kafka_dropped(settings, {t: None for t in job.topics(settings.streaming)}, plan)
        elif reads_raw(job):
            start = plan_replay(settings, job, {}, plan, raw_version)
        else:
            start = None
            plan.refuse("ingest writes device_events_raw itself: recover it --from delta or --from earliest")
        for spec in job.tables:
            if spec.merge_key:  # kept current by merge, with other jobs' parts: the re-run finds nothing newer
                continue
            uri = settings.table_uri(spec.name)
            if spec.name in damaged:
                plan.step(f"move {spec.name} aside to {uri}.damaged-<UTC time> (kept for study: "
                          f"{damaged[spec.name]}); the job rebuilds it",
                          lambda uri=uri: log_damage.set_aside(uri, f"damaged-{applied_at()}"))
                continue
            if spec.name in lost:
                rows = count_rows(uri)
                plan.step(f"{spec.name} {lost[spec.name]} since {job.name} wrote it: the job rebuilds it"
                          + (f" (the {rows:,} rows in it now deleted first)" if rows else ""),
                          lambda uri=uri: delete_rows(uri))
                continue
            plan.step(f"delete every row of {spec.name} ({count_rows(uri):,} rows); the job rebuilds it",
                      lambda uri=uri: delete_rows(uri))
        for spec in shared_tables(job):
            uri = settings.table_uri(spec.name)
            plan.step(f"delete the {count_rows(uri, job.name):,} {spec.name} rows of {job.name}",
                      lambda uri=uri: delete_rows(uri, job.name))
        plan.afterwards.append("readers see these tables empty until the re-run has caught up")
    else:
        raise SigflowError(f"a recover reads from delta, earliest or raw, not {recover_from!r}",
                           "use delta, earliest or raw")
    if plan.refusals:
        plan.steps.clear()
        return plan
    if isinstance(start, Replay):
        plan.raw_version = start.extent.version
        plan.step(f"start a new checkpoint at {checkpoint.uri} whose batches read device_events_raw at version "
                  f"{start.extent.version}: {start.extent.describe()}, then Kafka from {offsets_text(start.until)}",
                  lambda: _start_replay(checkpoint, job.name, start, {"recover_from": recover_from, "at": applied_at()}))
    else:
        plan.step(f"start a new checkpoint at {checkpoint.uri} whose first batch reads from "
                  f"{offsets_text(start) if isinstance(start, dict) else start}",
                  lambda: checkpoint.start_fresh(
                      job.name, start if isinstance(start, str) else json.dumps(start),
                      {"recover_from": recover_from, "at": applied_at()}))
    plan.afterwards.append(snapshot.run_again())
    return plan


def _start_replay(checkpoint, job: str, replay: Replay, recovered_from: dict) -> None:
    """A new checkpoint whose batches read raw from each partition's offset 0 to ``until``."""
    checkpoint.start_fresh(job, json.dumps(replay.until), recovered_from)
    checkpoint.record_replay({topic: {part: 0 for part in parts} for topic, parts in replay.until.items()},
                             replay.until, replay.extent.version)


def _has_identity(checkpoint) -> bool:
    """Whether sigflow.json is there, readable or not (a damaged one is moved aside too)."""
    try:
        return bool(checkpoint.identity())
    except CheckpointDamaged:
        return True


def _applied_at() -> Callable[[], str]:
    """The UTC time the plan is applied, read once: an approved plan is applied later than it
    was made, and its text (what was approved) must not depend on when it was made."""
    return functools.cache(lambda: datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"))


def _plan_start_from_delta(settings: Settings, job: StreamingJob, plan: Plan) -> dict | None:
    """Kafka offsets after the last batch every table of the job holds, in the lost checkpoint.

    A batch commits to the tables it has rows for, with its end offsets in each commit's
    metadata, and pipeline_metrics gets a row once the batch has finished: every table
    written, rows or none. So a table is at its newest commit or at the job's newest
    pipeline_metrics row, whichever came later. The lost checkpoint is the one of the
    newest of those; a table ahead of the others (a crash between two tables of a batch) is
    restored to the version before its commits beyond them."""
    finished = _newest_finished_batch(settings, job)
    # a table kept current by merge holds no batch position; the re-run finds nothing newer in it
    uris = {spec.name: settings.table_uri(spec.name) for spec in job.tables if not spec.merge_key}
    commits = {name: (uri, [e for e in history(uri) if e.get("job") == job.name and e.get("kafka_end_offsets")])
               for name, uri in uris.items()}
    candidates = [entries[0] for _, entries in commits.values() if entries] + ([finished] if finished else [])
    if not candidates:
        plan.refuse(f"no sigflow commit metadata in {', '.join(commits)} and no batch of {job.name} in "
                    "pipeline_metrics: nothing to start from; use --from earliest")
        return None
    lost = max(candidates, key=_time)["checkpoint_id"]
    newest = {}
    for name, (_, entries) in commits.items():
        ours = [e for e in entries if e.get("checkpoint_id") == lost][:1]
        ours += [finished] if finished and finished["checkpoint_id"] == lost else []
        if ours:
            newest[name] = max(ours, key=_time)
    if len(newest) < len(commits):
        missing = sorted(set(commits) - set(newest))
        plan.refuse(f"{', '.join(missing)} holds no batch of the lost checkpoint and pipeline_metrics no "
                    "finished one: where it stood is unknown; use --from earliest")
        return None
    common = min(newest.values(), key=_position)
    for name, (uri, entries) in commits.items():
        ahead = list(itertools.takewhile(lambda e: _position(e) > _position(common), entries))
        if not ahead:
            continue
        # a crash between two tables of one batch: bring the one ahead back in line, by a
        # delete its change feed shows where its rows say which batch wrote them
        if every_row_stamped(uri) and common.get("batch_id") is not None:
            batch = int(common["batch_id"])
            plan.step(f"delete the {name} rows of the lost checkpoint's batches after {batch}, the batch all "
                      "tables hold", lambda uri=uri, b=batch: delete_rows(uri, None, b, lost))
        else:
            target = int(ahead[-1]["version"]) - 1
            plan.step(f"restore {name} to version {target}, the batch all tables hold",
                      lambda uri=uri, v=target: restore(uri, v))
    return common["kafka_end_offsets"]


def _position(entry: dict) -> int:
    return sum(int(o) for parts in entry["kafka_end_offsets"].values() for o in parts.values())


def _time(entry: dict) -> int:
    return int(entry.get("timestamp") or 0)


def _newest_finished_batch(settings: Settings, job: StreamingJob) -> dict | None:
    """The job's newest batch in pipeline_metrics (a row is written once a batch finished):
    its end offsets, checkpoint id and start time in ms, as commit metadata has them."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    uri = settings.table_uri(PIPELINE_METRICS.name)
    if table_version(uri) is None:
        return None
    ours = ds.field("job") == job.name
    times = read_arrow(uri, ["batch_time"], where=ours).column("batch_time")
    if len(times) == 0:
        return None
    newest = pc.max(times)
    row = read_arrow(uri, ["checkpoint_id", "batch_id", "progress_json"], where=ours & (ds.field("batch_time") == newest))
    ends = end_offsets(json.loads(row.column("progress_json")[0].as_py()))
    if not ends:
        return None
    return {"kafka_end_offsets": ends, "checkpoint_id": row.column("checkpoint_id")[0].as_py(),
            "batch_id": row.column("batch_id")[0].as_py(),
            "timestamp": int(newest.as_py().timestamp() * 1000)}
