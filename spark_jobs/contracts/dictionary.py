"""What each column of sigflow's tables means: its unit, its allowed values, and for a time
which clock it comes from. Every time is UTC.

A column name means one thing in every table that has it (``MEANINGS``); a table where it
means something narrower or other says so in its own ``TableSpec.meanings``. The meanings
reach readers as the tables' column comments (Spark's DESCRIBE, delta-rs' schema metadata)
and in docs/tables.md, both made from here."""

from __future__ import annotations

from spark_jobs.contracts.contract import SEVERITIES
from spark_jobs.contracts.reasons import REASON_CODES

# where a signal's unit is written: the setting's value, kept as a property of every table
# with a signal column (it is not converted: the devices' unit, as sent)
SIGNAL_UNIT_PROPERTY = "sigflow.signal_unit"
SIGNAL = f"in the devices' unit, as sent (table property {SIGNAL_UNIT_PROPERTY}, the signal_unit setting)"
WINDOW_KINDS = ("tumbling", "sliding")
RECORD_KINDS = ("event", "alert")
RECONCILE_OUTCOMES = ("counted", "beyond_horizon")
RESTART_OUTCOMES = ("applied", "refused", "failed")
CLOSED_BY_GAP = "no event for the session gap"  # device_sessions' closed_reason
SETTING_PROPERTY = "sigflow.setting."  # + a setting's name: what the table's writers compute with


def one_of(values) -> str:
    return "one of " + ", ".join(f"`{value}`" for value in values)


QUARANTINE_REASONS = one_of(REASON_CODES)


MEANINGS: dict[str, str] = {
    # where a record came from
    "key": "the Kafka record's key, as received (the producer's bytes; the device id as UTF-8 from sigflow's producers)",
    "value": "the Kafka record's value, as received (the bytes of the JSON text the contract checks)",
    "topic": "the Kafka topic the record was read from",
    "partition": "the Kafka partition the record was read from",
    "offset": "the record's offset in its Kafka partition",
    "kafka_timestamp": "the record's Kafka timestamp, UTC: when the producer sent it (the broker's append time "
                       "on a topic set to LogAppendTime)",
    "ingest_time": "when sigflow's batch read the record, UTC (the driver's clock)",
    # which batch wrote a row
    "checkpoint_id": "the checkpoint whose batch wrote the row (batch ids start again from 0 after a recover)",
    "batch_id": "the micro-batch of that checkpoint that wrote the row",
    "revision": "0: written by the stream; 1 and up: rewritten by sigflow reconcile, once per correction",
    "corrected_at": "when sigflow reconcile last rewrote the row, UTC (the clock of the host running reconcile); "
                    "null for rows the stream wrote",
    # events
    "event_id": "the event's id, unique per device (two devices may use the same id)",
    "device_id": "the device the record is about",
    "event_time": "when the device measured the signal, UTC (the device's clock: event time)",
    "signal": f"the reading, a finite number, {SIGNAL}",
    "extras": "the record's fields beyond the contract's, each as its JSON text",
    # alerts
    "alert_id": "the alert's id",
    "alert_time": "when the device raised the alert, UTC (the device's clock: event time)",
    "severity": f"the alert's severity, {one_of(SEVERITIES)}",
    "kind": "the alert's kind, as the device sent it (free text)",
    # windows and sessions
    "window_start": "the window's start, UTC (event time), inclusive",
    "window_end": "the window's end, UTC (event time), exclusive: start + the window's length",
    "window_kind": f"{one_of(WINDOW_KINDS)}: tumbling windows of the tumbling_window setting, sliding windows "
                   "of sliding_window every sliding_step (table properties sigflow.setting.*)",
    "avg_signal": f"the mean signal of the events counted, {SIGNAL}",
    "min_signal": f"the lowest signal of the events counted, {SIGNAL}",
    "max_signal": f"the highest signal of the events counted, {SIGNAL}",
    "event_count": "how many distinct events (per device and event id) are counted",
    "session_start": "the session's first event time, UTC (event time)",
    # late events and reconcile
    "job": "the job the row is about",
    "record_kind": f"{one_of(RECORD_KINDS)}: an event, or an alert alert-join dropped (then event_id holds the "
                   "alert id, event_time the alert time, and signal is null)",
    "watermark": "the watermark, UTC (event time: the newest event time seen less the watermark delay)",
    "outcome": "what was decided",
    "run_id": "the run that wrote the row",
    # bookkeeping
    "batch_time": "when the batch was triggered, UTC (the driver's clock)",
    "table_name": "the sigflow table the row is about",
}


def meaning(column: str, own: dict[str, str]) -> str:
    """A column's meaning in a table: the table's own where it gives one, else the shared one;
    "" for none (every column of sigflow's tables has one: tests/spark_jobs/ops/test_data_dictionary.py)."""
    return own.get(column) or MEANINGS.get(column) or ""
