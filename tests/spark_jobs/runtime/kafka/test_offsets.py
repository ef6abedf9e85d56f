import pytest

from spark_jobs.errors import BrokerUnavailable, SigflowError
from spark_jobs.local.simulate import generate_events
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.kafka import offsets as kafka_offsets
from tests.helpers import produce


def test_create_topics_is_idempotent(settings):
    first = kafka_admin.create_topics(settings.kafka.bootstrap_servers, [settings.streaming.events_topic, "fresh-" + settings.streaming.events_topic], 2, 60000)
    assert first[settings.streaming.events_topic].startswith("exists")
    assert first["fresh-" + settings.streaming.events_topic] == "created (2 partitions)"
    again = kafka_admin.create_topics(settings.kafka.bootstrap_servers, ["fresh-" + settings.streaming.events_topic], 2, 60000)
    assert again["fresh-" + settings.streaming.events_topic].startswith("exists")


def test_created_topics_are_listed_with_their_partitions_when_create_topics_returns(settings):
    topics = [f"listed-{n}-{settings.streaming.events_topic}" for n in range(12)]
    kafka_admin.create_topics(settings.kafka.bootstrap_servers, topics, 3, 60000)
    # no wait between: a producer or a job starts right after creation
    assert {t: kafka_admin.topic_partitions(settings.kafka.bootstrap_servers, t) for t in topics} == \
        {t: [0, 1, 2] for t in topics}


def test_offset_bounds_are_confirmed_by_reading(settings):
    for seed in range(4):
        produce(settings, generate_events(1000, seed=seed, malformed_ratio=0))
    parts = kafka_admin.topic_partitions(settings.kafka.bootstrap_servers, settings.streaming.events_topic)
    bounds = kafka_offsets.offset_bounds(settings.kafka.bootstrap_servers, settings.streaming.events_topic, parts)
    assert sum(end - start for start, end in bounds.values()) == 4000


def test_unreachable_broker_fails_fast_with_what_to_do():
    with pytest.raises(BrokerUnavailable, match="did not answer") as err:
        kafka_admin.check_reachable("127.0.0.1:1", timeout_s=1)
    assert "sigflow broker start" in err.value.hint


def test_the_topics_a_reachability_check_listed_give_a_runs_partitions(settings):
    bootstrap, topic = settings.kafka.bootstrap_servers, settings.streaming.events_topic
    answer = kafka_admin.check_reachable(bootstrap)
    assert kafka_admin.topics_partitions(bootstrap, [topic], listing=answer.listing) == \
        {topic: kafka_admin.topic_partitions(bootstrap, topic)}
    with pytest.raises(SigflowError, match="does not exist"):
        kafka_admin.topics_partitions(bootstrap, [topic, "no-such-topic-" + topic], listing=answer.listing)


def test_missing_topic_says_how_to_create_it(settings):
    with pytest.raises(SigflowError, match="does not exist") as err:
        kafka_admin.topic_partitions(settings.kafka.bootstrap_servers, "no-such-topic-" + settings.streaming.events_topic)
    assert "sigflow topics create" in err.value.hint
