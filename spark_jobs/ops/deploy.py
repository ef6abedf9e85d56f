"""What a deployment sets up before any job starts: settings, topics, tables.

Each step is idempotent and says what it found: deploying twice changes nothing. The
``sigflow_deploy`` DAG runs these steps, then starts the jobs with spark-submit.
"""

from __future__ import annotations

from spark_jobs.config import Settings
from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.errors import BrokerUnavailable, SigflowError
from spark_jobs.runtime.checkpoint import tables_kept
from spark_jobs.runtime.delta.properties import table_properties
from spark_jobs.runtime.delta.schema import create_table
from spark_jobs.runtime.kafka import address as kafka_address
from spark_jobs.runtime.kafka import admin as kafka_admin


def describe_settings(settings: Settings) -> list[str]:
    """The effective settings: loading them is the validation. The Kafka password prints as
    asterisks (a SecretStr); a password file is named, never read out."""
    lines = [f"settings from {settings.source_file or 'defaults and environment'}:"]
    for name, value in settings.flat().items():
        lines.append(f"  {name} = {value!r}")
    if not settings.kafka.bootstrap_servers:  # the value in use, not only the setting
        index = next(i for i, line in enumerate(lines) if line.startswith("  kafka_bootstrap_servers = "))
        try:
            lines[index] += f" (unset: the embedded broker at {kafka_address.bootstrap_servers(settings)})"
        except BrokerUnavailable:
            lines[index] += " (unset, and the embedded broker is not running)"
    return lines


def ensure_topics(settings: Settings) -> list[str]:
    bootstrap = kafka_address.connection(settings)
    kafka_admin.check_reachable(bootstrap)
    outcome = kafka_admin.create_topics(
        bootstrap, [settings.streaming.events_topic, settings.streaming.alerts_topic,
                    settings.streaming.critical_alerts_topic],
        settings.kafka.topic_partitions, settings.kafka.topic_retention_ms,
        settings.kafka.topic_replication_factor, settings.kafka.topic_min_insync_replicas,
    )
    return [f"topic {topic}: {what}" for topic, what in outcome.items()]


def use_broker_time(settings: Settings) -> list[str]:
    """Stamp the configured topics' records with the broker's clock (docs/semantics.md)."""
    bootstrap = kafka_address.connection(settings)
    kafka_admin.check_reachable(bootstrap)
    return [kafka_admin.use_broker_time(bootstrap, topic) for topic in (settings.streaming.events_topic, settings.streaming.alerts_topic)]


def grow_topics(settings: Settings, partitions: int, topics: list[str] | None = None) -> list[str]:
    """Scale topics up to ``partitions`` (docs/runbooks/topic-scale-up.md): what happened to each."""
    bootstrap = kafka_address.connection(settings)
    kafka_admin.check_reachable(bootstrap)
    return [kafka_admin.add_partitions(bootstrap, topic, partitions)
            for topic in topics or [settings.streaming.events_topic, settings.streaming.alerts_topic]]


def ensure_tables(settings: Settings) -> list[str]:
    """Create or migrate every table, except one a job's batches wrote that is gone now: made
    again empty, it would stand in for the table the job's checkpoint goes on from, and is
    refused, after the others are made, naming it (runtime/checkpoint/tables_kept.py)."""
    lost = tables_kept.lost_tables(settings)
    done = [f"table {name}: {create_table(settings.table_uri(name), spec, table_properties(settings, spec))}"
            for name, spec in ALL_TABLES.items() if name not in lost]
    if lost:
        raise SigflowError(
            "not made again: " + "; ".join(f"{name} {what}" for name, what in lost.items()),
            f"if the tables moved, set delta_root to where they are; else restore each, or rebuild it with its "
            f"job's recover ({tables_kept.RUNBOOK})", done)
    return done

