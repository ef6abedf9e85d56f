"""A restart plan: every change it will make, every reason it refuses, what comes after,
and the refusals all three operations share."""

from __future__ import annotations

import hashlib
import json
import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import LATE_EVENTS, RESTART_AUDIT
from spark_jobs.errors import JobAlreadyRunning, SigflowError
from spark_jobs.ops.restart import audit
from spark_jobs.ops.restart.audit import Approval
from spark_jobs.ops.restart.snapshot import JobSnapshot
from spark_jobs.runtime import failpoints
from spark_jobs.runtime.checkpoint import tables_kept
from spark_jobs.runtime.checkpoint.intent import RestartIntent, UnreadableIntent
from spark_jobs.runtime.checkpoint.lease import RUN, Holder, Lease
from spark_jobs.runtime.delta import log_damage
from spark_jobs.runtime.delta.fence import fence_after_takeover
from spark_jobs.runtime.kafka import address as kafka_address
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.kafka import offsets as kafka_offsets

log = logging.getLogger("sigflow.restart")
RUNBOOK = "docs/runbooks/rewind-and-reprocess.md"
RECOVER_RUNBOOK = "docs/runbooks/checkpoint-lost-or-corrupt.md"


@dataclass
class Plan:
    job: str
    action: str
    steps: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    afterwards: list[str] = field(default_factory=list)
    runbook: str = RUNBOOK
    changes: list[Callable[[], object]] = field(default_factory=list, repr=False)
    # the job's lease, held from the first change that is not a stop to the end of the apply
    lease: Lease | None = field(default=None, repr=False)
    stops: int = 0  # how many of the first changes stop the running job (before the lease)
    # the command that applies this very restart (recorded in its intent: it finishes it)
    command: str = ""
    # the same request planned again; ``apply`` calls it once it holds the lease
    replan: Callable[[], Plan] | None = field(default=None, repr=False)
    audit_uri: str = ""  # restart_audit, where each apply is recorded
    # what it was planned from (None for a plan made by hand)
    snapshot: JobSnapshot | None = field(default=None, repr=False)
    # the device_events_raw version a replay from raw was planned on: planned again alike
    raw_version: int | None = None

    @classmethod
    def of(cls, snapshot: JobSnapshot, action: str, runbook: str = RUNBOOK) -> Plan:
        """An empty plan of ``action``, applied holding the snapshot's lease (see ``apply``)."""
        return cls(snapshot.job.name, action, runbook=runbook, lease=snapshot.lease,
                   audit_uri=snapshot.settings.table_uri(RESTART_AUDIT.name), snapshot=snapshot)

    def step(self, text: str, change: Callable[[], object]) -> None:
        self.steps.append(text)
        self.changes.append(change)

    def stop_step(self, text: str, change: Callable[[], object]) -> None:
        """A change that stops the job's running query: applied before the lease is taken."""
        self.step(text, change)
        self.stops = len(self.changes)

    def refuse(self, reason: str) -> None:
        self.refusals.append(reason)

    def describe(self) -> str:
        lines = [f"{self.action} {self.job}:"]
        if self.refusals:
            lines += [f"  REFUSED: {reason}" for reason in self.refusals]
            lines.append(f"  see {self.runbook}")
            return "\n".join(lines)
        lines += [f"  {n}. {text}" for n, text in enumerate(self.steps, 1)] or ["  nothing to change"]
        lines += [f"  then: {text}" for text in self.afterwards]
        return "\n".join(lines)

    def commitments(self) -> list[str]:
        """What approving this plan agrees to: its refusals and its changes, in order."""
        return [f"REFUSED: {reason}" for reason in self.refusals] + self.steps

    def digest(self) -> str:
        """What an approval binds to: a hash of the job, the action and ``commitments()``.
        Any change of state that changes the plan changes it."""
        return hashlib.sha256(json.dumps([self.job, self.action, self.commitments()]).encode()).hexdigest()

    def changes_since(self, approved: list[str]) -> list[str]:
        """How this plan differs from the ``commitments()`` someone approved earlier: the
        state moved in between (more batches committed, the job started, a table written)."""
        now = self.commitments()
        return ([f"approved, no longer planned: {line}" for line in approved if line not in now]
                + [f"planned now, not approved: {line}" for line in now if line not in approved])

    def markdown(self) -> str:
        """The plan for a form that renders Markdown (the Airflow approval page)."""
        if self.refusals:
            return "\n".join([*(f"- **refused**: {reason}" for reason in self.refusals), "", f"See `{self.runbook}`."])
        lines = [f"{n}. {text}" for n, text in enumerate(self.steps, 1)] or ["Nothing to change."]
        if self.afterwards:
            lines += ["", "Then:", *(f"- {text}" for text in self.afterwards)]
        return "\n".join([*lines, "", f"Runbook: `{self.runbook}`."])

    def apply(self, approval: Approval | None = None) -> None:
        """Make every change in order (see ``_apply``), and append what happened to
        restart_audit: applied, refused (nothing changed) or failed, with who requested and
        who approved it (``approval``; the CLI's by default)."""
        approval = approval or Approval.cli()
        try:
            self._apply()
        except (PlanRefused, JobAlreadyRunning) as refused:
            self._audit(approval, audit.REFUSED, str(refused))
            raise
        except BaseException as failure:
            self._audit(approval, audit.FAILED, f"{type(failure).__name__}: {failure}")
            raise
        self._audit(approval, audit.APPLIED)

    def _audit(self, approval: Approval, outcome: str, detail: str = "") -> None:
        if not self.audit_uri:
            return
        try:
            audit.record(self.audit_uri, self, approval, outcome, detail)
        except Exception:
            if outcome == audit.APPLIED:
                raise  # applied, not recorded: the operator must know
            log.warning("restart_audit: the %s row of %s %s could not be written", outcome, self.action, self.job,
                        exc_info=True)

    def _apply(self) -> None:
        """Hold the job's lease after any stop: a run (the scheduler's, a CLI's) cannot start
        on a checkpoint being changed under it, and an apply does not start while a run
        holds it (refused, naming the run).

        Holding the lease, the request is planned again and applied only if that plan is
        this one: a run that committed between planning and the lease (a scheduled run, a
        CLI's) would otherwise be undone or skipped by changes planned without it."""
        if self.refusals:
            raise PlanRefused(
                f"refusing to {self.action} {self.job}: " + "; ".join(self.refusals), f"see {self.runbook}"
            )
        for change in self.changes[:self.stops]:
            change()
        with self.lease or nullcontext():
            now = self.replan() if self.replan else self
            if now is not self:
                moved = now.changes_since(self.steps[self.stops:])
                if moved:
                    raise PlanRefused(
                        f"{self.action} {self.job} not applied: the job's state moved between planning "
                        "and taking its lease; nothing was changed",
                        f"plan it again (`{self.command.removesuffix(' --yes')}`) and check the new plan",
                        details=moved)
            if self.lease and self.snapshot:  # a run it took the lease from may still be writing
                job = self.snapshot.job
                fence_after_takeover(self.snapshot.settings, job.name,
                                     job.tables + ((LATE_EVENTS,) if job.late_rule else ()), self.lease)
            if self.lease:  # an apply that dies half way leaves this: the job refuses to start
                self.lease.checkpoint.record_intent(RestartIntent(action=self.action, job=self.job,
                                                                  steps=now.steps, command=self.command))
            for n, change in enumerate(now.changes[now.stops:], 1):
                change()
                failpoints.hit("after_restart_step", n, self.job)
            if self.lease:
                self.lease.checkpoint.clear_intent()
                self.lease.clear_stop_request()  # a job of a shared application may go on now


class PlanRefused(SigflowError):
    """An apply that changed nothing: the plan refuses, or the state moved since it was made."""


def refuse_if_running(snapshot: JobSnapshot, plan: Plan) -> None:
    holder, name = snapshot.holder, snapshot.job.name
    if holder is not None and not refuse_if_applying(holder, plan):
        plan.refuse(f"{name} is running (pid {holder.pid}): stop it first with `sigflow stop {name}`")


def refuse_if_tables_lost(snapshot: JobSnapshot, plan: Plan) -> None:
    """A table of the job's own that cannot be read, or is gone since its batches wrote it:
    a resume or a rewind would stop at it, as its run does; a recover rebuilds it."""
    job = snapshot.job.name
    found = [f"{name} cannot be read ({why})" for name, why in snapshot.unreadable_tables.items()]
    found += [f"{name} {change} since {job} wrote it" for name, change in snapshot.lost_tables.items()]
    if found:
        plan.refuse("; ".join(found) + f": rebuild it with `{tables_kept.rebuild_command(job)}` instead")
        plan.runbook = log_damage.RUNBOOK


def refuse_if_applying(holder: Holder, plan: Plan) -> bool:
    """Refuse when the lease's holder is another restart being applied, not a run: it is
    neither stopped nor planned around. True when it refused."""
    if holder.purpose == RUN:
        return False
    plan.refuse(f"a {holder.purpose} of {holder.job} is being applied ({holder.describe()}): let it finish, "
                "then plan again")
    return True


def refuse_if_reconciling(plan: Plan) -> None:
    """A rewind or recover refuses while a reconcile of the job runs: it would delete rows
    and decisions under the reconcile's corrections, or the reconcile would correct rows the
    re-run then writes again. Looked at again holding the job's lease (``Plan.replan``), after
    which a reconcile starting refuses in turn (ops/reconcile.py)."""
    reconciling = plan.snapshot.reconciling if plan.snapshot else None
    if reconciling is not None:
        plan.refuse(f"a reconcile of {reconciling.job} is running ({reconciling.describe()}): let it finish, "
                    "then plan again")


def refuse_if_unfinished_restart(plan: Plan, supersedes: bool = False) -> None:
    """Any plan refuses while another restart is half applied on the job (its intent is
    there): planned on top of it, it would skip or repeat rows. Applying that same restart
    again is what finishes it. A plan that ``supersedes`` every half-applied state (a recover
    from earliest: every row of the job deleted, the checkpoint moved aside) is the way out
    when that restart can no longer finish (a rewind whose target maintenance vacuumed
    since): it says so as its first step, and its own intent replaces the other's."""
    pending = plan.snapshot.intent if plan.snapshot else None
    if isinstance(pending, UnreadableIntent):
        plan.refuse(f"{pending.message} ({pending.hint})")
        return
    if pending is None or pending.command == plan.command:
        return
    if supersedes and not plan.refusals:
        plan.steps.insert(0, f"give up the unfinished {pending.action} of {pending.job} "
                             f"(`{pending.finishing_command()}`): this recover rebuilds everything it touched")
        plan.changes.insert(0, lambda: None)
        return
    plan.refuse(f"a {pending.action} of {pending.job} did not finish ({len(pending.steps)} steps planned): "
                f"finish it first with `{pending.finishing_command()}`, or rebuild the job with "
                f"`sigflow checkpoint recover {pending.job} --from earliest --force`")


def refuse_if_kafka_dropped(settings: Settings, start: dict, plan: Plan) -> None:
    """Refuse when Kafka retention already deleted records the re-run would need."""
    for topic, gone in kafka_dropped(settings, start).items():
        for p, (needed, earliest) in sorted(gone.items()):
            plan.refuse(f"Kafka retention removed {topic}[{p}] offsets {needed}..{earliest - 1}, "
                        "which the re-run would need")


def kafka_dropped(settings: Settings, start: dict) -> dict[str, dict[int, tuple[int, int]]]:
    """Per topic and partition, (the offset a re-run from ``start`` needs, Kafka's earliest)
    where retention already deleted records it needs; ``start`` {topic: None} means offset 0."""
    bootstrap = kafka_address.connection(settings)
    listing = kafka_admin.check_reachable(bootstrap).listing
    gone: dict[str, dict[int, tuple[int, int]]] = {}
    for topic, parts in start.items():
        bounds = (kafka_offsets.offset_bounds(bootstrap, topic, [int(p) for p in parts]) if parts
                  else kafka_offsets.topic_bounds(bootstrap, topic, listing))
        for p, (earliest, _) in bounds.items():
            needed = int(parts[str(p)]) if parts else 0
            if earliest > needed:
                gone.setdefault(topic, {})[p] = (needed, earliest)
    return gone


def kafka_bounds(settings: Settings, topics: list[str]) -> dict[str, dict[int, tuple[int, int]]]:
    """Per topic, each partition's (earliest offset, end offset) in Kafka now."""
    bootstrap = kafka_address.connection(settings)
    listing = kafka_admin.check_reachable(bootstrap).listing
    return {topic: kafka_offsets.topic_bounds(bootstrap, topic, listing) for topic in topics}


def refuse_pending_rewind(snapshot: JobSnapshot, plan: Plan) -> None:
    """A rewind an older sigflow left half done (one now leaves its intent, which every plan
    refuses over: ``refuse_if_unfinished_restart``)."""
    pending = snapshot.legacy_pending_rewind  # a damaged sigflow.json is one of the problems, refused as such
    if pending is not None:
        plan.refuse(f"a rewind to batch {pending} did not finish: run that rewind again first")


def offsets_text(offsets: dict) -> str:
    return ", ".join(
        f"{topic}[{p}]@{o}" for topic, parts in sorted(offsets.items()) for p, o in sorted(parts.items())
    ) or "the start"
