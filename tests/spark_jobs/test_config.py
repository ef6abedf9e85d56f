import os
from pathlib import Path

import pytest

from spark_jobs.config import (
    duration_seconds,
    load_settings,
    on_local_disk,
    spark_interval,
)
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
    assert not on_local_disk(s.checkpoint_root_uri) and not on_local_disk(s.delta_root_uri)


@pytest.mark.parametrize("uri", ["data/checkpoints", "/var/sigflow/ck", "file:///var/sigflow/ck", "FILE:/x"])
def test_paths_and_file_uris_are_on_local_disk(uri):
    assert on_local_disk(uri)


@pytest.mark.parametrize(
    "env, names",
    [
        ({"SIGFLOW_TOPIC_PARTITIONS": "three"}, "topic_partitions"),
        ({"SIGFLOW_WATERMARK_DELAY": "soon"}, "watermark_delay"),
        ({"SIGFLOW_MULTIPLE_WATERMARK_POLICY": "avg"}, "multiple_watermark_policy"),
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


def test_an_error_names_the_setting_its_variable_and_the_allowed_form():
    with pytest.raises(ConfigError) as err:
        load_settings(env={"SIGFLOW_TRIGGER_INTERVAL": "often"})
    text = str(err.value)
    assert "trigger_interval='often'" in text and "SIGFLOW_TRIGGER_INTERVAL" in text and "10 minutes" in text


def test_every_invalid_setting_is_reported_at_once():
    with pytest.raises(ConfigError) as err:
        load_settings(env={"SIGFLOW_SHUFFLE_PARTITIONS": "0", "SIGFLOW_BROKER_HEAP": "lots"})
    assert err.value.message == "2 settings are invalid"
    assert sorted(line.split("=")[0] for line in err.value.details) == ["setting broker_heap", "setting shuffle_partitions"]


def test_a_file_setting_is_checked_like_an_env_setting(tmp_path):
    path = tmp_path / "sigflow.yaml"
    path.write_text("session_gap: forever\n")
    with pytest.raises(ConfigError, match="session_gap"):
        load_settings(config_file=path, env={})
    path.write_text("watermark_delay: 2 hours\nwatermark: 1m\n")
    with pytest.raises(ConfigError, match="unknown setting.*watermark"):
        load_settings(config_file=path, env={})


def test_settings_are_immutable_and_replace_revalidates():
    s = load_settings(env={})
    with pytest.raises(Exception):
        s.events_topic = "other"
    assert s.replace(watermark_delay="2h").watermark_delay.seconds == 7200
    with pytest.raises(ConfigError, match="watermark_delay"):
        s.replace(watermark_delay="later")


@pytest.mark.parametrize("jit, stop_level", [("tiered", 4), ("quick", 1)])
def test_the_jit_setting_reaches_the_jvm_with_the_code_cache_c1_alone_needs(jit, stop_level):
    """C1 alone would get a 48 MB code cache, which Spark's work fills within a minute
    (the JVM then stops compiling): the quick JIT keeps the tiered JIT's 240 MB."""
    import re
    import subprocess

    from spark_jobs.runtime.spark import ensure_java

    ensure_java()
    settings = load_settings(env={"SIGFLOW_JIT": jit, "SIGFLOW_JVM_OPTIONS": "-Xss4m"})
    out = subprocess.run([str(Path(os.environ["JAVA_HOME"], "bin", "java")), *settings.java_options.split(),
                          "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True, check=True).stdout
    flags = dict(re.findall(r"^\s*\S+\s+(\w+)\s+=\s+(\S+)", out, re.M))
    assert int(flags["TieredStopAtLevel"]) == stop_level
    assert int(flags["ReservedCodeCacheSize"]) >= 240 * 1024 * 1024
    assert int(flags["ThreadStackSize"]) == 4096  # jvm_options come too
