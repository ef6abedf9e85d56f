import pytest

from spark_jobs.config import load_settings
from spark_jobs.engines import (
    DELTA_SPARK_CLASS,
    KAFKA_PROVIDER_CLASS,
    choose_engines,
    detect_engines,
    kafka_options,
)
from spark_jobs.errors import ConfigError


def test_auto_takes_native_engines_when_their_classes_load():
    engines = choose_engines(load_settings(env={}), lambda name: True)
    assert (engines.kafka_source, engines.delta_writer, engines.kafka_format) == ("native", "delta-spark", "kafka")


def test_auto_falls_back_to_python_source_and_delta_rs():
    engines = choose_engines(load_settings(env={}), lambda name: False)
    assert (engines.kafka_source, engines.delta_writer, engines.kafka_format) == ("python", "delta-rs", "sigflow_kafka")


def test_forcing_a_missing_native_engine_is_a_config_error():
    only_delta = {DELTA_SPARK_CLASS}
    with pytest.raises(ConfigError, match="Kafka connector"):
        choose_engines(load_settings(env={"SIGFLOW_KAFKA_SOURCE": "native"}), only_delta.__contains__)
    only_kafka = {KAFKA_PROVIDER_CLASS}
    with pytest.raises(ConfigError, match="delta-spark"):
        choose_engines(load_settings(env={"SIGFLOW_DELTA_WRITER": "delta-spark"}), only_kafka.__contains__)


def test_production_settings_yield_native_kafka_options():
    s = load_settings(env={
        "KAFKA_BOOTSTRAP_SERVERS": "kafka:9092", "SIGFLOW_MAX_OFFSETS_PER_TRIGGER": "50000",
        "SIGFLOW_DELTA_ROOT": "s3a://sigflow/delta", "SIGFLOW_STARTING_OFFSETS": "latest",
    })
    assert kafka_options(s, s.kafka_bootstrap_servers, [s.events_topic]) == {
        "kafka.bootstrap.servers": "kafka:9092",
        "subscribe": "device-events",
        "startingOffsets": "latest",
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        "maxOffsetsPerTrigger": "50000",
    }
    assert s.table_uri("device_events") == "s3a://sigflow/delta/device_events"


def test_this_machine_has_no_native_connectors(spark):
    # The embedded path is the one CI proves; if this fails, the classpath changed.
    assert detect_engines(spark, load_settings(env={})).kafka_source == "python"
