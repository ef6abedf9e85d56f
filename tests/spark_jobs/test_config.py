import pytest

from spark_jobs.config import duration_seconds, load_settings, spark_interval
from spark_jobs.errors import ConfigError


def test_defaults_work_locally():
    s = load_settings(env={})
    assert s.table_uri("device_events") == "data/delta/device_events"
    assert s.checkpoint_uri("ingest") == "data/checkpoints/ingest"
    assert s.watermark_delay.seconds == 600 and s.watermark_delay.spark == "600 seconds"


def test_precedence_file_then_env_then_overrides(tmp_path):
    path = tmp_path / "sigflow.yaml"
    path.write_text("events_topic: from-file\ntopic_partitions: 6\nfail_on_data_loss: false\n")
    env = {"SIGFLOW_TOPIC_PARTITIONS": "8", "KAFKA_BOOTSTRAP_SERVERS": "kafka:9092"}
    s = load_settings(config_file=path, env=env, overrides={"events_topic": "from-cli"})
    assert (s.events_topic, s.topic_partitions, s.fail_on_data_loss) == ("from-cli", 8, False)
    assert s.kafka_bootstrap_servers == "kafka:9092"


def test_object_store_roots_are_accepted():
    s = load_settings(env={"SIGFLOW_DELTA_ROOT": "s3a://lake/sigflow/", "SIGFLOW_CHECKPOINT_ROOT": "s3a://lake/ck"})
    assert s.table_uri("device_events") == "s3a://lake/sigflow/device_events"
    assert s.checkpoint_uri("ingest") == "s3a://lake/ck/ingest"


@pytest.mark.parametrize(
    "env, names",
    [
        ({"SIGFLOW_TOPIC_PARTITIONS": "three"}, "topic_partitions"),
        ({"SIGFLOW_WATERMARK_DELAY": "soon"}, "watermark_delay"),
        ({"SIGFLOW_ENGINE": "jdbc"}, "engine"),
        ({"SIGFLOW_STARTING_OFFSETS": "yesterday"}, "starting_offsets"),
        ({"SIGFLOW_WATERMARK": "10m"}, "watermark"),
        ({"SIGFLOW_SPARK_DRIVER_MEMORY": "2 GB"}, "spark_driver_memory"),
    ],
)
def test_bad_settings_name_the_setting(env, names):
    with pytest.raises(ConfigError) as err:
        load_settings(env=env)
    assert names in str(err.value)


def test_missing_config_file_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(config_file=tmp_path / "nope.yaml", env={})


def test_durations():
    assert duration_seconds("10 minutes") == 600
    assert duration_seconds("30s") == 30
    assert spark_interval("5m") == "300 seconds"
