"""What on-call asks first: is each job running, how far has it got, how far behind is it.

Read from the checkpoints, the pipeline_metrics table and Kafka only (no Spark needed), so
`sigflow status` answers in a second even while the jobs are down.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from spark_jobs.config import Settings
from spark_jobs.errors import (
    CheckpointDamaged,
    CheckpointIdentityLost,
    NeedsRestart,
    SigflowError,
)
from spark_jobs.jobs.registry import ALL_JOBS, REAL_TIME_JOBS, get_any_job
from spark_jobs.ops import kafka_gaps
from spark_jobs.ops.late_backlog import LateBacklog, backlog
from spark_jobs.ops.late_backlog import describe as describe_backlog
from spark_jobs.ops.metrics_totals import JobFigures, MetricsTotals
from spark_jobs.runtime.checkpoint import guards, tables_kept
from spark_jobs.runtime.checkpoint.directory import Checkpoint, recover_hint
from spark_jobs.runtime.checkpoint.lease import Holder, Lease
from spark_jobs.runtime.delta.log_damage import TableUnreadable
from spark_jobs.runtime.kafka import address as kafka_address
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.kafka import offsets as kafka_offsets


def running_holder(settings: Settings, job: str) -> Holder | None:
    """The live run holding the job's checkpoint lease, on any host, or None."""
    holder = Lease(Checkpoint(settings.checkpoint_uri(job)), job, settings.operations.lease_ttl.seconds).holder()
    return holder if holder is not None and holder.alive() else None


def running_pid(settings: Settings, job: str) -> int | None:
    """The pid of the job's live run (on its host: see ``running_holder``), or None."""
    holder = running_holder(settings, job)
    return holder.pid if holder else None


NO_WATERMARK = "none yet"
STALLED_AFTER_TRIGGERS = 10  # a running job with records waiting and no batch for this many triggers
STALLED_AFTER_MIN_S = 120.0


def _utc(value):
    """A pandas Timestamp in UTC from epoch milliseconds or any time pandas reads; None for
    no time (None, NaN, NaT)."""
    import pandas as pd

    if value is None or (not isinstance(value, (int, float)) and pd.isna(value)):
        return None
    if isinstance(value, (int, float)):
        return None if value != value else pd.Timestamp(value, unit="ms", tz="UTC")
    stamp = pd.Timestamp(value)
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")


def format_time(value) -> str:
    """A time as on-call reads it everywhere: ISO 8601 in UTC, to the second."""
    stamp = _utc(value)
    return "-" if stamp is None else stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_watermark(value) -> str:
    """A watermark in that form, or "none yet" before a query has one (Spark reports the
    epoch, pandas NaT)."""
    stamp = _utc(value)
    return NO_WATERMARK if stamp is None or stamp.value <= 0 else format_time(stamp)


def format_age(seconds: float) -> str:
    whole = max(int(seconds), 0)
    if whole < 120:
        return f"{whole} s ago"
    if whole < 7200:
        return f"{whole // 60} min ago"
    if whole < 2 * 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min ago"
    return f"{whole // 86400} days ago"


@dataclass(frozen=True)
class Verdict:
    word: str  # OK, LAGGING, STALLED, FAILED, NEVER RUN, DAMAGED, TABLE LOST, CHECKPOINT LOST, DATA LOSS,
    #            RESTART UNFINISHED, SETTINGS CHANGED, PRODUCER CLOCK
    reason: str
    next_step: str = ""


def verdict(job: str, *, running: bool, last_batch: int | None, planned_batch: int | None,
            stale_lease: bool, behind: int | None, age_s: float | None, trigger_s: float,
            batch_records: int, stop_requested: bool = False, application_pid: int | None = None) -> Verdict:
    """The one word on-call reads first, from what the checkpoint, the lease and Kafka say
    (docs/observability.md states the rules). ``stop_requested``: `sigflow stop` asked the
    job, run in one application with others, to stop, and it stays stopped until a restart
    of it is applied. ``application_pid``: the job's last run was one of an application
    still running here, which starts it again (after a failure's backoff, or once the
    restart a failure needs has been applied)."""
    waiting = f"{behind:,} records waiting in Kafka" if behind else "nothing waiting in Kafka"
    idle = "stopped by `sigflow stop` until a restart of it is applied" if stop_requested else "not running"
    start = f"`sigflow checkpoint resume {job} --yes`" if stop_requested else f"`sigflow run {job}`"
    in_application = application_pid is not None and not stop_requested
    if in_application:
        idle = f"not running: its application (pid {application_pid}) starts it again"
        start = f"its application's log says what it waits for (pid {application_pid})"
    if behind is None:
        waiting = "records waiting unknown (Kafka or the job's topics unavailable)"
    if not running and (stale_lease or (planned_batch is not None and planned_batch != last_batch)):
        stopped = (f"batch {planned_batch} was planned and never committed" if planned_batch != last_batch
                   else "its last run ended without releasing its lease")
        rerun = (f"its application (pid {application_pid}) re-runs the batch once" if in_application
                 else f"then `sigflow run {job}` (it re-runs the batch once)")
        return Verdict("FAILED", f"{stopped}: the last run stopped mid-way; {waiting}",
                       f"docs/runbooks/job-crashed.md, {rerun}")
    if last_batch is None:
        if running:
            return Verdict("OK", f"first batch under way; {waiting}")
        return Verdict("NEVER RUN", f"{idle}; {waiting}" if stop_requested or in_application else waiting,
                       start if behind or stop_requested or in_application else "")
    if running and behind and age_s is not None and age_s > max(STALLED_AFTER_TRIGGERS * trigger_s, STALLED_AFTER_MIN_S):
        return Verdict("STALLED", f"running, {waiting}, but no batch for {format_age(age_s).removesuffix(' ago')}",
                       "docs/runbooks/job-lagging.md")
    if behind and not running:
        return Verdict("LAGGING", f"{idle}; {waiting}", start)
    if behind and behind > batch_records:
        return Verdict("LAGGING", f"running; {waiting}, more than one batch ({batch_records:,})",
                       "docs/runbooks/job-lagging.md")
    if not running:
        return Verdict("OK", f"{idle}; {waiting}", start if stop_requested or in_application else "")
    return Verdict("OK", f"running; {waiting}")


@dataclass
class JobStatus:
    job: str
    running_pid: int | None
    stateful: bool = True  # a stateless job has no watermark, state or rows dropped late
    verdict: Verdict | None = None
    last_batch: int | None = None
    last_batch_time: str | None = None
    last_batch_ms: int | None = None  # when the last committed batch started, epoch ms
    age_s: float | None = None
    watermark: str = NO_WATERMARK
    watermark_ms: int | None = None  # epoch ms; None before the query has a watermark
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    state_rows: int | None = None
    rows_dropped_by_watermark: int = 0
    lag: dict[str, int] = field(default_factory=dict)  # "topic[partition]" -> records behind
    behind: int | None = None  # every partition of the job's topics; None when Kafka is unreachable
    late_backlog: LateBacklog | None = None  # a job whose results reconcile corrects

    def lines(self) -> list[str]:
        head = f"{self.job}: {self.verdict.word if self.verdict else '?'}"
        if self.running_pid:
            head += f" (running, pid {self.running_pid})"
        if self.last_batch is not None:
            head += f", last batch {self.last_batch}, {format_age(self.age_s or 0)} ({self.last_batch_time})"
        damaged = self.verdict is not None and self.verdict.word == "DAMAGED"
        out = [head + (f", watermark {self.watermark}" if self.stateful and not damaged else "")]
        if self.verdict:
            out.append(f"  {self.verdict.reason}")
        if self.last_batch is not None:
            rates = (f"  rates: {self.input_rows_per_second or 0:,.1f} rows/s in, "
                     f"{self.processed_rows_per_second or 0:,.1f} rows/s processed")
            if self.stateful:
                state = f"{self.state_rows:,}" if self.state_rows is not None else "-"
                rates += f"; state rows {state}; dropped late (all batches): {self.rows_dropped_by_watermark:,}"
            out.append(rates)
        if self.late_backlog is not None:
            out.append(f"  {describe_backlog(self.late_backlog)}")
        if self.lag:
            out.append("  kafka lag: " + ", ".join(f"{k}={v}" for k, v in sorted(self.lag.items())))
        if self.verdict and self.verdict.next_step:
            out.append(f"  next: {self.verdict.next_step}")
        return out


def read_metrics(settings: Settings, summed: tuple[str, ...] = ("rows_dropped_by_watermark",)) -> dict[str, JobFigures]:
    """Each job's figures from pipeline_metrics, read in chunks ({} before the table exists)."""
    return MetricsTotals(settings, summed).refresh()


TopicOffsets = Callable[[str], dict[int, tuple[int, int]]]  # a topic -> each partition's (earliest, end) offsets


def topic_offsets(settings: Settings, listing: kafka_admin.ClusterMetadata | None = None) -> TopicOffsets:
    """Each topic's partitions' earliest and end offsets, asked of Kafka once per topic: the
    jobs of one status share their topics (six read the events). ``listing``: the topics a
    reachability check listed. A topic that does not exist raises ``SigflowError``."""
    bootstrap = kafka_address.connection(settings)
    return functools.cache(functools.partial(kafka_offsets.topic_bounds, bootstrap, listing=listing))


TopicClocks = Callable[[str], str]  # a topic -> which clock stamps its records (kafka_admin.TIMESTAMP_TYPE)


def topic_clocks(settings: Settings, client=None) -> TopicClocks:
    """Each topic's ``message.timestamp.type``, asked of Kafka once per topic through one
    client (``client``: the one a reachability check answered)."""
    target = kafka_address.connection(settings)
    client = client or kafka_admin.admin(target)
    return functools.cache(lambda topic: kafka_admin.timestamp_types(target, [topic], client=client)[topic])


def _lag(settings: Settings, job: str, committed: dict[str, dict[str, int]], in_kafka: TopicOffsets) -> dict[str, int]:
    """Records behind per partition of the job's topics: from the committed offsets, or from
    the earliest offset for a partition the job has not read yet (a new job, a new partition)."""
    lag = {}
    for topic in get_any_job(job).topics(settings.streaming):
        done = committed.get(topic, {})
        for p, (earliest, end) in in_kafka(topic).items():
            lag[f"{topic}[{p}]"] = max(end - max(int(done.get(str(p), earliest)), earliest), 0)
    return lag


def _commit_interval_s(settings: Settings, job: str) -> float:
    """How often the job commits a batch when it runs continuously."""
    if job in REAL_TIME_JOBS:
        return settings.streaming.real_time_checkpoint_interval.seconds
    return settings.streaming.trigger_interval.seconds


def job_status(settings: Settings, job: str, metrics: dict[str, JobFigures] | None = None,
               with_lag: bool = True, in_kafka: TopicOffsets | None = None,
               clocks: TopicClocks | None = None) -> JobStatus:
    """``in_kafka`` and ``clocks``: the topics' offsets and clocks, shared by the jobs of one
    status (``topic_offsets``, ``topic_clocks``)."""
    checkpoint = Checkpoint(settings.checkpoint_uri(job))
    job_lease = Lease(checkpoint, job, settings.operations.lease_ttl.seconds)
    lease = job_lease.holder()
    running = lease is not None and lease.alive()
    status = JobStatus(job, lease.pid if running else None, stateful=get_any_job(job).stateful)
    last = checkpoint.last_committed()
    planned = max(checkpoint.offset_batches(), default=None)
    committed: dict[str, dict[str, int]] = {}
    if not running:  # a restart being applied holds the lease, its intent recorded
        status.verdict = _unfinished_restart_verdict(checkpoint, job)
        if status.verdict is not None:
            return status
    try:
        identity = checkpoint.check_identity_kept(job)  # sigflow.json, which each run reads first
        offsets = checkpoint.offsets(last) if last is not None else None
    except CheckpointDamaged as damaged:  # one job's, said in its place: the others still answer
        status.verdict = _damaged_verdict(job, damaged)
        return status
    except CheckpointIdentityLost as lost:
        status.verdict = Verdict("DAMAGED", lost.message, lost.hint)
        return status
    if offsets is not None:
        status.last_batch = last
        status.last_batch_time = format_time(offsets.batch_timestamp_ms)
        status.age_s = time.time() - offsets.batch_timestamp_ms / 1000
        status.last_batch_ms = offsets.batch_timestamp_ms
        status.watermark = format_watermark(offsets.watermark_ms)
        status.watermark_ms = offsets.watermark_ms or None  # Spark's 0 means none yet
        committed = {topic: parts for source in offsets.sources if source for topic, parts in source.items()}
    figures = (metrics or {}).get(job)
    if figures is not None and figures.batches:
        status.input_rows_per_second = float(figures.latest["input_rows_per_second"])
        status.processed_rows_per_second = float(figures.latest["processed_rows_per_second"])
        status.state_rows = int(figures.latest["state_rows"])
        status.rows_dropped_by_watermark = figures.sums["rows_dropped_by_watermark"]
    gaps: list[kafka_gaps.KafkaGap] = []
    clock_refusal = None
    if with_lag:
        in_kafka = in_kafka or topic_offsets(settings)
        try:
            status.lag = _lag(settings, job, committed, in_kafka)
            status.behind = sum(status.lag.values())
            gaps = kafka_gaps.gaps(get_any_job(job).topics(settings.streaming), committed, in_kafka)
            clock_refusal = _clock_verdict(settings, job, clocks)
        except SigflowError:  # a topic not created yet: status still answers for the rest
            pass
    status.verdict = (_settings_verdict(settings, identity, job) or _tables_verdict(settings, checkpoint, job)
                      or clock_refusal)
    if status.verdict is not None:
        return status
    if gaps:  # a run, or the restart its application waits for, stops on them
        status.verdict = Verdict("DATA LOSS", *kafka_gaps.described(
            job, gaps, settings.kafka.fail_on_data_loss, kafka_gaps.raw_holds(settings, job, gaps)))
        return status
    left_held = lease is not None and not lease.released and not running  # a run that died holding it
    status.verdict = verdict(
        job, running=running, last_batch=last, planned_batch=planned, stale_lease=left_held,
        behind=status.behind, age_s=status.age_s, trigger_s=_commit_interval_s(settings, job),
        batch_records=settings.kafka.max_offsets_per_trigger, stop_requested=not running and job_lease.stop_requested(),
        application_pid=lease.pid if not running and lease is not None and lease.left_in_application() else None)
    return status


def _unfinished_restart_verdict(checkpoint: Checkpoint, job: str) -> Verdict | None:
    """A restart whose apply stopped half way: every run of the job, and every other restart
    of it, is refused until that one has been applied again (the check each run makes first)."""
    try:
        guards.check_no_unfinished_restart(checkpoint, job)
    except NeedsRestart as unfinished:
        return Verdict("RESTART UNFINISHED", unfinished.message.removeprefix(f"{job}: "), unfinished.hint)
    return None


def _settings_verdict(settings: Settings, identity: dict, job: str) -> Verdict | None:
    """A setting the job's state was built with, another in these settings: a run with them is
    refused (runtime/checkpoint/guards.py). Only the settings the checkpoint (``identity``: its
    sigflow.json) recorded."""
    recorded = identity.get("settings") or {}
    changed = guards.settings_changed(recorded, guards.checkpoint_settings(get_any_job(job), settings))
    if not changed:
        return None
    refused = guards.incompatible(job, changed)
    return Verdict("SETTINGS CHANGED", refused.message.removeprefix(f"{job}: "), refused.hint)


def _clock_verdict(settings: Settings, job: str, clocks: TopicClocks | None) -> Verdict | None:
    """A source topic stamped with its producers' clock: a micro-batch run is refused
    (runtime/checkpoint/guards.py) unless the settings accept it."""
    if job in REAL_TIME_JOBS or settings.kafka.accept_producer_time:
        return None
    clocks = clocks or topic_clocks(settings)
    topics = get_any_job(job).topics(settings.streaming)
    try:
        guards.check_broker_time(get_any_job(job), settings, {topic: clocks(topic) for topic in topics})
    except SigflowError as refused:
        return Verdict("PRODUCER CLOCK", refused.message.removeprefix(f"{job}: "), refused.hint)
    return None


def _tables_verdict(settings: Settings, checkpoint: Checkpoint, job: str) -> Verdict | None:
    """The job's own table gone or made anew since its batches wrote it, or its checkpoint
    gone while they hold its rows: its next run is refused (runtime/checkpoint/tables_kept.py);
    one running now writes into a table that lacks the rows before."""
    own = tables_kept.own_table_uris(settings, job)
    try:
        tables_kept.check_tables_kept(checkpoint, job, own)
        tables_kept.check_checkpoint_there(checkpoint, job, own, settings.kafka.starting_offsets)
    except tables_kept.TableLost as lost:
        return Verdict("TABLE LOST", lost.message.removeprefix(f"{job}: "), lost.hint)
    except tables_kept.CheckpointMissing as missing:
        return Verdict("CHECKPOINT LOST", missing.message.removeprefix(f"{job}: "), missing.hint)
    except TableUnreadable:  # `sigflow tables` names it; the run is refused naming it
        pass
    except CheckpointDamaged as damaged:  # sigflow.json, which records the tables' ids
        return _damaged_verdict(job, damaged)
    return None


def _damaged_verdict(job: str, damaged: CheckpointDamaged) -> Verdict:
    return Verdict("DAMAGED", f"{damaged.finding}: its checkpoint cannot be read",
                   recover_hint(job).replace("rebuild the checkpoint: ", ""))


def all_status(settings: Settings, with_lag: bool = True, metrics: dict[str, JobFigures] | None = None
               ) -> list[JobStatus]:
    """Every job's status; ``metrics``: pipeline_metrics already read (``read_metrics``)."""
    metrics = read_metrics(settings) if metrics is None else metrics
    in_kafka = clocks = None
    try:
        if with_lag:
            answered = kafka_admin.check_reachable(kafka_address.connection(settings), timeout_s=3)
            in_kafka = topic_offsets(settings, answered.listing)
            clocks = topic_clocks(settings, answered.client)
    except SigflowError:
        with_lag = False  # status must still answer while Kafka is down
    statuses = [job_status(settings, job, metrics, with_lag, in_kafka, clocks) for job in ALL_JOBS]
    late = backlog(settings)
    for status in statuses:
        status.late_backlog = late.get(status.job)
    return statuses


def inspect_checkpoint(settings: Settings, job: str) -> list[str]:
    checkpoint = Checkpoint(settings.checkpoint_uri(job))
    if not checkpoint.exists():
        raise SigflowError(
            f"{job} has no checkpoint at {checkpoint.uri}: it has not run with these settings",
            f"start it with `sigflow run {job}`; if it ran before, check SIGFLOW_DATA_DIR / "
            "checkpoint_root, or see docs/runbooks/checkpoint-lost-or-corrupt.md")
    committed = set(checkpoint.committed_batches())
    try:
        identity = checkpoint.identity()  # read, never made: inspecting changes nothing
    except CheckpointDamaged as damaged:  # said, and the batches listed all the same
        identity, shown = None, _damaged_verdict(job, damaged)
        lines = [f"{job}: checkpoint {checkpoint.uri}, {shown.reason}, and its next run refuses to start; "
                 f"next: {shown.next_step}"]
    if identity is not None:
        app_id = identity.get("app_id")
        lines = [f"{job}: checkpoint {checkpoint.uri}, app id {app_id}" if app_id else
                 f"{job}: checkpoint {checkpoint.uri}, no app id recorded (sigflow.json): "
                 + ("its next run refuses to start, see docs/runbooks/checkpoint-lost-or-corrupt.md"
                    if checkpoint.offset_batches() else "its first run records one")]
    holder = Lease(checkpoint, job, settings.operations.lease_ttl.seconds).holder()
    lines.append(f"  lease: held by {holder.describe()}" if holder is not None and holder.alive() else "  lease: free")
    recorded = checkpoint.table_ids() if identity is not None else {}
    if recorded:  # as its runs recorded them (tables_kept), and what became of any since
        changed = tables_kept.changed_tables(checkpoint, {name: settings.table_uri(name) for name in recorded})
        lines.append("  tables written: " + ", ".join(f"{name} ({changed[name]})" if name in changed else name
                                                      for name in recorded))
    replay = checkpoint.replay_from_raw() if identity is not None else None
    if replay is not None:
        lines.append(f"  replaying device_events_raw (a restart's re-run): Kafka from {json.dumps(replay[1])} once "
                     "the batches have read that far")
    for batch_id in checkpoint.offset_batches():
        batch = checkpoint.offsets(batch_id)
        flag = "committed" if batch_id in committed else "NOT committed (re-runs on restart)"
        lines.append(f"  batch {batch_id}: {flag}; watermark {format_watermark(batch.watermark_ms)}; "
                     f"offsets {json.dumps(batch.sources)}")
    return lines
