"""sigflow reconcile: late events counted in the windows, sessions and alert contexts they belong to.

A streaming job drops an event behind its watermark and records it in late_events. Reconcile
takes the late events it has not decided on yet, and for each job:

1. **Guards.** Takes the job's reconcile lease (one reconcile of a job at a time; a rewind
   or recover refuses while it is held), then refuses while a restart of the job is being
   applied or was left half done (its rows may be deleted under it), and waits while ingest
   has not read as far as the job (device_events must hold every event the job counted).
   A late event is decided only once its batch is committed in the job's current checkpoint
   (a batch cut short after its late_events append is replayed, and its append then
   skipped as written) and ingest has read past the event's own offset: until then it is
   left waiting, whatever else this reconcile decides.
2. **Horizon.** A late event that arrived (the watermark that dropped it) more than
   ``late_horizon`` after the end of its tumbling window is recorded ``beyond_horizon``,
   and never counted.
3. **Final.** A late event waits until every row it belongs to is final in the stream (the
   window ended, the session closed, the alerts whose range it is in, at or before the job's
   watermark): the stream will not write that row again.
4. **Recount.** Those rows are computed again as a batch from device_events (every valid
   event, first copy of each, beyond-horizon ones left out) with the job's own rules
   (``spark_jobs.jobs.recount``), and merged: changed rows updated (revision + 1), missing
   ones inserted, sessions a late event bridged replaced (``runtime.delta.corrections``).
5. **Record.** The late events decided on are appended to late_events_reconciled.

Step 4 is idempotent: a row that already holds the recount is not touched. A reconcile cut
short after 4 and before 5 therefore does 4 again without changing a row, and then 5.
"""

from __future__ import annotations

import functools
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import (
    ALERT_SIGNAL_CONTEXT,
    ALERTS_WITHOUT_TELEMETRY,
    DEVICE_ALERTS,
    DEVICE_EVENTS,
    DEVICE_SESSIONS,
    DEVICE_SIGNAL_AVERAGES,
    FLEET_SIGNAL_ROLLUPS,
    LATE_EVENTS,
    LATE_EVENTS_RECONCILED,
)
from spark_jobs.errors import SigflowError
from spark_jobs.jobs import RECONCILED_JOBS, recount
from spark_jobs.jobs.alert_join import ALERT_COLUMNS
from spark_jobs.runtime import failpoints
from spark_jobs.runtime.checkpoint import guards
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.lease import RECONCILE, RUN, Lease
from spark_jobs.runtime.delta import corrections, schema, table_access
from spark_jobs.runtime.delta.corrections import Corrected
from spark_jobs.runtime.rows import has_rows

log = logging.getLogger("sigflow.reconcile")

KAFKA_KEY = ["topic", "partition", "offset"]
COUNTED, BEYOND_HORIZON = "counted", "beyond_horizon"


@dataclass
class JobReconciled:
    job: str
    waiting: int = 0  # late events not decided on when the run began
    counted: int = 0
    beyond_horizon: int = 0
    corrected: dict[str, Corrected] = field(default_factory=dict)
    held: str = ""  # why the whole job waits, when it does
    uncommitted: int = 0  # of those waiting, in a batch the job has not committed or ingest not read

    @property
    def still_waiting(self) -> int:
        return self.waiting - self.counted - self.beyond_horizon

    def line(self) -> str:
        if self.held:
            return f"{self.job}: {self.waiting:,} late events wait: {self.held}"
        if not self.waiting:
            return f"{self.job}: no late events waiting"
        changes = "; ".join(f"{table} {c.updated:,} updated, {c.inserted:,} inserted, {c.deleted:,} deleted"
                            for table, c in self.corrected.items()) or "no row changed"
        for_rows = self.still_waiting - self.uncommitted
        rest = "".join([f", {self.uncommitted:,} wait for their batch to be committed and read by ingest"
                        if self.uncommitted else "",
                        f", {for_rows:,} wait for their rows to be final" if for_rows else ""])
        return (f"{self.job}: {self.counted:,} of {self.waiting:,} late events counted, "
                f"{self.beyond_horizon:,} beyond late_horizon{rest} ({changes})")


@dataclass
class ReconcileResult:
    run_id: str
    jobs: list[JobReconciled]

    def lines(self) -> list[str]:
        return [job.line() for job in self.jobs]


def run(spark: SparkSession, settings: Settings, jobs: list[str] | None = None,
        now: datetime | None = None) -> ReconcileResult:
    """Reconcile the late events of ``jobs`` (every job whose results reconcile corrects)."""
    check_jobs(jobs)
    run_id = uuid.uuid4().hex
    at = now or datetime.now(timezone.utc)
    # the late tables in today's layout, whether or not a job started since an upgrade: its
    # rows are selected into late_events_reconciled's columns, record_kind among them
    for spec in (LATE_EVENTS, LATE_EVENTS_RECONCILED):
        schema.ensure_with_spark(spark, settings.table_uri(spec.name), spec)
    done = [_reconcile_job(spark, settings, job, run_id, at) for job in (jobs or RECONCILED_JOBS)]
    return ReconcileResult(run_id, done)


def check_jobs(jobs: list[str] | None) -> None:
    unknown = sorted(set(jobs or ()) - set(RECONCILED_JOBS))
    if unknown:
        raise SigflowError(f"reconcile corrects no table of {', '.join(unknown)}",
                           f"name one of {', '.join(RECONCILED_JOBS)}, or none for all")


@dataclass
class _Job:
    """One job's reconcile: its checkpoint's position and its late events."""

    spark: SparkSession
    settings: Settings
    name: str
    checkpoint_id: str
    last_batch: int
    final_through: datetime  # the job's watermark: rows ending at or before it are final
    lease: Lease | None = None  # this reconcile's of the job, held throughout
    app_id: str = ""  # the checkpoint's when this reconcile read it: a rewind or recover gives a new one
    read: dict[str, dict[str, int]] = field(default_factory=dict)  # the job's committed end offsets
    ingest_read: dict[str, dict[str, int]] = field(default_factory=dict)  # ingest's

    def table(self, name: str) -> DataFrame:
        return self.spark.read.format("delta").load(self.settings.table_uri(name))

    def late(self) -> DataFrame:
        """The job's late events, each once, with whether it is beyond the horizon."""
        horizon_ms = self.settings.streaming.late_horizon.ms
        lateness = F.unix_millis("watermark") - F.unix_millis(recount.pane_end(self.settings.streaming))
        return (self.table(LATE_EVENTS.name).where(F.col("job") == self.name).dropDuplicates(KAFKA_KEY)
                .withColumn("beyond", lateness > horizon_ms))

    def waiting(self) -> DataFrame:
        """The late events not decided on yet, each with whether it may be decided now
        (``decidable``): its batch committed by the current checkpoint (a row an earlier
        checkpoint wrote: the current one committed past its offset), and ingest past it."""
        decided = self.table(LATE_EVENTS_RECONCILED.name).where(F.col("job") == self.name).select(*KAFKA_KEY)
        mine = F.col("checkpoint_id") == F.lit(self.checkpoint_id)
        committed = F.when(mine, F.col("batch_id") <= F.lit(self.last_batch)).otherwise(_below(self.read))
        return (self.late().join(decided, KAFKA_KEY, "left_anti")
                .withColumn("decidable", F.coalesce(committed & _below(self.ingest_read), F.lit(False))))

    def events(self, within: DataFrame, on) -> DataFrame | None:
        """device_events' events matching ``on`` against the rows of ``within`` (first copy of
        each, beyond-horizon late ones left out), in the time ``within`` spans; None when
        ``within`` has no rows."""
        return self._first_copies(DEVICE_EVENTS.name, "event_time", recount.EVENT_KEY, within, on)

    def alerts(self, within: DataFrame, on) -> DataFrame | None:
        """device_alerts' alerts matching ``on`` against the rows of ``within``, as ``events``."""
        return self._first_copies(DEVICE_ALERTS.name, "alert_time", recount.ALERT_KEY, within, on)

    def _first_copies(self, name: str, time: str, key: list[str], within: DataFrame, on) -> DataFrame | None:
        bounds = within.agg(F.min("_lo").alias("lo"), F.max("_hi").alias("hi")).first()
        if bounds.lo is None:
            return None
        rows = self.table(name).where((F.col(time) >= F.lit(bounds.lo)) & (F.col(time) <= F.lit(bounds.hi)))
        matching = rows.alias("e").join(F.broadcast(within.alias("w")), on(F.col, "e", "w"), "left_semi")
        return recount.first_copies(matching.join(self.beyond_horizon, KAFKA_KEY, "left_anti"), key)

    @functools.cached_property
    def beyond_horizon(self) -> DataFrame:
        """The keys of the job's late events beyond the horizon, decided or not: read once per
        reconcile of the job, however many ranges of events it reads."""
        return self.late().where("beyond").select(*KAFKA_KEY).localCheckpoint()

    def correct(self, spec, key, rows: DataFrame, replaced: DataFrame | None, at: datetime) -> Corrected:
        self.check_no_restart()  # again just before the commit: a restart may have begun meanwhile
        schema.ensure_with_spark(self.spark, self.settings.table_uri(spec.name), spec)  # revision columns
        stamps = {"checkpoint_id": self.checkpoint_id, "batch_id": self.last_batch}
        return corrections.apply(self.spark, self.settings.table_uri(spec.name), spec, key, rows, replaced,
                                 stamps, at)

    def check_no_restart(self) -> None:
        if self.lease is not None:
            self.lease.check()  # a reconcile stalled past lease_ttl is no longer the one
        checkpoint = Checkpoint(self.settings.checkpoint_uri(self.name))
        lease = Lease(checkpoint, self.name, self.settings.operations.lease_ttl.seconds)
        guards.check_no_unfinished_restart(checkpoint, self.name)
        holder = lease.holder()
        if holder is not None and holder.purpose != RUN and holder.alive():
            raise SigflowError(f"{self.name}: a {holder.purpose} is being applied to its checkpoint",
                               "run reconcile once the restart is applied")
        # a reconcile that stalled past its lease may have let a whole restart through: what it
        # read of the checkpoint (its last batch, its watermark) is then no longer so
        if self.app_id and checkpoint.app_id(self.name) != self.app_id:
            raise SigflowError(f"{self.name}: its checkpoint was rewound or recovered while this reconcile ran",
                               "run reconcile again: it reads the checkpoint as it is now")


def _reconcile_job(spark: SparkSession, settings: Settings, name: str, run_id: str, at: datetime) -> JobReconciled:
    result = JobReconciled(name)
    checkpoint = Checkpoint(settings.checkpoint_uri(name))
    if not checkpoint.exists() or not table_access.exists(settings.table_uri(LATE_EVENTS.name)):
        return result
    with Lease(checkpoint, name, settings.operations.lease_ttl.seconds, purpose=RECONCILE) as lease:
        # the checkpoint is read holding the lease: a rewind applied before it took the lease is in it
        last = checkpoint.last_committed()
        if last is None:
            return result
        job = _Job(spark, settings, name, checkpoint.checkpoint_id(name), last,
                   datetime.fromtimestamp(checkpoint.offsets(last).watermark_ms / 1000, timezone.utc), lease,
                   checkpoint.app_id(name), checkpoint.committed_offsets(),
                   Checkpoint(settings.checkpoint_uri("ingest")).committed_offsets())
        job.check_no_restart()  # and a rewind that took the job's lease first is seen here
        _count(job, result, run_id, at)
    log.info("reconcile %s", result.line())
    return result


def _count(job: _Job, result: JobReconciled, run_id: str, at: datetime) -> None:
    """Steps 2 to 5 of one job, into ``result``."""
    waiting = job.waiting().persist()
    try:
        result.waiting = waiting.count()
        if not result.waiting:
            return
        result.held = _ingest_behind(job.settings, Checkpoint(job.settings.checkpoint_uri(job.name)))
        if result.held:
            return
        decidable = waiting.where("decidable")
        result.uncommitted = result.waiting - decidable.count()
        if result.uncommitted == result.waiting:
            return
        counted, result.corrected = RECOUNTS[job.name](job, decidable.where(~F.col("beyond")), at)
        failpoints.hit("reconcile_after_corrections", 0, job.name)
        decided = _record(job, decidable, counted, run_id, at)
        result.counted, result.beyond_horizon = decided.get(COUNTED, 0), decided.get(BEYOND_HORIZON, 0)
    finally:
        waiting.unpersist()


def _ingest_behind(settings: Settings, checkpoint: Checkpoint) -> str:
    """Why device_events or device_alerts may lack a record the job has read: ingest has not
    read that topic as far."""
    ingest_read = Checkpoint(settings.checkpoint_uri("ingest")).committed_offsets()
    for topic, job_read in sorted(checkpoint.committed_offsets().items()):
        short = sorted(int(p) for p, end in job_read.items()
                       if int(ingest_read.get(topic, {}).get(p, 0)) < int(end))
        if short:
            return (f"ingest has not read {topic} partition(s) {', '.join(map(str, short))} as far as the job: "
                    "run ingest, then reconcile")
    return ""


def _below(ends: dict[str, dict[str, int]]):
    """Whether a late event's Kafka offset is below ``ends`` ({topic: {partition: end}}): a
    reader that committed those ends has read it."""
    below = [(F.col("topic") == topic) & (F.col("partition") == int(partition)) & (F.col("offset") < int(end))
             for topic, parts in ends.items() for partition, end in parts.items()]
    return functools.reduce(lambda a, b: a | b, below, F.lit(False))


def _record(job: _Job, waiting: DataFrame, counted: DataFrame, run_id: str, at: datetime) -> dict[str, int]:
    """Append the late events decided on, in one commit: those counted and those beyond the
    horizon; how many of each."""
    outcome = F.when(F.col("beyond"), F.lit(BEYOND_HORIZON)).otherwise(F.lit(COUNTED))
    rows = (waiting.join(counted.withColumn("_counted", F.lit(True)), KAFKA_KEY, "left")
            .where(F.col("beyond") | F.col("_counted").isNotNull())
            .withColumns({"outcome": outcome, "run_id": F.lit(run_id), "reconciled_at": F.lit(at).cast("timestamp"),
                          "checkpoint_id": F.lit(job.checkpoint_id), "batch_id": F.lit(job.last_batch).cast("bigint")})
            .select(*LATE_EVENTS_RECONCILED.columns)).persist()
    try:
        decided = {row.outcome: row["count"] for row in rows.groupBy("outcome").count().collect()}
        if decided:
            rows.write.format("delta").mode("append").save(job.settings.table_uri(LATE_EVENTS_RECONCILED.name))
        return decided
    finally:
        rows.unpersist()


# ---- one recount per job: (the late events counted, the corrections per table)


def _windows(job: _Job, late: DataFrame, at: datetime) -> tuple[DataFrame, dict[str, Corrected]]:
    settings = job.settings.streaming
    touched = recount.windows_of(settings, late)
    ready = (touched.groupBy(*KAFKA_KEY).agg(F.max("window_end").alias("last_end"))
             .where(F.col("last_end") <= F.lit(job.final_through)).select(*KAFKA_KEY)).localCheckpoint()
    windows = (touched.join(ready, KAFKA_KEY, "left_semi")
               .select("device_id", "window_kind", "window_start", "window_end").distinct()
               .withColumns({"_lo": F.col("window_start"), "_hi": F.col("window_end")})).persist()
    try:
        events = job.events(windows, lambda col, e, w: (col(f"{e}.device_id") == col(f"{w}.device_id"))
                            & (col(f"{e}.event_time") >= col(f"{w}.window_start"))
                            & (col(f"{e}.event_time") < col(f"{w}.window_end")))
        if events is None:
            return ready, {}
        key = ("device_id", "window_kind", "window_start")
        rows = recount.window_rows(settings, events).join(windows.select(*key), list(key), "left_semi")
        return ready, {DEVICE_SIGNAL_AVERAGES.name: job.correct(DEVICE_SIGNAL_AVERAGES, key, rows, None, at)}
    finally:
        windows.unpersist()


def _fleet(job: _Job, late: DataFrame, at: datetime) -> tuple[DataFrame, dict[str, Corrected]]:
    settings = job.settings.streaming
    touched = recount.fleet_windows_of(settings, late)
    ready = touched.where(F.col("window_end") <= F.lit(job.final_through)).select(*KAFKA_KEY).localCheckpoint()
    windows = (touched.join(ready, KAFKA_KEY, "left_semi").select("window_start", "window_end").distinct()
               # a tumbling window counts in the fleet window its end falls in: it may begin before
               .withColumns({"_lo": F.col("window_start") - F.expr(f"INTERVAL {settings.tumbling_window.ms} MILLISECONDS"),
                             "_hi": F.col("window_end")})).persist()
    try:
        events = job.events(windows, lambda col, e, w: (col(f"{e}.event_time") >= col(f"{w}._lo"))
                            & (col(f"{e}.event_time") < col(f"{w}._hi")))
        if events is None:
            return ready, {}
        rows = recount.fleet_rows(settings, events).join(windows.select("window_start"), "window_start", "left_semi")
        return ready, {FLEET_SIGNAL_ROLLUPS.name: job.correct(FLEET_SIGNAL_ROLLUPS, ("window_start",), rows, None, at)}
    finally:
        windows.unpersist()


def _sessions(job: _Job, late: DataFrame, at: datetime) -> tuple[DataFrame, dict[str, Corrected]]:
    """A device's sessions around its late events, recounted from its events since a silence
    longer than the gap before them, up to the job's watermark."""
    settings = job.settings.streaming
    gap_ms = settings.session_gap.ms
    late_ms = late.select(*KAFKA_KEY, "device_id", F.floor(F.unix_micros("event_time") / 1000).alias("late_ms"))
    devices = late_ms.groupBy("device_id").agg(F.min("late_ms").alias("first_late_ms")).localCheckpoint()
    sessions = None
    lookback = 4 * gap_ms
    for _ in range(6):  # 4 gaps back, then 32, 256, ...: far enough for any session but the longest
        ranges = devices.withColumns({
            "_lo": F.timestamp_millis(F.col("first_late_ms") - F.lit(lookback)),
            "_hi": F.lit(job.final_through)})
        events = job.events(ranges, lambda col, e, w: (col(f"{e}.device_id") == col(f"{w}.device_id"))
                            & (col(f"{e}.event_time") >= col(f"{w}._lo")) & (col(f"{e}.event_time") <= col(f"{w}._hi")))
        if events is None:
            break
        found = _holding(recount.session_rows(settings, events), late_ms).localCheckpoint()
        # a session that begins within the gap of where reading began may have begun earlier
        unsure = (found.join(ranges.select("device_id", "_lo"), "device_id")
                  .where(F.unix_millis("session_start") - gap_ms < F.unix_millis("_lo"))
                  .select("device_id").distinct()).localCheckpoint()
        sure = found.join(unsure, "device_id", "left_anti")
        sessions = sure if sessions is None else sessions.unionByName(sure)
        devices = devices.join(unsure, "device_id", "left_semi").localCheckpoint()
        lookback *= 8
    if sessions is None:  # no late event is in a recounted session: each is a copy of one counted
        return late.select(*KAFKA_KEY).localCheckpoint(), {}
    final = sessions.where(F.unix_millis("session_end") + gap_ms <= F.unix_millis(F.lit(job.final_through))).persist()
    try:
        # a late event no recounted session holds is a copy of an event already counted
        held = final.select(*KAFKA_KEY)
        unheld = late.join(sessions.select(*KAFKA_KEY), KAFKA_KEY, "left_anti").select(*KAFKA_KEY)
        ready = held.unionByName(unheld).localCheckpoint()
        rows = final.drop(*KAFKA_KEY).dropDuplicates(["device_id", "session_start"])
        if not has_rows(rows):  # rows of a union: isEmpty would compile its code again
            return ready, {}
        stored = job.table(DEVICE_SESSIONS.name)
        overlap = ((stored.device_id == rows.device_id) & (stored.session_start <= rows.session_end)
                   & (stored.session_end >= rows.session_start))
        replaced = stored.join(rows, overlap, "inner").select(
            stored.device_id, stored.session_start, stored.revision, rows.session_start.alias("into"))
        revisions = replaced.groupBy("device_id", "into").agg(
            (F.coalesce(F.max("revision"), F.lit(0)) + 1).alias(corrections.INSERTED_REVISION))
        rows = rows.join(revisions.withColumnRenamed("into", "session_start"), ["device_id", "session_start"], "left")
        rows = rows.withColumn(corrections.INSERTED_REVISION,
                               F.coalesce(F.col(corrections.INSERTED_REVISION), F.lit(1)))
        key = ("device_id", "session_start")
        return ready, {DEVICE_SESSIONS.name: job.correct(DEVICE_SESSIONS, key, rows, replaced.select(*key), at)}
    finally:
        final.unpersist()


def _holding(sessions: DataFrame, late_ms: DataFrame) -> DataFrame:
    """Each recounted session that holds a late event, with that event's key (one row per pair)."""
    s = sessions.alias("s")
    return s.join(late_ms.alias("l"), (F.col("s.device_id") == F.col("l.device_id"))
                  & (F.col("l.late_ms") >= F.unix_millis("s.session_start"))
                  & (F.col("l.late_ms") <= F.unix_millis("s.session_end"))).select("s.*", *[F.col(f"l.{c}") for c in KAFKA_KEY])


def _alerts(job: _Job, late: DataFrame, at: datetime) -> tuple[DataFrame, dict[str, Corrected]]:
    """The alerts a late event falls in the range of, and the late alerts themselves,
    joined again with every event of their ranges."""
    settings = job.settings.streaming
    context = F.expr(f"INTERVAL {settings.alert_context.ms} MILLISECONDS")
    is_alert = F.col("topic") == settings.alerts_topic
    # a late event waits until every alert whose range it is in is final: the stream decides an
    # alert (reports it without telemetry) only once the watermark is past it, not at it; a late
    # alert is final (the watermark that dropped it had reached it)
    ready = late.where(is_alert | (F.col("event_time") + context < F.lit(job.final_through))).localCheckpoint()
    # an alert a late event is in the range of: the device's, in [event_time, event_time + context]
    reach = ready.select("device_id", F.col("event_time").alias("_lo"), (F.col("event_time") + context).alias("_hi"),
                         F.when(is_alert, F.col("event_id")).alias("late_alert_id"))
    alerts = job.alerts(reach, lambda col, a, r: (col(f"{a}.device_id") == col(f"{r}.device_id")) & (
        (col(f"{a}.alert_id") == col(f"{r}.late_alert_id"))
        | (col(f"{r}.late_alert_id").isNull() & (col(f"{a}.alert_time") >= col(f"{r}._lo"))
           & (col(f"{a}.alert_time") <= col(f"{r}._hi")))))
    if alerts is None:
        return ready.select(*KAFKA_KEY), {}
    alerts = alerts.select(*ALERT_COLUMNS).persist()
    try:
        ranges = alerts.select("device_id", (F.col("alert_time") - context).alias("_lo"), F.col("alert_time").alias("_hi"))
        events = job.events(ranges, lambda col, e, r: (col(f"{e}.device_id") == col(f"{r}.device_id"))
                            & (col(f"{e}.event_time") >= col(f"{r}._lo")) & (col(f"{e}.event_time") <= col(f"{r}._hi")))
        if events is None:  # no alert in any late event's range: the events change no row
            return ready.select(*KAFKA_KEY), {}
        context_rows, silent = recount.alert_rows(settings, alerts, events)
        key = ("alert_id", "event_id")
        corrected = {ALERT_SIGNAL_CONTEXT.name: job.correct(ALERT_SIGNAL_CONTEXT, key, context_rows, None, at),
                     # an alert a counted event now joins is taken back from the silent ones
                     ALERTS_WITHOUT_TELEMETRY.name: job.correct(ALERTS_WITHOUT_TELEMETRY, ("alert_id",), silent,
                                                                alerts.select("alert_id"), at)}
        return ready.select(*KAFKA_KEY), corrected
    finally:
        alerts.unpersist()


RECOUNTS = {"windowed-averages": _windows, "fleet-rollup": _fleet, "sessions": _sessions, "alert-join": _alerts}
