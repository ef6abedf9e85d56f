import os
from pathlib import Path

import pytest

from spark_jobs.config import (
    FLAT_NAMES,
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
    assert s.streaming.watermark_delay.seconds == 600 and s.streaming.watermark_delay.spark == "600 seconds"


def test_precedence_file_then_env_then_overrides(tmp_path):
    path = tmp_path / "sigflow.yaml"
    path.write_text("events_topic: from-file\ntopic_partitions: 6\nfail_on_data_loss: false\n")
    env = {"SIGFLOW_TOPIC_PARTITIONS": "8", "KAFKA_BOOTSTRAP_SERVERS": "kafka:9092"}
    s = load_settings(config_file=path, env=env, overrides={"events_topic": "from-cli"})
    assert (s.streaming.events_topic, s.kafka.topic_partitions, s.kafka.fail_on_data_loss) == ("from-cli", 8, False)
    assert s.kafka.bootstrap_servers == "kafka:9092"


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
        ({"SIGFLOW_JVM_OPTIONS": "-Xss4m Xmx2g"}, "jvm_options"),
    ],
)
def test_bad_settings_name_the_setting(env, names):
    with pytest.raises(ConfigError) as err:
        load_settings(env=env)
    assert names in str(err.value)


def test_a_spark_property_among_the_jvm_options_is_refused_saying_where_it_goes():
    # Spark itself refuses it only when a session starts, with a Java and a Python traceback
    with pytest.raises(ConfigError) as err:
        load_settings(env={"SIGFLOW_JVM_OPTIONS": "-Xss4m -Dspark.sql.codegen.cache.maxEntries=5000"})
    assert "jvm_options" in str(err.value) and "spark-defaults.conf" in str(err.value)
    assert load_settings(env={"SIGFLOW_JVM_OPTIONS": " -Xss4m  -Duser.language=en "}).spark.jvm_options == \
        "-Xss4m -Duser.language=en"


@pytest.mark.parametrize("option, setting", [
    ("-Dsparkling=1", "spark-defaults.conf"),  # Spark: INVALID_EXECUTOR_SPARK_OPTIONS, any -Dspark
    ("-Dname=-Dspark.x", "spark-defaults.conf"),
    ("-Xmx4g", "spark_driver_memory"),  # Spark: "Not allowed to specify max heap", then JAVA_GATEWAY_EXITED
    ("-XX:MaxHeapSize=1g -Xmx1g", "spark_driver_memory"),
])
def test_jvm_options_spark_refuses_are_refused_in_one_line_naming_where_they_go(option, setting):
    from spark_jobs.errors import SigflowError

    with pytest.raises(ConfigError) as err:
        load_settings(env={"SIGFLOW_JVM_OPTIONS": f"-Xss4m {option}"})
    assert "jvm_options" in str(err.value) and setting in str(err.value)
    assert isinstance(err.value, SigflowError)


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


@pytest.mark.parametrize("name, value", [
    ("catalog_uri", "http://metastore:9083"), ("catalog_uri", "thrift://metastore"),
    ("catalog_uri", "thrift://m:9083/x' OR 1=1"), ("catalog_database", "Sigflow"),
    ("catalog_database", "sigflow`; DROP"), ("catalog_database", "1st"),
    ("catalog_db_url", "jdbc:derby:;databaseName=x"), ("catalog_db_url", "jdbc:postgresql://pg/m?password=x"),
])
def test_a_catalog_address_or_database_name_that_is_not_one_is_refused(name, value):
    """Both reach the metastore and SQL text: only a thrift address and a plain lower-case name pass."""
    with pytest.raises(ConfigError, match=name):
        load_settings(env={f"SIGFLOW_{name.upper()}": value})


def test_a_file_setting_is_checked_like_an_env_setting(tmp_path):
    path = tmp_path / "sigflow.yaml"
    path.write_text("session_gap: forever\n")
    with pytest.raises(ConfigError, match="session_gap"):
        load_settings(config_file=path, env={})
    path.write_text("watermark_delay: 2 hours\nwatermark: 1m\n")
    with pytest.raises(ConfigError, match="unknown setting.*watermark"):
        load_settings(config_file=path, env={})


def test_a_misspelt_setting_is_answered_with_the_one_meant():
    """The hint listed all hundred settings; it names the one a typo was close to."""
    with pytest.raises(ConfigError, match="max_offset_per_trigger") as refused:
        load_settings(env={"SIGFLOW_MAX_OFFSET_PER_TRIGGER": "5"})
    assert refused.value.hint.startswith("did you mean max_offsets_per_trigger? ")
    assert "session_gap" not in refused.value.hint


def test_a_config_file_that_is_not_yaml_is_refused_by_line_without_echoing_it(tmp_path):
    """The parser's own text quoted the file's lines as one line of escaped newlines: here a
    password, which a file is refused for holding only once it parses. The error names the
    problem and its line."""
    path = tmp_path / "sigflow.yaml"
    path.write_text("kafka_username: svc\nkafka_password: hunter2: oops\n")
    with pytest.raises(ConfigError) as refused:
        load_settings(config_file=path, env={})
    assert "is not valid YAML" in refused.value.message and "(line 2, column 24)" in refused.value.message
    assert "hunter2" not in refused.value.message and "\\n" not in refused.value.message
    assert refused.value.hint


def test_settings_are_immutable_and_replace_revalidates():
    s = load_settings(env={})
    with pytest.raises(Exception):
        s.events_topic = "other"
    assert s.replace(watermark_delay="2h").streaming.watermark_delay.seconds == 7200
    with pytest.raises(ConfigError, match="watermark_delay"):
        s.replace(watermark_delay="later")


@pytest.mark.parametrize("jit, stop_level", [("tiered", 4), ("quick", 1)])
def test_the_jit_setting_reaches_the_jvm_with_the_code_cache_c1_alone_needs(jit, stop_level):
    """C1 alone would get a 48 MB code cache, which Spark's work fills within a minute
    (the JVM then stops compiling): the quick JIT keeps the tiered JIT's 240 MB."""
    flags = _final_flags(load_settings(env={"SIGFLOW_JIT": jit, "SIGFLOW_JVM_OPTIONS": "-Xss4m"}).spark.java_options)
    assert int(flags["TieredStopAtLevel"]) == stop_level
    assert int(flags["ReservedCodeCacheSize"]) >= 240 * 1024 * 1024
    assert int(flags["ThreadStackSize"]) == 4096  # jvm_options come too


def _final_flags(java_options: str) -> dict[str, str]:
    import re
    import subprocess

    from spark_jobs.runtime.spark import ensure_java

    ensure_java()
    out = subprocess.run([str(Path(os.environ["JAVA_HOME"], "bin", "java")), *java_options.split(),
                          "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    return dict(re.findall(r"^\s*\S+\s+(\w+)\s+=\s+(\S+)", out, re.M))


@pytest.mark.parametrize("env, collector", [
    ({}, "UseParallelGC"),
    ({"SIGFLOW_GC": "g1"}, "UseG1GC"),
    # the JVM refuses two collectors: the one an operator names in jvm_options is the one used
    ({"SIGFLOW_JVM_OPTIONS": "-XX:+UseSerialGC"}, "UseSerialGC"),
    ({"SIGFLOW_GC": "g1", "SIGFLOW_JVM_OPTIONS": "-Xss4m -XX:+UseParallelGC"}, "UseParallelGC"),
])
def test_the_gc_setting_chooses_the_collector_a_jvm_starts_with(env, collector):
    flags = _final_flags(load_settings(env=env).spark.spark_java_options)
    used = {name for name in ("UseParallelGC", "UseG1GC", "UseSerialGC") if flags[name] == "true"}
    assert used == {collector}


# A value other than the default for every setting a user may have set by its flat name,
# written as a user writes it, and what the grouped field then holds.
FLAT_SAMPLES = {
    "data_dir": ("/srv/sigflow", "/srv/sigflow"), "delta_root": ("s3a://lake/d", "s3a://lake/d"),
    "checkpoint_root": ("s3a://lake/c", "s3a://lake/c"), "jars_dir": ("/opt/jars", "/opt/jars"),
    "quality_dir": ("/srv/q", "/srv/q"), "airflow_dir": ("/srv/a", "/srv/a"), "lineage_dir": ("/srv/l", "/srv/l"),
    "kafka_bootstrap_servers": ("k1:9092,k2:9092", "k1:9092,k2:9092"), "topic_partitions": ("6", 6),
    "topic_retention_ms": ("3600000", 3_600_000), "topic_replication_factor": ("3", 3),
    "topic_min_insync_replicas": ("2", 2), "starting_offsets": ("latest", "latest"),
    "max_offsets_per_trigger": ("5000", 5000), "fail_on_data_loss": ("false", False),
    "kafka_read_timeout_s": ("12.5", 12.5), "broker_outage_budget": ("90 seconds", 90),
    "kafka_security_protocol": ("SSL", "SSL"), "kafka_sasl_mechanism": ("PLAIN", "PLAIN"),
    "kafka_username": ("svc-sigflow", "svc-sigflow"), "kafka_password": ("s3cret", "s3cret"),
    "kafka_password_file": ("/run/secrets/kafka", "/run/secrets/kafka"), "kafka_ca_file": ("/etc/ca.pem", "/etc/ca.pem"),
    "events_topic": ("ev", "ev"), "alerts_topic": ("al", "al"), "trigger_interval": ("2s", 2),
    "watermark_delay": ("20 minutes", 1200), "max_clock_ahead": ("30s", 30), "multiple_watermark_policy": ("max", "max"),
    "tumbling_window": ("1 minute", 60), "sliding_window": ("4 minutes", 240), "sliding_step": ("2 minutes", 120),
    "fleet_window": ("1 hour", 3600), "session_gap": ("5 minutes", 300), "alert_watermark_delay": ("1 minute", 60),
    "late_horizon": ("2 days", 172800),
    "alert_context": ("2 minutes", 120), "critical_alerts_topic": ("pager", "pager"),
    "critical_severities": ("critical, warning", "critical,warning"), "critical_kinds": ("smoke", "smoke"),
    "real_time_checkpoint_interval": ("30 seconds", 30), "lineage_url": ("http://marquez:5000/", "http://marquez:5000"),
    "lineage_spark_listener": ("true", True),
    "spark_master": ("spark://m:7077", "spark://m:7077"), "spark_auth_secret_file": ("/run/s", "/run/s"),
    "spark_executor_memory": ("4g", "4g"), "spark_driver_memory": ("3g", "3g"), "jvm_options": ("-Xss4m", "-Xss4m"),
    "jit": ("quick", "quick"), "gc": ("g1", "g1"), "class_data_sharing": ("false", False), "shuffle_partitions": ("8", 8), "records_per_write_task": ("1000", 1000),
    "spark_ui": ("true", True), "spark_ui_port": ("4050", 4050), "spark_log_level": ("WARN", "WARN"),
    "lease_ttl": ("5 minutes", 300), "restart_approvers": ("alice,bob", "alice,bob"),
    "restart_self_approval": ("true", True), "kafka_accept_producer_time": ("true", True), "signal_min": ("-5", -5.0),
    "signal_max": ("5", 5.0), "signal_unit": ("dBm", "dBm"), "quality_freshness": ("1 hour", 3600), "quality_chunk_rows": ("5000", 5000),
    "vacuum_retention": ("2 days", 172_800),
    "log_retention": ("60 days", 5_184_000),
    "vacuum_retention_floor": ("2 hours", 7200), "quarantine_retention": ("10 days", 864_000),
    "raw_retention": ("400 days", 34_560_000),
    "table_status_retention": ("3 days", 259_200),
    "checkpoint_batches_retained": ("50", 50), "metrics_host": ("0.0.0.0", "0.0.0.0"), "metrics_port": ("9500", 9500),
    "catalog_uri": ("thrift://metastore:9083", "thrift://metastore:9083"), "catalog_database": ("iot", "iot"),
    "catalog_db_url": ("jdbc:postgresql://postgres:5432/metastore", "jdbc:postgresql://postgres:5432/metastore"),
    "catalog_db_user": ("hive", "hive"), "catalog_db_password_file": ("/run/secrets/m", "/run/secrets/m"),
    "sql_host": ("0.0.0.0", "0.0.0.0"), "sql_port": ("15003", 15003), "sql_token_file": ("/run/t", "/run/t"),
    "catalog_port": ("29083", 29083),
    "broker_port": ("29092", 29092), "broker_heap": ("1g", "1g"), "broker_log_level": ("WARN", "WARN"),
    "cluster_port": ("7078", 7078), "cluster_ui_port": ("8091", 8091), "cluster_workers": ("3", 3),
    "cluster_worker_memory": ("2g", "2g"), "postgres_port": ("5433", 5433), "airflow_port": ("8081", 8081),
}


def _held(settings, name: str):
    value = settings.flat()[name]
    if hasattr(value, "get_secret_value"):
        return value.get_secret_value()
    return value.seconds if hasattr(value, "seconds") else value


def test_every_flat_name_users_set_still_reaches_its_setting(tmp_path):
    assert set(FLAT_SAMPLES) == set(FLAT_NAMES)  # a new setting gets a sample here
    for name, (written, held) in FLAT_SAMPLES.items():
        from_env = load_settings(env={f"SIGFLOW_{name.upper()}": written})
        assert _held(from_env, name) == held, name
        if name == "kafka_password":
            continue  # never from a file (test_a_password_in_the_config_file_is_refused)
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"{name}: {written!r}\n")
        assert _held(load_settings(config_file=path, env={}), name) == held, name


def test_grouped_code_reads_the_flat_names_and_a_group_may_be_written_whole(tmp_path):
    s = load_settings(env={"SIGFLOW_KAFKA_USERNAME": "svc", "SIGFLOW_SPARK_MASTER": "spark://m:7077",
                           "SIGFLOW_EVENTS_TOPIC": "ev"})
    assert (s.kafka.username, s.spark.master, s.streaming.events_topic) == ("svc", "spark://m:7077", "ev")
    path = tmp_path / "sigflow.yaml"
    path.write_text("kafka:\n  bootstrap_servers: k:9092\n  topic_partitions: 6\nsession_gap: 5 minutes\n")
    s = load_settings(config_file=path, env={"SIGFLOW_TOPIC_PARTITIONS": "8"})
    assert (s.kafka.bootstrap_servers, s.kafka.topic_partitions, s.streaming.session_gap.seconds) == ("k:9092", 8, 300)
    assert s.replace(topic_partitions=2).kafka.topic_partitions == 2


def test_a_job_is_given_only_the_streaming_settings():
    from spark_jobs.jobs.registry import JOBS

    s = load_settings(env={})
    for job in JOBS.values():
        assert job.topics(s.streaming)  # the job's inputs come from its own group
        assert set(job.checkpoint_settings) <= set(type(s.streaming).model_fields)


def test_a_group_set_as_one_value_is_refused_saying_how_to_set_it():
    with pytest.raises(ConfigError, match="kafka is a group of settings: set its fields by their own names"):
        load_settings(env={"SIGFLOW_KAFKA": "k:9092", "SIGFLOW_TOPIC_PARTITIONS": "2"})
