"""On-call operations on one job: resume, rewind to a batch, recover a lost checkpoint.

Each operation is planned before anything changes. A ``Plan`` lists every change it will
make, every reason it refuses to, and what the operator must do afterwards; ``apply()``
does exactly the listed changes, so the dry run is the truth. ``sigflow stop`` and
``sigflow checkpoint rewind|recover`` and the ``sigflow_restart`` DAG all call this module.

Why rewinds are safe to re-run: before touching anything, a rewind records its intent in
the checkpoint (``pending_rewind``); jobs refuse to start while it is there, and running
the same rewind again finishes it.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import LATE_EVENTS, PIPELINE_METRICS
from spark_jobs.errors import SigflowError
from spark_jobs.jobs import StreamingJob, get_job
from spark_jobs.local import broker
from spark_jobs.ops import status
from spark_jobs.runtime import kafka_client
from spark_jobs.runtime.checkpoint import Checkpoint
from spark_jobs.runtime.delta_sink import commit_metadata

RUNBOOK = "docs/runbooks/rewind-and-reprocess.md"
RECOVER_RUNBOOK = "docs/runbooks/checkpoint-lost-or-corrupt.md"

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


@dataclass
class Plan:
    job: str
    action: str
    steps: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    afterwards: list[str] = field(default_factory=list)
    runbook: str = RUNBOOK
    changes: list[Callable[[], object]] = field(default_factory=list, repr=False)

    def step(self, text: str, change: Callable[[], object]) -> None:
        self.steps.append(text)
        self.changes.append(change)

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

    def apply(self) -> None:
        if self.refusals:
            raise SigflowError(
                f"refusing to {self.action} {self.job}: " + "; ".join(self.refusals), f"see {self.runbook}"
            )
        for change in self.changes:
            change()


# ---- resume ----------------------------------------------------------------------------------
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
    _refuse_pending_rewind(checkpoint, plan)
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


# ---- rewind ----------------------------------------------------------------------------------
def plan_rewind(
    settings: Settings, job_name: str, to_batch: int | None = None, to_time: datetime | None = None
) -> Plan:
    """Re-run every batch after ``to_batch`` (or the last batch that started before ``to_time``)."""
    job = get_job(job_name)
    plan = Plan(job.name, "rewind")
    checkpoint = Checkpoint(settings.checkpoint_uri(job.name))
    _refuse_if_running(settings, job, plan)
    committed = checkpoint.committed_batches()
    pending = checkpoint.identity().get("pending_rewind")
    problems = checkpoint.problems()
    if problems:
        plan.refuse(f"the checkpoint is damaged ({'; '.join(problems)}): recover it instead")
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
    if not committed or (to_batch >= committed[-1] and pending is None):
        plan.refuse(f"batch {to_batch} is not before the last committed batch "
                    f"({committed[-1] if committed else 'none'}): there is nothing after it to re-run")
        return plan
    if to_batch not in committed or checkpoint.offsets(to_batch) is None:
        plan.refuse(f"batch {to_batch} is no longer in the checkpoint (it holds batches "
                    f"{committed[0]}..{committed[-1]}): rebuild with `sigflow checkpoint recover "
                    f"{job.name} --from earliest` instead")
        return plan
    resume_from = checkpoint.offsets(to_batch).sources[0] or {}
    _refuse_if_kafka_dropped(settings, resume_from, plan)

    checkpoint_id = checkpoint.checkpoint_id(job.name)
    plan.step("record the rewind in the checkpoint: jobs refuse to start until it is complete",
              lambda: _record_pending(checkpoint, to_batch))
    for spec in job.tables:
        uri = settings.table_uri(spec.name)
        target = _version_left_by(uri, job.name, checkpoint_id, to_batch)
        current = _table_version(uri)
        if target is None:
            plan.refuse(f"{spec.name} has no commit of batch {to_batch} or earlier from this checkpoint")
        elif target != current:
            plan.step(f"restore {spec.name} to version {target} (left by batch {to_batch}; now {current})",
                      lambda uri=uri, target=target: _restore(uri, target))
    for spec in _shared_tables(job):
        uri = settings.table_uri(spec.name)
        rows = _count_rows(uri, job.name, to_batch)
        if rows:
            plan.step(f"delete the {rows} {spec.name} rows of {job.name} batches after {to_batch}",
                      lambda uri=uri: _delete_rows(uri, job.name, to_batch))
    plan.step(f"delete checkpoint batches {to_batch + 1}..{committed[-1]} (offsets, commits) and the "
              "state versions they wrote", lambda: checkpoint.truncate_after(to_batch))
    plan.step("give the checkpoint a new Delta app id, so the re-run batches are written once",
              lambda: _finish_rewind(checkpoint, job.name, to_batch))
    plan.afterwards.append(f"run {job.name}: it re-reads Kafka from {_offsets_text(resume_from)}")
    return plan


def _last_batch_started_before(checkpoint: Checkpoint, committed: list[int], when: datetime) -> int | None:
    limit_ms = when.timestamp() * 1000
    started = [b for b in committed if (o := checkpoint.offsets(b)) and o.batch_timestamp_ms <= limit_ms]
    return started[-1] if started else None


def _record_pending(checkpoint: Checkpoint, to_batch: int) -> None:
    identity = checkpoint.identity()
    identity["pending_rewind"] = to_batch
    checkpoint.save_identity(identity)


def _finish_rewind(checkpoint: Checkpoint, job: str, to_batch: int) -> None:
    checkpoint.rotate_app_id(job, to_batch)
    identity = checkpoint.identity()
    identity.pop("pending_rewind", None)
    checkpoint.save_identity(identity)


def check_no_pending_rewind(checkpoint: Checkpoint, job: str) -> None:
    """Jobs call this before starting: half a rewind would duplicate or lose rows."""
    pending = checkpoint.identity().get("pending_rewind")
    if pending is not None:
        raise SigflowError(
            f"{job}: a rewind to batch {pending} did not finish",
            f"finish it first: sigflow checkpoint rewind {job} --to-batch {pending} --yes",
        )


def _refuse_pending_rewind(checkpoint: Checkpoint, plan: Plan) -> None:
    pending = checkpoint.identity().get("pending_rewind")
    if pending is not None:
        plan.refuse(f"a rewind to batch {pending} did not finish: run that rewind again first")


# ---- settings a checkpoint depends on ---------------------------------------------------------
INCOMPATIBLE_RUNBOOK = "docs/runbooks/incompatible-change.md"


def checkpoint_settings(job: StreamingJob, settings: Settings) -> dict[str, str]:
    values = {"topics": ",".join(job.topics(settings)), "state_format": str(job.state_format)}
    values.update({name: str(getattr(settings, name)) for name in job.checkpoint_settings})
    return values


# Settings Spark itself keeps in the checkpoint's offset log and uses on every restart,
# whatever the session says: a change is silently ignored unless sigflow refuses it.
SPARK_KEEPS = {"multiple_watermark_policy": "spark.sql.streaming.multipleWatermarkPolicy"}
# What a checkpoint that ran before sigflow recorded an entry was built with.
BEFORE_RECORDED = {"state_format": "1"}


def check_settings_compatible(checkpoint: Checkpoint, job: StreamingJob, settings: Settings) -> None:
    """Refuse to resume a checkpoint built with settings its state depends on, now changed.

    Spark would either fail deep in the JVM (a different state schema), carry on with state
    built under the old windows or topics, or keep the old value without a word (SPARK_KEEPS).
    Recorded at the first run. For a checkpoint that ran before an entry was recorded, the
    entry is read from the offset log when Spark keeps it, else taken from BEFORE_RECORDED,
    else as it is now.
    """
    current = checkpoint_settings(job, settings)
    identity = checkpoint.identity()
    recorded = identity.get("settings")
    if recorded is None or set(current) - set(recorded):
        latest = checkpoint.latest_offsets()
        kept = latest.conf if latest else {}
        earlier = {k: v for k, v in BEFORE_RECORDED.items() if latest and k in current}
        from_spark = {k: kept[conf] for k, conf in SPARK_KEEPS.items() if k in current and conf in kept}
        recorded = {**current, **earlier, **from_spark, **(recorded or {})}
        checkpoint.save_identity({**identity, "settings": recorded})
    changed = {k: (recorded.get(k), v) for k, v in current.items() if recorded.get(k) != v}
    if changed:
        what = "; ".join(f"{k} was {old!r}, now {new!r}" for k, (old, new) in changed.items())
        raise SigflowError(
            f"{job.name}: its checkpoint was built with other settings ({what}); resuming would "
            "mix state built under the old settings with the new",
            f"restore the old value, or rebuild under the new one: sigflow checkpoint recover "
            f"{job.name} --from earliest --force --yes (see {INCOMPATIBLE_RUNBOOK})",
        )


# ---- recover ---------------------------------------------------------------------------------
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
    plan = Plan(job.name, "recover", runbook=RECOVER_RUNBOOK)
    checkpoint = Checkpoint(settings.checkpoint_uri(job.name))
    _refuse_if_running(settings, job, plan)
    problems = checkpoint.problems()
    if checkpoint.exists() and not problems and not force:
        plan.refuse(f"the checkpoint at {checkpoint.uri} looks sound (last committed batch "
                    f"{checkpoint.last_committed()}): resume or rewind it; --force replaces it anyway")
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
        _refuse_if_kafka_dropped(settings, {t: None for t in job.topics(settings)}, plan)
        for spec in job.tables:
            uri = settings.table_uri(spec.name)
            plan.step(f"delete every row of {spec.name} ({_count_rows(uri)} rows); the job rebuilds it",
                      lambda uri=uri: _delete_rows(uri))
        for spec in _shared_tables(job):
            uri = settings.table_uri(spec.name)
            plan.step(f"delete the {_count_rows(uri, job.name)} {spec.name} rows of {job.name}",
                      lambda uri=uri: _delete_rows(uri, job.name))
        plan.afterwards.append("readers see these tables empty until the re-run has caught up")
    else:
        raise SigflowError(f"unknown recovery source {source!r}", "use delta or earliest")
    if plan.refusals:
        plan.steps.clear()
        return plan
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    if checkpoint.exists() or checkpoint.identity():
        plan.step(f"move the old checkpoint aside to {checkpoint.uri}.lost-{stamp} (kept for study)",
                  lambda: checkpoint.move_aside(f"lost-{stamp}"))
    plan.step(f"start a new checkpoint at {checkpoint.uri} whose first batch reads from "
              f"{_offsets_text(start) if isinstance(start, dict) else start}",
              lambda: checkpoint.start_fresh(
                  job.name, start if isinstance(start, str) else _json(start),
                  {"source": source, "at": stamp}))
    plan.afterwards.append(f"run {job.name}")
    return plan


def _plan_start_from_delta(settings: Settings, job: StreamingJob, plan: Plan) -> dict | None:
    """Kafka offsets after the last batch every table of the job committed."""
    newest = {}
    for spec in job.tables:
        uri = settings.table_uri(spec.name)
        history = [e for e in _history(uri) if e.get("job") == job.name and e.get("kafka_end_offsets")]
        if history:
            newest[spec.name] = (uri, history)
    if len(newest) < len(job.tables):
        missing = sorted({s.name for s in job.tables} - set(newest))
        plan.refuse(f"no sigflow commit metadata in {', '.join(missing)}: nothing to start from; "
                    "use --from earliest")
        return None

    def position(entry: dict) -> int:
        return sum(int(o) for parts in entry["kafka_end_offsets"].values() for o in parts.values())

    common = min((history[0] for _, history in newest.values()), key=position)
    for name, (uri, history) in newest.items():
        if history[0]["kafka_end_offsets"] == common["kafka_end_offsets"]:
            continue
        match = next((e for e in history if e["kafka_end_offsets"] == common["kafka_end_offsets"]), None)
        if match is None:
            plan.refuse(f"{name} never committed the batch its sibling tables stopped at")
        else:  # a crash between two tables of one batch: bring the one ahead back in line
            plan.step(f"restore {name} to version {match['version']}, the batch all tables hold",
                      lambda uri=uri, v=match["version"]: _restore(uri, v))
    return common["kafka_end_offsets"]


# ---- shared checks and Delta helpers ------------------------------------------------------------
def _refuse_if_running(settings: Settings, job: StreamingJob, plan: Plan) -> None:
    pid = status.running_pid(settings, job.name)
    if pid is not None:
        plan.refuse(f"{job.name} is running (pid {pid}): stop it first with `sigflow stop {job.name}`")


def _refuse_if_kafka_dropped(settings: Settings, start: dict, plan: Plan) -> None:
    """Refuse when Kafka retention already deleted records the re-run would need."""
    bootstrap = broker.bootstrap_servers(settings)
    kafka_client.check_reachable(bootstrap)
    for topic, parts in start.items():
        partitions = [int(p) for p in parts] if parts else kafka_client.topic_partitions(bootstrap, topic)
        for p, (earliest, _) in kafka_client.offset_bounds(bootstrap, topic, partitions).items():
            needed = int(parts[str(p)]) if parts else 0
            if earliest > needed:
                plan.refuse(f"Kafka retention removed {topic}[{p}] offsets {needed}..{earliest - 1}, "
                            "which the re-run would need")


def _shared_tables(job: StreamingJob):
    return ((LATE_EVENTS,) if job.late_rule else ()) + (PIPELINE_METRICS,)


def _history(uri: str) -> list[dict]:
    from deltalake import DeltaTable

    return commit_metadata(uri) if DeltaTable.is_deltatable(uri) else []


def _version_left_by(uri: str, job: str, checkpoint_id: str, batch_id: int) -> int | None:
    """The newest table version written by this checkpoint's batch ``batch_id`` or earlier.

    Newest wins because a rewind re-writes batch ids: after rewinding to N the commits of
    batches above N that came before it are no longer part of the answer.
    """
    for entry in _history(uri):
        same = entry.get("job") == job and entry.get("checkpoint_id", checkpoint_id) == checkpoint_id
        if same and int(entry.get("batch_id", -1)) <= batch_id:
            return int(entry["version"])
    return None


def _table_version(uri: str) -> int | None:
    from deltalake import DeltaTable

    return DeltaTable(uri).version() if DeltaTable.is_deltatable(uri) else None


def _restore(uri: str, version: int) -> None:
    from deltalake import DeltaTable

    DeltaTable(uri).restore(version)


def _predicate(job: str | None, after_batch: int | None) -> str | None:
    parts = ([f"job = '{job}'"] if job else []) + ([f"batch_id > {after_batch}"] if after_batch is not None else [])
    return " AND ".join(parts) or None


def _count_rows(uri: str, job: str | None = None, after_batch: int | None = None) -> int:
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(uri):
        return 0
    dataset = DeltaTable(uri).to_pyarrow_dataset()
    condition = None
    if job:
        condition = ds.field("job") == job
    if after_batch is not None:
        later = ds.field("batch_id") > after_batch
        condition = later if condition is None else condition & later
    return dataset.count_rows(filter=condition)


def _delete_rows(uri: str, job: str | None = None, after_batch: int | None = None) -> None:
    from deltalake import DeltaTable

    if DeltaTable.is_deltatable(uri):
        DeltaTable(uri).delete(_predicate(job, after_batch))


def _offsets_text(offsets: dict) -> str:
    return ", ".join(
        f"{topic}[{p}]@{o}" for topic, parts in sorted(offsets.items()) for p, o in sorted(parts.items())
    ) or "the start"


def _json(value) -> str:
    import json

    return json.dumps(value)
