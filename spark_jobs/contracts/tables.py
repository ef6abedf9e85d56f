"""Every Delta table sigflow writes: its name and schema, declared once.

Readers of these tables: see docs/tables.md. Columns are nullable in the Delta schema so
both writers (delta-spark and delta-rs) produce identical table metadata, and a key's columns
are kept from null by a Delta CHECK constraint instead: one that can be added to a table made
before it, which a NOT NULL column cannot.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

from spark_jobs.contracts.contract import (
    MAX_PAYLOAD_BYTES,
    OVERSIZED_TEXT_BYTES,
    SEVERITIES,
)
from spark_jobs.contracts.dictionary import (
    CLOSED_BY_GAP,
    QUARANTINE_REASONS,
    RECONCILE_OUTCOMES,
    RESTART_OUTCOMES,
    SIGNAL,
    meaning,
    one_of,
)
from spark_jobs.contracts.expectations import Ordered, Quality
from spark_jobs.contracts.reasons import REASON_CODES, code_from_detail_sql

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char == "<"
        depth -= char == ">"
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return parts + [current.strip()] if current.strip() else parts


def _data_type(text: str) -> DataType:
    from pyspark.sql import types as T

    text = text.strip().upper()
    if text.startswith("MAP<") and text.endswith(">"):
        key, value = _split_top_level(text[4:-1])
        return T.MapType(_data_type(key), _data_type(value), valueContainsNull=True)
    simple = {
        "STRING": T.StringType(), "BINARY": T.BinaryType(), "INT": T.IntegerType(), "BIGINT": T.LongType(),
        "DOUBLE": T.DoubleType(), "TIMESTAMP": T.TimestampType(), "BOOLEAN": T.BooleanType(),
    }
    return simple[text]


# A Delta checkpoint is a state rebuild and a parquet write inside a commit: at Delta's default
# of one every 10 commits, the ingest batch that checkpointed took 6.6 s where its neighbours
# took 1.1 to 2.0 s (docs/streaming-facts.md). At 100, a batch in a hundred pays it, and a
# reader starting cold replays up to 99 small JSON commits after the checkpoint instead of 9.
CHECKPOINT_INTERVAL = 100
# The tables only a job's driver commits to (delta-rs, a small commit a batch) read their log
# at each commit's start, and there replaying up to 99 JSON commits costs more than
# checkpointing a small table every 10: a job's appends over 600 batches took half the CPU
# (`python -m bench.bookkeeping`, docs/benchmarks.md).
DRIVER_CHECKPOINT_INTERVAL = 10
# Values sigflow itself set on every table before a table's properties were its own: migration
# replaces them with the table's (any other value is an operator's, and stays).
FORMER_DEFAULTS = {"delta.checkpointInterval": ("100",)}
# The change data feed is on for every table from its creation (and turned on by deploy for
# tables made before): a reader follows inserts and deletes, a rewind's included
# (docs/consumers.md).
CHANGE_DATA_FEED = {"delta.enableChangeDataFeed": "true"}


@dataclass(frozen=True)
class MergePart:
    """Columns of a row kept current by merge that change together, and the columns that say
    which of two values is newer (larger is newer, compared in order; a row whose first is
    null has none of the part)."""

    name: str
    columns: tuple[str, ...]
    order: tuple[str, ...]


@dataclass(frozen=True)
class KeptName:
    """A column's name before it was renamed, kept as a column of its own holding the same
    value (the commit fills it, in every row and so in the change feed) until ``until``, so
    a reader written against the old name keeps working while it moves to the new one."""

    old: str
    new: str
    until: date

    def meaning(self, new_meaning: str) -> str:
        return (f"{self.new} under its former name, kept at least until {self.until:%Y-%m-%d} (read {self.new}): "
                f"{new_meaning}")


@dataclass(frozen=True)
class Finality:
    """Which of a table's rows the stream will add no more to: those whose ``column`` is at or
    before the batch's ``final_through`` (table_status), the watermark less what a row waits
    past its column (``wait``, a streaming setting: a session its gap). A row written only
    once the watermark is strictly past its column (Spark's alert without telemetry) is final
    through one microsecond less, so every table compares "at or before"."""

    column: str
    wait: str = ""
    strictly_before: bool = False

    def final_through(self, watermark: datetime | None, streaming) -> datetime | None:
        if watermark is None:
            return None
        wait = getattr(streaming, self.wait).seconds if self.wait else 0
        return watermark - timedelta(seconds=wait, microseconds=1 if self.strictly_before else 0)


@dataclass(frozen=True)
class TableSpec:
    """A Delta table, declared once: its columns, what a reader relies on (its key, when a row
    is final), how its job writes it and what its rows must hold."""

    name: str
    # its own columns as Spark DDL; the stamps the commit adds follow (``ddl``)
    columns_ddl: str
    description: str
    # the columns that identify a row, never null (the Delta CHECK constraint KEY_CONSTRAINT);
    # a spec without one (a test's scratch table) gets no constraint
    key: tuple[str, ...] = ()
    final: str = ""  # when a row is final, in a reader's words (docs/tables.md)
    # key columns that are null where the row is about the whole of something (dq_results:
    # an expectation on the table rather than a column)
    nullable_in_key: tuple[str, ...] = ()
    # each row says which batch of which checkpoint wrote it (``WRITTEN_BY``, stamped by the commit)
    written_by: bool = False
    # reconcile corrects its rows from late events (``REVISION``, stamped 0 by the commit)
    corrected: bool = False
    # what sigflow quality checks of its rows (None: not checked)
    quality: Quality | None = None
    partition_by: tuple[str, ...] = ()
    # (column, SQL expression over the other columns): how rows written before a column was
    # added get its value when the table is migrated (spark_jobs/runtime/delta/schema.py);
    # a corrected table's rows from before ``REVISION`` get revision 0 without saying so
    backfill: tuple[tuple[str, str], ...] = ()
    # kept current by a merge on this key rather than appended to: a batch updates the rows
    # it has newer data for, and a replay or a rewind's re-run changes nothing (runtime/commit.py)
    merge_key: tuple[str, ...] = ()
    # the parts of a merged row, each updated on its own where a row's part is newer
    # (runtime/delta/newest.py); a part may be written by a job of its own
    merge_parts: tuple[MergePart, ...] = ()
    # (column, meaning) where a column means something narrower or other here than its name
    # does in every table (spark_jobs/contracts/dictionary.py)
    meanings: tuple[tuple[str, str], ...] = ()
    # which rows the stream adds no more to, by table_status's final_through (None: its rows
    # are final when written, or never)
    finality: Finality | None = None
    # renamed columns' former names, still written (docs/consumers.md, "Renamed columns")
    kept_names: tuple[KeptName, ...] = ()
    # only jobs' drivers commit to it, a few rows a batch through delta-rs (runtime/delta/sink.py):
    # it checkpoints every ``DRIVER_CHECKPOINT_INTERVAL`` commits
    driver_commits: bool = False

    @property
    def checkpoint_interval(self) -> int:
        """Commits between the table's Delta checkpoints."""
        return DRIVER_CHECKPOINT_INTERVAL if self.driver_commits else CHECKPOINT_INTERVAL

    @property
    def properties(self) -> dict[str, str]:
        """The Delta properties the table is created with, and migrated to where it does not
        set them (runtime/delta/schema.py)."""
        return {"delta.checkpointInterval": str(self.checkpoint_interval), **CHANGE_DATA_FEED}

    @property
    def column_meanings(self) -> dict[str, str]:
        """Every column's meaning, in the table's column order: its comment in the table."""
        own = dict(self.meanings)
        own |= {kept.old: kept.meaning(meaning(kept.new, own)) for kept in self.kept_names}
        return {column: meaning(column, own) for column in self.columns}

    @property
    def ddl(self) -> str:
        """Every column as Spark DDL: its own, the former names it keeps, then the stamps its
        commit adds."""
        types = dict(column.split(None, 1) for column in _split_top_level(self.columns_ddl))
        kept = [f"{kept.old} {types[kept.new]}" for kept in self.kept_names]
        return ", ".join([self.columns_ddl, *kept] + [WRITTEN_BY] * self.written_by + [REVISION] * self.corrected)

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(column.split(None, 1)[0] for column in _split_top_level(self.ddl))

    @property
    def schema(self) -> StructType:
        return _struct(self.ddl)

    @property
    def job_ddl(self) -> str:
        """The columns of the rows a job's split gives: the table's, less the former names,
        the ``WRITTEN_BY`` stamps and the ``REVISION`` its commit adds."""
        return self.columns_ddl

    @property
    def job_schema(self) -> StructType:
        return _struct(self.job_ddl)

    @property
    def migration_backfill(self) -> tuple[tuple[str, str], ...]:
        return self.backfill + ((("revision", "0"),) if self.corrected else ())

    @property
    def required(self) -> tuple[str, ...]:
        """The key's columns no row may leave null."""
        return tuple(column for column in self.key if column not in self.nullable_in_key)


def _struct(ddl: str) -> StructType:
    # Parsed here rather than by StructType.fromDDL, which needs a running SparkContext.
    # pyspark is imported only when a schema is asked for: DAG files read the table names
    # when Airflow parses them, and that must stay cheap.
    from pyspark.sql.types import StructField, StructType

    fields = []
    for column in _split_top_level(ddl):
        name, kind = column.split(None, 1)
        fields.append(StructField(name, _data_type(kind), nullable=True))
    return StructType(fields)


# How long a renamed column's former name is still written beside it (KeptName)
RENAMES_KEPT_UNTIL = date(2027, 6, 30)
KAFKA_COORDINATES = "topic STRING, partition INT, offset BIGINT, kafka_timestamp TIMESTAMP"
# Which batch of which checkpoint wrote a row: every job's table carries them (the commit
# stamps them, runtime/commit.py), so a rewind deletes exactly the rows of the batches it
# re-runs, and a reader following the change feed sees that (docs/semantics.md).
WRITTEN_BY = "checkpoint_id STRING, batch_id BIGINT"
# How often reconcile has corrected a row from late events, and when it last did: 0 and null
# as the stream wrote it (the commit stamps them), then 1, 2, ... (docs/semantics.md, late
# events counted).
REVISION = "revision INT, corrected_at TIMESTAMP"

INGEST_FINAL = "when written: a record's row is added once, in the batch that read it"
CORRECTED_READING = ("sigflow reconcile may later update the row in place from late events (revision 1, 2, ...; "
                     "corrected_at), an update in the change feed")
REWOUND = "A rewind or recover deletes the rows of the batches it re-runs, and the re-run adds them again."

DEVICE_EVENTS_RAW = TableSpec(
    "device_events_raw",
    f"key BINARY, value BINARY, {KAFKA_COORDINATES}, ingest_time TIMESTAMP, batch_id BIGINT, checkpoint_id STRING",
    "Every Kafka record of device-events and device-alerts exactly as received, valid or not: the "
    "system of record a job is recomputed from once Kafka's retention has passed.",
    key=("topic", "partition", "offset"),
    final=INGEST_FINAL + "; maintenance deletes rows only past raw_retention (forever by default)",
)
DEVICE_EVENTS = TableSpec(
    "device_events",
    "event_id STRING, device_id STRING, event_time TIMESTAMP, signal DOUBLE, "
    f"extras MAP<STRING, STRING>, {KAFKA_COORDINATES}, ingest_time TIMESTAMP",
    "Valid device events, typed; extra producer fields kept in extras (JSON text values).",
    key=("topic", "partition", "offset"),
    final=INGEST_FINAL + " (a re-sent event is a row of its own)",
    written_by=True,
    quality=Quality(filled=True, not_null=("event_id", "device_id", "event_time"), in_signal_range=("signal",),
                    fresh="ingest_time"),
)
DEVICE_ALERTS = TableSpec(
    "device_alerts",
    "alert_id STRING, device_id STRING, alert_time TIMESTAMP, severity STRING, kind STRING, "
    f"extras MAP<STRING, STRING>, {KAFKA_COORDINATES}, ingest_time TIMESTAMP",
    "Valid device alerts, typed; extra producer fields kept in extras.",
    key=("topic", "partition", "offset"),
    final=INGEST_FINAL,
    written_by=True,
    quality=Quality(not_null=("alert_id", "device_id", "alert_time"), allowed=(("severity", SEVERITIES),)),
)
QUARANTINED_EVENTS = TableSpec(
    "quarantined_events",
    f"reason_code STRING, reason STRING, payload_text STRING, key BINARY, value BINARY, {KAFKA_COORDINATES}, "
    f"job STRING, ingest_time TIMESTAMP, device_id STRING",
    "Records that broke the event or alert contract, with the raw payload, a stable reason_code "
    "(docs/event-contract.md) and the reason in words; job is the job that read them, device_id "
    "the device the record names where it names one.",
    backfill=(("reason_code", code_from_detail_sql("reason")), ("job", "source_job")),
    kept_names=(KeptName("source_job", "job", RENAMES_KEPT_UNTIL),),
    key=("topic", "partition", "offset"),
    final=INGEST_FINAL + "; maintenance deletes rows older than quarantine_retention",
    written_by=True,
    quality=Quality(not_null=("reason_code", "reason"), allowed=(("reason_code", tuple(REASON_CODES)),)),
    meanings=(
        ("reason_code", f"why the record was quarantined, {QUARANTINE_REASONS} (docs/event-contract.md)"),
        ("reason", "the reason in words, naming the field and the value that broke the contract"),
        ("payload_text", "the record's value as UTF-8 text (invalid bytes replaced), for reading: its first "
                         f"{OVERSIZED_TEXT_BYTES:,} bytes when over the {MAX_PAYLOAD_BYTES // 1024} KiB limit; "
                         "value holds every byte"),
        ("job", "the job that read and quarantined the record"),
        ("device_id", "the record's device_id where the record is JSON with device_id a string; null otherwise, "
                      "and in rows quarantined before this column"),
    )
)

EVENT_COLUMNS = "event_id STRING, device_id STRING, event_time TIMESTAMP, signal DOUBLE"
DEVICE_STATUS = TableSpec(
    "device_status",
    "device_id STRING, event_id STRING, event_time TIMESTAMP, signal DOUBLE, event_kafka_timestamp TIMESTAMP, "
    "event_offset BIGINT, alert_id STRING, alert_time TIMESTAMP, severity STRING, kind STRING, "
    "alert_kafka_timestamp TIMESTAMP, alert_offset BIGINT, window_start TIMESTAMP, window_end TIMESTAMP, "
    "window_event_count BIGINT, window_avg_signal DOUBLE, session_start TIMESTAMP, session_end TIMESTAMP, "
    "session_event_count BIGINT, session_avg_signal DOUBLE, session_closed BOOLEAN",
    "Where each device is now: one row per device. Its latest valid event (the largest event_time; of two "
    "at the same time, the one that reached Kafka last: kafka timestamp, then offset) and its latest alert "
    "by the same rule, kept current by ingest's every batch; a device known only from alerts has no event "
    "yet. Its last final tumbling window (window_*, the latest window_start, from windowed-averages' "
    "deduplicated events, as device_signal_averages held it when final) and its latest session "
    "(session_*, from the sessions job: the one with the latest event; open until session_closed), "
    "each kept current by its job's every batch.",
    merge_key=("device_id",),
    merge_parts=(
        MergePart("event", ("event_id", "event_time", "signal", "event_kafka_timestamp", "event_offset"),
                  ("event_time", "event_kafka_timestamp", "event_offset")),
        MergePart("alert", ("alert_id", "alert_time", "severity", "kind", "alert_kafka_timestamp", "alert_offset"),
                  ("alert_time", "alert_kafka_timestamp", "alert_offset")),
        MergePart("window", ("window_start", "window_end", "window_event_count", "window_avg_signal"),
                  ("window_start",)),
        # an event joining the session raises its count (the sessions job drops repeats) or
        # its last event time; closing it sets session_closed
        MergePart("session", ("session_start", "session_end", "session_event_count",
                              "session_avg_signal", "session_closed", "session_last_event_time"),
                  ("session_end", "session_event_count", "session_closed")),
    ),
    backfill=(("session_end", "session_last_event_time"),),
    kept_names=(KeptName("session_last_event_time", "session_end", RENAMES_KEPT_UNTIL),),
    key=("device_id",),
    final="never: a part of a row is updated in place when a newer event, alert, final "
                                "window or session state of its device arrives (an update in the change feed); "
                                "a rewind leaves it, its re-run finds nothing newer",
    meanings=(
        ("device_id", "the device: one row each"),
        ("event_id", "its latest valid event's id"),
        ("event_time", "its latest valid event's time, UTC (the device's clock: event time)"),
        ("signal", f"its latest valid event's signal, {SIGNAL}"),
        ("event_kafka_timestamp", "its latest valid event's Kafka timestamp, UTC (when the producer sent it)"),
        ("event_offset", "its latest valid event's offset in its Kafka partition"),
        ("alert_id", "its latest alert's id"),
        ("alert_time", "its latest alert's time, UTC (the device's clock: event time)"),
        ("severity", f"its latest alert's severity, {one_of(SEVERITIES)}"),
        ("kind", "its latest alert's kind, as the device sent it (free text)"),
        ("alert_kafka_timestamp", "its latest alert's Kafka timestamp, UTC (when the producer sent it)"),
        ("alert_offset", "its latest alert's offset in its Kafka partition"),
        ("window_start", "its last final tumbling window's start, UTC (event time), inclusive"),
        ("window_end", "its last final tumbling window's end, UTC (event time), exclusive"),
        ("window_event_count", "how many distinct events its last final tumbling window counts"),
        ("window_avg_signal", f"the mean signal of its last final tumbling window, {SIGNAL}"),
        ("session_start", "its latest session's first event time, UTC (event time)"),
        ("session_end", "its latest session's last event time so far, UTC (event time); the session closes when the watermark passes this + session_gap"),
        ("session_event_count", "how many distinct events its latest session holds so far"),
        ("session_avg_signal", f"the mean signal of its latest session so far, {SIGNAL}"),
        ("session_closed", "true once its latest session is closed (written to device_sessions); false while it is open"),
    ),
    driver_commits=True,
)
DEVICE_EVENTS_DEDUPLICATED = TableSpec(
    "device_events_deduplicated",
    f"{EVENT_COLUMNS}, extras MAP<STRING, STRING>, {KAFKA_COORDINATES}",
    "Valid device events with duplicates (a device's event_id again within the watermark) removed.",
    key=("device_id", "event_id"),
    final="when written; the key is unique among events within watermark_delay of each other (a copy re-sent "
        "after that is a row of its own)",
    written_by=True,
    quality=Quality(filled=True, unique_key=True, not_null=("event_time",), in_signal_range=("signal",),
                    fresh="event_time"),
)
DEVICE_SIGNAL_AVERAGES = TableSpec(
    "device_signal_averages",
    "device_id STRING, window_start TIMESTAMP, window_end TIMESTAMP, window_kind STRING, "
    "avg_signal DOUBLE, min_signal DOUBLE, max_signal DOUBLE, event_count BIGINT",
    "Per device and event-time window (tumbling and sliding), written once when final, corrected by "
    "reconcile from late events.",
    key=("device_id", "window_kind", "window_start"),
    final="when written: a window is written once, when the watermark passes its end (window_end, exclusive); "
        + CORRECTED_READING,
    written_by=True,
    corrected=True,
    quality=Quality(filled=True, unique_key=True, not_null=("window_end",),
                    ordered=(Ordered("window_end", "window_start"),), at_least_one=("event_count",),
                    in_signal_range=("avg_signal", "min_signal", "max_signal"), fresh="window_end"),
    finality=Finality("window_end"),
)
FLEET_SIGNAL_ROLLUPS = TableSpec(
    "fleet_signal_rollups",
    "window_start TIMESTAMP, window_end TIMESTAMP, device_count BIGINT, "
    "mean_device_avg_signal DOUBLE, max_signal DOUBLE, device_window_count BIGINT",
    "Fleet-wide rollup of the per-device tumbling windows (a chained aggregation) per fleet window "
    "(window_end - window_start, the fleet_window setting), corrected by reconcile from late events.",
    key=("window_start",),
    final="when written: once the watermark passes window_end (tumbling windows); "
                                       + CORRECTED_READING,
    written_by=True,
    corrected=True,
    quality=Quality(filled=True, unique_key=True, not_null=("window_end",),
                    ordered=(Ordered("window_end", "window_start"),)),
    finality=Finality("window_end"),
    meanings=(
        ("window_start", "the fleet window's start, UTC (event time), inclusive (windows of the fleet_window setting)"),
        ("window_end", "the fleet window's end, UTC (event time), exclusive"),
        ("device_count", "how many devices have a tumbling window in the fleet window"),
        ("mean_device_avg_signal", f"the mean over those devices' tumbling-window averages, {SIGNAL}"),
        ("max_signal", f"the highest signal of any event in the fleet window, {SIGNAL}"),
        ("device_window_count", "how many per-device tumbling windows the fleet window rolls up"),
    )
)
DEVICE_SESSIONS = TableSpec(
    "device_sessions",
    "device_id STRING, session_start TIMESTAMP, session_end TIMESTAMP, event_count BIGINT, "
    "avg_signal DOUBLE, min_signal DOUBLE, max_signal DOUBLE, closed_reason STRING",
    "Closed per-device activity sessions (no event for the session gap), written once, corrected by "
    "reconcile from late events.",
    key=("device_id", "session_start"),
    final="when written: a session is written once, when the watermark passes its last event (session_end) "
        "+ session_gap, so every session whose session_end is at or before table_status's final_through for "
        "this table (the watermark less the gap) is there; open sessions are only in the job's state; " + CORRECTED_READING
        + " A late event that bridges sessions replaces them: their rows are deleted and the merged "
        "session inserted in one commit",
    written_by=True,
    corrected=True,
    quality=Quality(filled=True, unique_key=True, not_null=("session_end",),
                    ordered=(Ordered("session_end", "session_start", or_equal=True),
                             Ordered("avg_signal", "min_signal", or_equal=True),
                             Ordered("max_signal", "avg_signal", or_equal=True)),
                    at_least_one=("event_count",), in_signal_range=("avg_signal",)),
    finality=Finality("session_end", wait="session_gap"),
    meanings=(
        ("session_end", "the session's last event time, UTC (event time); the session closed when the watermark reached this + session_gap (table property sigflow.setting.session_gap)"),
        ("closed_reason", f"why the session closed, {one_of([CLOSED_BY_GAP])}"),
    )
)
ALERT_SIGNAL_CONTEXT = TableSpec(
    "alert_signal_context",
    "alert_id STRING, device_id STRING, alert_time TIMESTAMP, severity STRING, kind STRING, "
    "event_id STRING, event_time TIMESTAMP, signal DOUBLE",
    "One row per (alert, event of that device in the range before the alert); reconcile adds the "
    "pairs late events and late alerts make.",
    key=("alert_id", "event_id"),
    final="an alert's rows can arrive over several batches; they are all there once alert_time is at or "
        "before table_status's final_through for this table; sigflow reconcile may later insert the rows late "
        "events or a late alert make (revision 1), an insert in the change feed",
    written_by=True,
    corrected=True,
    quality=Quality(not_null=("alert_id", "event_id"), ordered=(Ordered("alert_time", "event_time", or_equal=True),)),
    finality=Finality("alert_time", strictly_before=True),
    meanings=(
        ("event_id", "the id of an event of the alert's device in the range before the alert (the alert_context setting)"),
        ("event_time", "that event's time, UTC (event time), at most alert_context before alert_time"),
        ("signal", f"that event's signal, {SIGNAL}"),
    )
)
ALERTS_WITHOUT_TELEMETRY = TableSpec(
    "alerts_without_telemetry",
    "alert_id STRING, device_id STRING, alert_time TIMESTAMP, severity STRING, kind STRING",
    "Alerts for which no event of the device arrived in the range: silent devices. Reconcile adds late "
    "alerts that have none, and deletes an alert's row when a late event of its range is counted.",
    key=("alert_id",),
    final="when written: once the watermark proves no event of the range can come in time; sigflow reconcile "
        "deletes the row when a late event of the range is counted (a delete in the change feed, with the "
        "alert's new alert_signal_context rows), and inserts late alerts without events (revision 1)",
    written_by=True,
    corrected=True,
    quality=Quality(not_null=("alert_id", "device_id"), allowed=(("severity", SEVERITIES),)),
    finality=Finality("alert_time", strictly_before=True),
)
# rows from before record_kind: an alert's is the one without a signal, which every valid
# event has (docs/event-contract.md)
RECORD_KIND_BACKFILL = (("record_kind", "CASE WHEN signal IS NULL THEN 'alert' ELSE 'event' END"),)
LATE_EVENTS = TableSpec(
    "late_events",
    f"job STRING, record_kind STRING, {EVENT_COLUMNS}, missed STRING, watermark TIMESTAMP, batch_id BIGINT, "
    "topic STRING, partition INT, offset BIGINT, checkpoint_id STRING",
    "Valid records a stateful job dropped because the watermark had passed them: record_kind "
    "`event`, or `alert` for the alerts alert-join drops (its alert_id in event_id, alert_time in "
    "event_time, no signal). checkpoint_id names the checkpoint whose batch_id it is (batch ids "
    "restart after a recover).",
    backfill=RECORD_KIND_BACKFILL,
    key=("job", "topic", "partition", "offset"),
    final="when written: one row per job that dropped the event (an event late for five jobs "
                              "is five rows)",
    meanings=(
        ("job", "the job that dropped the record as late"),
        ("event_id", "the event's id (an alert's id where record_kind is 'alert')"),
        ("event_time", "the event's time (an alert's time where record_kind is 'alert'), UTC (event time)"),
        ("signal", f"the event's signal, {SIGNAL}; null for an alert"),
        ("missed", "what the record missed by being late, in words"),
        ("watermark", "the watermark that dropped it, UTC (event time)"),
    ),
    driver_commits=True,
)
LATE_EVENTS_RECONCILED = TableSpec(
    "late_events_reconciled",
    f"job STRING, record_kind STRING, {EVENT_COLUMNS}, topic STRING, partition INT, offset BIGINT, outcome STRING, "
    "run_id STRING, reconciled_at TIMESTAMP, checkpoint_id STRING, batch_id BIGINT",
    "One row per late_events row sigflow reconcile has decided on: counted (the windows, sessions or "
    "alert contexts it belongs to were corrected, or already held it), or beyond_horizon (more than late_horizon "
    "after its window's end: not counted). checkpoint_id and batch_id are the job's: the latest of "
    "the batch that dropped the event and those that wrote the rows it corrected, so a rewind or "
    "recover past any of them makes the event wait for reconcile again.",
    backfill=RECORD_KIND_BACKFILL,
    key=("job", "topic", "partition", "offset"),
    final="when written: one row per late_events row reconcile decided on",
    meanings=(
        ("job", "the job that dropped the record as late"),
        ("event_id", "the event's id (an alert's id where record_kind is 'alert')"),
        ("event_time", "the event's time (an alert's time where record_kind is 'alert'), UTC (event time)"),
        ("signal", f"the event's signal, {SIGNAL}; null for an alert"),
        ("outcome", f"what reconcile decided, {one_of(RECONCILE_OUTCOMES)}"),
        ("run_id", "the reconcile run that decided"),
        ("reconciled_at", "when that run decided, UTC (the clock of the host running reconcile)"),
    )
)
PIPELINE_METRICS = TableSpec(
    "pipeline_metrics",
    "job STRING, batch_id BIGINT, batch_time TIMESTAMP, input_rows BIGINT, output_rows BIGINT, "
    "rows_dropped_by_watermark BIGINT, duplicates_dropped BIGINT, late_events BIGINT, state_rows BIGINT, "
    "state_memory_bytes BIGINT, watermark TIMESTAMP, duration_ms BIGINT, "
    "input_rows_per_second DOUBLE, processed_rows_per_second DOUBLE, progress_json STRING, "
    "checkpoint_id STRING",
    "One row per micro-batch per job, from Spark's query progress; checkpoint_id names the "
    "checkpoint whose batch_id it is (batch ids restart after a recover).",
    key=("job", "checkpoint_id", "batch_id"),
    final="when written, one row per batch",
    meanings=(
        ("job", "the job whose batch this is"),
        ("batch_id", "the batch's id in its checkpoint"),
        ("input_rows", "Kafka records the batch read"),
        ("output_rows", "rows the batch wrote to the job's tables, late_events excepted"),
        ("rows_dropped_by_watermark", "rows the job's stateful operators dropped as late (Spark's count)"),
        ("duplicates_dropped", "re-sent events the job's deduplication dropped"),
        ("late_events", "rows the batch wrote to late_events"),
        ("state_rows", "rows held in the job's state after the batch"),
        ("state_memory_bytes", "bytes of memory the job's state used after the batch"),
        ("watermark", "the watermark after the batch, UTC (event time); null before the first event"),
        ("duration_ms", "how long the batch took, in milliseconds (the driver's clock)"),
        ("input_rows_per_second", "records per second arriving, as Spark measured it over the batch"),
        ("processed_rows_per_second", "records per second the batch processed"),
        ("progress_json", "Spark's progress report of the batch, as JSON"),
    ),
    driver_commits=True,
)

def _final_column_backfill() -> str:
    """final_column of the rows written before it: the tables whose final_through was the
    watermark then too; null for the sessions' and device_status' (final_through was the
    watermark, not comparable with session_end, and device_status' rows are never final)."""
    same = [spec.name for spec in (DEVICE_SIGNAL_AVERAGES, FLEET_SIGNAL_ROLLUPS)]
    return f"CASE WHEN table_name IN ({', '.join(repr(name) for name in same)}) THEN 'window_end' END"


TABLE_STATUS = TableSpec(
    "table_status",
    "table_name STRING, job STRING, checkpoint_id STRING, batch_id BIGINT, batch_time TIMESTAMP, "
    "final_through TIMESTAMP, rows_written BIGINT, recorded_at TIMESTAMP, final_column STRING",
    "How complete each table is, readable without sigflow: one row per batch per table its job writes, "
    "with rows or none. A table's newest row (largest recorded_at) of each job writing it is current: "
    "every record in Kafka before batch_time has reached the table through that job (a batch "
    "max_offsets_per_trigger cut short keeps the last batch_time that held, or null), and rows whose "
    "final_column is at or before final_through will not be added to by the stream (null for tables "
    "whose rows are final when written, and for device_status, whose rows are never final); "
    "device_status has a writer per part; see docs/consumers.md for what final means per table.",
    key=("table_name", "checkpoint_id", "batch_id"),
    final="when written, one row per batch; maintenance deletes rows older than "
                               "table_status_retention, each table's newest kept",
    backfill=(("final_column", _final_column_backfill()),),
    meanings=(
        ("job", "the job that wrote the batch"),
        ("batch_time", "every record Kafka had before this time, UTC (the driver's clock), has reached the table through that job; null while a batch cut short by max_offsets_per_trigger has not caught up"),
        ("final_through", "rows whose final_column is at or before this, UTC (event time: the batch's watermark, less a session's gap for device_sessions, less one microsecond for the alert tables), will not be added to by the stream; null for tables final when written or never final"),
        ("rows_written", "rows the batch wrote to the table"),
        ("recorded_at", "when this row was written, UTC (the driver's clock)"),
        ("final_column", "the table's column final_through is compared with (window_end, session_end, alert_time); null with final_through"),
    ),
    driver_commits=True,
)
DQ_RESULTS = TableSpec(
    "dq_results",
    "run_id STRING, run_time TIMESTAMP, table_name STRING, rows_checked BIGINT, expectation STRING, "
    "column_name STRING, severity STRING, success BOOLEAN, unexpected_count BIGINT, "
    "unexpected_sample STRING, table_version BIGINT",
    "One row per expectation per data-quality run (Great Expectations), appended by sigflow quality; "
    "table_version is the version of the table checked, whose rows a later run need not read again.",
    key=("run_id", "table_name", "expectation", "column_name"),
    final="when written",
    nullable_in_key=("column_name",),
    meanings=(
        ("run_id", "the sigflow quality run"),
        ("run_time", "when the run began, UTC (the clock of the host running it)"),
        ("rows_checked", "rows of the table the expectation read"),
        ("expectation", "the Great Expectations expectation checked"),
        ("column_name", "the column checked; null for an expectation on the whole table"),
        ("severity", "critical (a failure fails the run) or warning"),
        ("success", "whether the expectation held"),
        ("unexpected_count", "rows that broke it"),
        ("unexpected_sample", "a few of the values that broke it, as JSON"),
        ("table_version", "the Delta version of the table checked"),
    )
)

RESTART_AUDIT = TableSpec(
    "restart_audit",
    "applied_at TIMESTAMP, job STRING, action STRING, requested_by STRING, approved_by STRING, "
    "plan_digest STRING, steps STRING, outcome STRING, detail STRING, command STRING",
    "One row per restart applied or attempted (resume, rewind, recover), from the sigflow_restart "
    "DAG or the CLI: who requested it, who approved it (\"CLI --yes\" for the CLI, which no approval "
    "gates), the plan's digest and steps (JSON list), and the outcome (applied, refused, failed) "
    "with its detail. An apply killed half way has no row: its intent file says so until the "
    "same restart finishes it.",
    key=("applied_at", "job", "action"),
    final="when written",
    meanings=(
        ("applied_at", "when the restart was applied or refused, UTC (the clock of the host applying it)"),
        ("job", "the job restarted"),
        ("action", "resume, rewind or recover"),
        ("requested_by", "who asked for it (the Airflow user who triggered the run, or the CLI's user)"),
        ("approved_by", "who approved it (\"CLI --yes\" for the CLI)"),
        ("plan_digest", "the digest of the plan approved"),
        ("steps", "the plan's steps, as a JSON list"),
        ("outcome", f"{one_of(RESTART_OUTCOMES)}"),
        ("detail", "what happened, in words"),
        ("command", "the command that applies the same restart by hand"),
    )
)

# every table above, in the order declared: what deploy creates and docs/tables.md lists
ALL_TABLES: dict[str, TableSpec] = {spec.name: spec for spec in list(globals().values())
                                    if isinstance(spec, TableSpec)}


# The CHECK constraint every table carries on its key: Delta refuses a write (delta-spark's
# or delta-rs's) that would leave one of its columns null.
KEY_CONSTRAINT = "key_not_null"


def key_constraint(spec: TableSpec) -> str:
    """The SQL of the table's ``KEY_CONSTRAINT``, columns quoted (``partition`` and ``offset``
    are SQL keywords)."""
    return " AND ".join(f"`{column}` IS NOT NULL" for column in spec.required)
