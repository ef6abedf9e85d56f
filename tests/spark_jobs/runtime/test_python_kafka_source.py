import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from spark_jobs.local.simulate import generate_events
from spark_jobs.runtime.python_kafka_source import KafkaStreamReader, split_limit
from tests.helpers import produce


def test_split_limit_shares_by_backlog_and_never_exceeds_it():
    available = {("t", "0"): 900, ("t", "1"): 100, ("t", "2"): 0}
    assert split_limit(available, 100) == {("t", "0"): 90, ("t", "1"): 10, ("t", "2"): 0}
    assert split_limit(available, 5000) == available


def test_split_limit_rounds_as_sparks_kafka_source():
    # Spark floors each share and lifts a share below 1 to 1 (so the sum may pass the limit,
    # or fall short of it): the engines' batches only match if the rounding does.
    assert split_limit({("t", "0"): 1, ("t", "1"): 1}, 1) == {("t", "0"): 1, ("t", "1"): 1}
    assert split_limit({("a", "0"): 150, ("b", "0"): 30}, 80) == {("a", "0"): 66, ("b", "0"): 13}


def _reader(settings, **options):
    return KafkaStreamReader({
        "kafka.bootstrap.servers": settings.kafka_bootstrap_servers,
        "subscribe": settings.events_topic, **options,
    })


def test_latest_offset_reaches_the_real_end_not_the_reported_one(settings):
    for seed in range(3):  # several produce calls -> several record batches per partition
        produce(settings, generate_events(700, seed=seed, malformed_ratio=0))
    reader = _reader(settings)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert sum(end[settings.events_topic].values()) == 2100


def test_max_offsets_per_trigger_caps_each_batch(settings):
    produce(settings, generate_events(1000, malformed_ratio=0))
    reader = _reader(settings, maxOffsetsPerTrigger="300")
    assert reader.getDefaultReadLimit() == ReadMaxRows(300)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(300))
    # floored shares of 300 over 3 partitions (Spark's rounding): at most 300, at least 298
    assert 298 <= sum(end[settings.events_topic].values()) <= 300
    # The engine may ask for everything (e.g. to respect a trigger) and must get it.
    assert sum(reader.latestOffset(start, ReadAllAvailable())[settings.events_topic].values()) == 1000


def test_starting_offsets_latest_and_per_partition_json(settings):
    produce(settings, generate_events(90, malformed_ratio=0))
    latest = _reader(settings, startingOffsets="latest").initialOffset()[settings.events_topic]
    assert sum(latest.values()) == 90
    explicit = _reader(
        settings, startingOffsets=f'{{"{settings.events_topic}": {{"0": 5, "1": -1}}}}'
    ).initialOffset()[settings.events_topic]
    assert explicit == {"0": 5, "1": latest["1"], "2": 0}


def test_reads_exactly_the_planned_range_with_the_native_schema(settings, spark):
    records = generate_events(500, malformed_ratio=0)
    produce(settings, records)
    reader = _reader(settings)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    rows = []
    for part in reader.partitions(start, end):
        for batch in reader.read(part):
            rows.extend(batch.to_pylist())
    assert sorted(r["value"] for r in rows) == sorted(r.value for r in records)
    assert {r["topic"] for r in rows} == {settings.events_topic}
    assert all(r["timestampType"] == 0 and r["timestamp"] is not None for r in rows)


def test_checkpoint_past_the_end_is_data_loss(settings):
    produce(settings, generate_events(10, malformed_ratio=0))
    reader = _reader(settings)
    ahead = {settings.events_topic: {"0": 10_000, "1": 0, "2": 0}}
    with pytest.raises(RuntimeError, match="SIGFLOW_DATA_LOSS"):
        reader.latestOffset(ahead, ReadAllAvailable())
    lenient = _reader(settings, failOnDataLoss="false")
    end = lenient.latestOffset(ahead, ReadAllAvailable())
    assert end[settings.events_topic]["0"] <= 10  # restarted from what the topic has
