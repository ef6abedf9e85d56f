"""What a restart plan is made from: one look at the job, taken as its planning starts.

The checkpoint's batches and health, who holds the job's lease, the restart intent left
beside it and the versions of the job's tables are read here once; the planners read this
record instead of asking the checkpoint, the lease and the tables again. Planned again by
an apply that holds the lease (``Plan.replan``), a new snapshot is taken: the second look
is what makes a change since the first visible.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import (
    LATE_EVENTS,
    LATE_EVENTS_RECONCILED,
    PIPELINE_METRICS,
    TABLE_STATUS,
    TableSpec,
)
from spark_jobs.errors import CheckpointDamaged
from spark_jobs.jobs.base import StreamingJob
from spark_jobs.jobs.registry import get_job
from spark_jobs.runtime.checkpoint import tables_kept
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.intent import RestartIntent, UnreadableIntent
from spark_jobs.runtime.checkpoint.lease import RECONCILE, Holder, Lease
from spark_jobs.runtime.delta.log_damage import TableUnreadable
from spark_jobs.runtime.delta.table_access import table_version


@dataclass(frozen=True)
class JobSnapshot:
    settings: Settings
    job: StreamingJob
    checkpoint: Checkpoint
    # the job's lease, which the plan's apply holds (the apply's own when planned again)
    lease: Lease
    # the live holder of the lease, unless it is this plan's own apply: a run, or another restart
    holder: Holder | None
    problems: list[str]
    committed: list[int]
    # the rewind an older sigflow marked unfinished in sigflow.json (Checkpoint.legacy_pending_rewind)
    legacy_pending_rewind: int | None
    # the restart intent another apply left, or why it cannot be read
    intent: RestartIntent | UnreadableIntent | None
    # the job's own tables' versions (the shared tables are changed by their rows, not restored)
    table_versions: dict[str, int | None] = field(default_factory=dict)
    # a live reconcile of the job, which may be correcting the rows a rewind or recover deletes
    reconciling: Holder | None = None
    # the job runs in one application with others, which was asked to stop it (or will be, by
    # this plan) and starts it again once the restart is applied
    application_waits: bool = False
    # the job's own tables that cannot be read, each with why (its log damaged)
    unreadable_tables: dict[str, str] = field(default_factory=dict)
    # the job's own tables gone, or made anew, since its batches wrote them (tables_kept)
    lost_tables: dict[str, str] = field(default_factory=dict)

    def run_again(self) -> str:
        """What runs the job after the restart: the operator, or its application."""
        if self.application_waits:
            return f"{self.job.name} starts again in its application, which waits for this restart"
        return f"run {self.job.name}"

    @classmethod
    def take(cls, settings: Settings, job_name: str, action: str, lease: Lease | None = None) -> JobSnapshot:
        job = get_job(job_name)
        checkpoint = Checkpoint(settings.checkpoint_uri(job.name))
        lease = lease or Lease(checkpoint, job.name, settings.operations.lease_ttl.seconds, purpose=action)
        holder = last_holder = lease.holder()
        if holder is not None and (not holder.alive() or holder.owner == lease.owner):
            holder = None
        try:
            intent = checkpoint.restart_intent()
        except UnreadableIntent as unreadable:
            intent = unreadable
        reconciling = Lease(checkpoint, job.name, lease.ttl_s, purpose=RECONCILE).holder()
        versions, unreadable = {}, {}
        for spec in job.tables:
            try:
                versions[spec.name] = table_version(settings.table_uri(spec.name))
            except TableUnreadable as damaged:
                versions[spec.name], unreadable[spec.name] = None, damaged.finding
        lost = {}
        with contextlib.suppress(CheckpointDamaged):  # a damaged sigflow.json is one of its problems
            lost = tables_kept.changed_tables(checkpoint, {
                name: uri for name, uri in tables_kept.own_table_uris(settings, job.name).items() if name not in unreadable})
        return cls(settings, job, checkpoint, lease, holder, checkpoint.problems(), checkpoint.committed_batches(),
                   checkpoint.legacy_pending_rewind(), intent, versions,
                   reconciling if reconciling is not None and reconciling.alive() else None,
                   (holder is not None and holder.shared) or lease.stop_requested()
                   or (last_holder is not None and last_holder.left_in_application()), unreadable, lost)

    def uri(self, spec: TableSpec) -> str:
        return self.settings.table_uri(spec.name)


def shared_tables(job: StreamingJob) -> tuple[TableSpec, ...]:
    """The tables a job shares with others, where it owns only its rows. A job whose results
    reconcile corrects owns the decisions on its late events too, stamped with its batch when
    made: a rewind past that batch makes them wait for reconcile again (ops/reconcile.py)."""
    reconciled = (LATE_EVENTS_RECONCILED,) if any(spec.corrected for spec in job.tables) else ()
    return ((LATE_EVENTS,) if job.late_rule else ()) + reconciled + (PIPELINE_METRICS, TABLE_STATUS)
