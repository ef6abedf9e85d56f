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
