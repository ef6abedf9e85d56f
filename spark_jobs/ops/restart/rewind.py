"""Rewind: re-run every batch after a chosen one, exactly once.

Why a rewind is safe to re-run: before touching anything its apply records its intent
beside the checkpoint (``Plan.apply``); jobs refuse to start while it is there, and running
the same rewind again finishes it.
"""

from __future__ import annotations

import bisect
from datetime import datetime

from spark_jobs.config import Settings
from spark_jobs.ops.restart.plan import (
    RECOVER_RUNBOOK,
    Plan,
    kafka_dropped,
    offsets_text,
    refuse_if_kafka_dropped,
    refuse_if_running,
    refuse_if_tables_lost,
)
from spark_jobs.ops.restart.replay import plan_replay, reads_raw
from spark_jobs.ops.restart.snapshot import JobSnapshot, shared_tables
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.intent import RestartIntent
from spark_jobs.runtime.checkpoint.lease import Lease
from spark_jobs.runtime.delta.table_access import (
    count_rows,
    delete_rows,
    every_row_stamped,
    has_its_files,
    restore,
    version_left_by,
)


def plan_rewind(
    settings: Settings, job_name: str, to_batch: int | None = None, to_time: datetime | None = None,
    lease: Lease | None = None, raw_version: int | None = None,
) -> Plan:
    """Re-run every batch after ``to_batch`` (or the last batch that started before ``to_time``).
    Where Kafka's retention removed records the re-run needs, it reads them from
    device_events_raw (at ``raw_version``: the current one, or the one an earlier plan of it
    read), then Kafka from where raw ends."""
    snapshot = JobSnapshot.take(settings, job_name, "rewind", lease)
    job, checkpoint, committed = snapshot.job, snapshot.checkpoint, snapshot.committed
    # a rewind left half done: by an older sigflow, marked in sigflow.json; else by its intent
    # (another restart's intent is refused with the plan: refuse_if_unfinished_restart)
    pending = snapshot.legacy_pending_rewind
    finishing = pending is not None or (isinstance(snapshot.intent, RestartIntent) and snapshot.intent.action == "rewind")
    plan = Plan.of(snapshot, "rewind")
    refuse_if_running(snapshot, plan)
    refuse_if_tables_lost(snapshot, plan)
    if snapshot.problems:
        plan.refuse(f"the checkpoint is damaged ({'; '.join(snapshot.problems)}): recover it instead")
        plan.runbook = RECOVER_RUNBOOK
        return plan
    if to_time is not None:
        to_batch = _last_batch_started_before(checkpoint, committed, to_time)
        if to_batch is None:
            plan.refuse(f"no committed batch started at or before {to_time.isoformat()}")
            return plan
    if to_batch is None:
        plan.refuse("say which batch to rewind to (a batch id or a time)")
        return plan
    if pending is not None and pending != to_batch:
        plan.refuse(f"an unfinished rewind to batch {pending} must be finished first (run it again)")
        return plan
    if not committed or (to_batch >= committed[-1] and not finishing):
        plan.refuse(f"batch {to_batch} is not before the last committed batch "
                    f"({committed[-1] if committed else 'none'}): there is nothing after it to re-run")
        return plan
    if to_batch not in committed or checkpoint.offsets(to_batch) is None:
        plan.refuse(f"batch {to_batch} is no longer in the checkpoint (it holds batches "
                    f"{committed[0]}..{committed[-1]}): rebuild with `sigflow checkpoint recover "
                    f"{job.name} --from earliest` instead")
        return plan
    resume_from = checkpoint.offsets(to_batch).sources[0] or {}
    replay = None
    if not reads_raw(job):
        refuse_if_kafka_dropped(settings, resume_from, plan)
    elif kafka_dropped(settings, resume_from):
        replay = plan_replay(settings, job, resume_from, plan, raw_version)
    if plan.refusals:
        return plan

    checkpoint_id = checkpoint.checkpoint_id(job.name)
    # a table whose every row says which batch wrote it loses the later batches' rows by a
    # delete, which a reader of its change feed sees; one holding rows from before the
    # stamps is restored to the version the batch left (a restore is no change a feed shows)
    unstamped = [spec for spec in job.tables if not spec.merge_key and not every_row_stamped(snapshot.uri(spec))]
    if unstamped and not _restorable(snapshot, checkpoint_id, to_batch, unstamped):
        oldest = _oldest_restorable(snapshot, checkpoint_id, committed[:-1], unstamped)
        reachable = (f"the oldest batch a rewind can reach is {oldest}" if oldest is not None else
                     f"no batch before the last can be restored: rebuild with `sigflow checkpoint recover "
                     f"{job.name} --from earliest` instead")
        plan.refuse(f"maintenance vacuumed the table files of batch {to_batch} "
                    f"(vacuum_retention {settings.operations.vacuum_retention}): {reachable}")
        return plan
    for spec in job.tables:
        uri = settings.table_uri(spec.name)
        if spec.merge_key:  # kept current by merge: the re-run finds nothing newer than it holds
            continue
        if spec not in unstamped:
            rows = count_rows(uri, None, to_batch, checkpoint_id)
            if rows:
                plan.step(f"delete the {rows:,} {spec.name} rows of batches after {to_batch}",
                          lambda uri=uri: delete_rows(uri, None, to_batch, checkpoint_id))
            continue
        target = version_left_by(uri, job.name, checkpoint_id, to_batch)
        current = snapshot.table_versions[spec.name]
        if target is not None and target != current:  # None: this checkpoint never wrote to it
            plan.step(f"restore {spec.name} to version {target} (left by batch {to_batch}; now {current}; "
                      "it holds rows written before rows said which batch wrote them)",
                      lambda uri=uri, target=target: restore(uri, target))
    for spec in shared_tables(job):
        uri = settings.table_uri(spec.name)
        rows = count_rows(uri, job.name, to_batch, checkpoint_id)
        if rows:
            plan.step(f"delete the {rows:,} {spec.name} rows of {job.name} batches after {to_batch} "
                      "(of this checkpoint: earlier ones, before a recover, keep theirs)",
                      lambda uri=uri: delete_rows(uri, job.name, to_batch, checkpoint_id))
    plan.step(f"delete checkpoint batches {to_batch + 1}..{committed[-1]} (offsets, commits) and the "
              "state versions they wrote", lambda: checkpoint.truncate_after(to_batch))
    plan.step("give the checkpoint a new Delta app id, so the re-run batches are written once",
              lambda: checkpoint.rotate_app_id(job.name, to_batch))
    if replay is None:
        plan.afterwards.append(f"{snapshot.run_again()}: it re-reads Kafka from {offsets_text(resume_from)}")
    else:
        plan.raw_version = replay.extent.version
        plan.step(f"re-run from device_events_raw at version {replay.extent.version}, as Kafka's retention removed "
                  f"records the re-run needs: {replay.extent.describe()}, then Kafka from {offsets_text(replay.until)}",
                  lambda: checkpoint.record_replay(resume_from, replay.until, replay.extent.version))
        plan.afterwards.append(f"{snapshot.run_again()}: it reads device_events_raw, then Kafka")
    if any(spec.corrected for spec in job.tables):
        plan.afterwards.append(f"then `sigflow reconcile {job.name}`: the late events of the re-run batches "
                               "are counted again")
    return plan


def _restorable(snapshot: JobSnapshot, checkpoint_id: str, batch: int, tables) -> bool:
    """Every one of ``tables`` still has the files of the version ``batch`` left it at."""
    for spec in tables:
        uri = snapshot.uri(spec)
        version = version_left_by(uri, snapshot.job.name, checkpoint_id, batch)
        if version is not None and version != snapshot.table_versions[spec.name] and not has_its_files(uri, version):
            return False
    return True


def _oldest_restorable(snapshot: JobSnapshot, checkpoint_id: str, batches: list[int], tables) -> int | None:
    """The first of ``batches`` a rewind can restore to. Vacuum removes only files older
    versions need, so whether a batch is restorable flips once, from no to yes."""
    first = bisect.bisect_left(batches, True, key=lambda b: _restorable(snapshot, checkpoint_id, b, tables))
    return batches[first] if first < len(batches) else None


def _last_batch_started_before(checkpoint: Checkpoint, committed: list[int], when: datetime) -> int | None:
    limit_ms = when.timestamp() * 1000
    started = [b for b in committed if (o := checkpoint.offsets(b)) and o.batch_timestamp_ms <= limit_ms]
    return started[-1] if started else None
