"""What a deployment sets up: topics on the broker's clock."""

from confluent_kafka.admin import NewTopic

from spark_jobs.ops import deploy
from spark_jobs.runtime.kafka import admin as kafka_admin


def test_an_existing_topic_on_the_producers_clock_is_reported_and_switched_to_the_brokers(settings):
    topic = "producer-clock-" + settings.streaming.events_topic
    admin = kafka_admin.admin(settings.kafka.bootstrap_servers)
    admin.create_topics([NewTopic(topic, 1, 1, config={"message.timestamp.type": "CreateTime"})])[topic].result(15)
    s = settings.replace(events_topic=topic)
    reported = dict(line.split(": ", 1) for line in deploy.ensure_topics(s))
    assert "producer's clock (CreateTime)" in reported[f"topic {topic}"]
    assert "use-broker-time" in reported[f"topic {topic}"]
    assert "WARNING" not in reported[f"topic {settings.streaming.alerts_topic}"]  # created by sigflow

    assert deploy.use_broker_time(s)[0] == f"{topic}: timestamps CreateTime -> LogAppendTime (the broker's clock, from the next record on)"
    assert kafka_admin.timestamp_types(settings.kafka.bootstrap_servers, [topic]) == {topic: "LogAppendTime"}
    assert "WARNING" not in dict(line.split(": ", 1) for line in deploy.ensure_topics(s))[f"topic {topic}"]


def test_every_table_keeps_the_retention_the_settings_give_a_follower(spark, settings):
    """How far behind a change-feed follower may fall is the tables' own Delta properties,
    from vacuum_retention and log_retention: set at creation, by a job's table or deploy's,
    and set again by deploy once the settings change."""
    from deltalake import DeltaTable

    from spark_jobs.contracts.tables import ALL_TABLES
    from tests.helpers import run_job, send, single_partition
    from tests.oracle import Event

    s = single_partition(settings).replace(vacuum_retention="2 days", log_retention="10 days")
    send(s, [Event("a", "d1", 1_795_000_000_000, 1.0)])
    run_job(spark, s, "dedup")  # its tables made by the job's own start

    def retention(name: str) -> tuple[str | None, str | None]:
        held = DeltaTable(s.table_uri(name)).metadata().configuration
        return held.get("delta.deletedFileRetentionDuration"), held.get("delta.logRetentionDuration")

    two_days, ten_days = f"interval {2 * 86400} seconds", f"interval {10 * 86400} seconds"
    assert retention("device_events_deduplicated") == (two_days, ten_days)
    deploy.ensure_tables(s)
    assert {name: retention(name) for name in ALL_TABLES} == {name: (two_days, ten_days) for name in ALL_TABLES}
    longer = s.replace(log_retention="60 days")
    done = dict(line.split(": ", 1) for line in deploy.ensure_tables(longer))
    assert done["table device_events_deduplicated"] == f"exists, set delta.logRetentionDuration=interval {60 * 86400} seconds"
    assert retention("late_events") == (two_days, f"interval {60 * 86400} seconds")
