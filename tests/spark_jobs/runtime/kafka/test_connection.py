"""One Kafka connection, rendered for each client library; the password never printed."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from spark_jobs.config import load_settings
from spark_jobs.errors import ConfigError
from spark_jobs.runtime.kafka import address as kafka_address
from spark_jobs.runtime.kafka.connection import KafkaConnection

TRICKY = 'p"a\\ss w0rd;'  # quotes, a backslash, a space and a semicolon: JAAS syntax characters


def _sasl(**changes) -> KafkaConnection:
    values = dict(bootstrap_servers="k1:9093,k2:9093", security_protocol="SASL_SSL",
                  sasl_mechanism="SCRAM-SHA-512", username="svc-sigflow", password=SecretStr(TRICKY),
                  ca_file="/etc/kafka/ca.pem")
    return KafkaConnection(**{**values, **changes})


def _security(confluent: dict) -> dict:
    return {k: v for k, v in confluent.items() if k != "reconnect.backoff.ms"}  # how it connects, not as whom


def test_each_client_library_gets_the_same_security_in_its_own_names():
    conn = _sasl()
    assert _security(conn.confluent()) == {
        "bootstrap.servers": "k1:9093,k2:9093", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "svc-sigflow", "sasl.password": TRICKY, "ssl.ca.location": "/etc/kafka/ca.pem"}
    assert conn.kafka_python() == {
        "bootstrap_servers": "k1:9093,k2:9093", "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "svc-sigflow", "sasl_plain_password": TRICKY, "ssl_cafile": "/etc/kafka/ca.pem"}
    options = conn.spark_options()
    assert options["kafka.sasl.jaas.config"].startswith("org.apache.kafka.common.security.scram.ScramLoginModule required ")
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert _sasl(sasl_mechanism="PLAIN").spark_options()["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required ")


@pytest.mark.parametrize("password", [TRICKY, "plain", ""])
def test_the_python_source_reads_back_what_spark_options_say(password):
    conn = _sasl(password=SecretStr(password))
    assert KafkaConnection.from_spark_options(conn.spark_options()) == conn
    lowered = {k.lower(): v for k, v in conn.spark_options().items()}  # as Spark hands them over
    assert KafkaConnection.from_spark_options(lowered) == conn


def test_plaintext_carries_no_security_options():
    conn = KafkaConnection.of("localhost:9092")
    assert conn.spark_options() == {"kafka.bootstrap.servers": "localhost:9092", "kafka.security.protocol": "PLAINTEXT"}
    assert _security(conn.confluent()) == {"bootstrap.servers": "localhost:9092", "security.protocol": "PLAINTEXT"}


def test_the_password_never_shows_in_text():
    conn = _sasl()
    for text in (str(conn), repr(conn), conn.describe(), f"{conn}"):
        assert TRICKY not in text
    assert conn.describe() == "k1:9093,k2:9093 (SASL_SSL, SCRAM-SHA-512 as svc-sigflow)"


def test_settings_build_the_connection_with_the_password_from_the_environment_or_a_file(tmp_path):
    env = {"KAFKA_BOOTSTRAP_SERVERS": "k1:9093", "SIGFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "SIGFLOW_KAFKA_USERNAME": "svc", "SIGFLOW_KAFKA_CA_FILE": "/ca.pem"}
    from_env = kafka_address.connection(load_settings(env={**env, "SIGFLOW_KAFKA_PASSWORD": "s3cret"}))
    secret = tmp_path / "kafka.pass"
    secret.write_text("s3cret\n")  # as `echo` writes it
    from_file = kafka_address.connection(load_settings(env={**env, "SIGFLOW_KAFKA_PASSWORD_FILE": str(secret)}))
    assert from_env == from_file == KafkaConnection("k1:9093", "SASL_SSL", "SCRAM-SHA-512", "svc",
                                                    SecretStr("s3cret"), "/ca.pem")


def test_sasl_without_a_username_or_a_password_is_an_error_naming_the_setting(tmp_path):
    with pytest.raises(ConfigError, match="needs kafka_username"):
        load_settings(env={"SIGFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "SIGFLOW_KAFKA_PASSWORD": "x"})
    with pytest.raises(ConfigError, match="needs exactly one of SIGFLOW_KAFKA_PASSWORD or kafka_password_file"):
        load_settings(env={"SIGFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "SIGFLOW_KAFKA_USERNAME": "svc"})
    with pytest.raises(ConfigError, match="is not a readable file"):
        load_settings(env={"SIGFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "SIGFLOW_KAFKA_USERNAME": "svc",
                           "SIGFLOW_KAFKA_PASSWORD_FILE": str(tmp_path / "missing")})


def test_a_password_in_the_config_file_is_refused_and_never_echoed(tmp_path):
    config = tmp_path / "sigflow.yaml"
    config.write_text("kafka_username: svc\nkafka_password: hunter2-in-git\n")
    with pytest.raises(ConfigError) as refused:
        load_settings(config, env={})
    assert "does not belong in a file" in str(refused.value) and "hunter2-in-git" not in str(refused.value)
    # A bad value of the password is reported by name, its value masked.
    with pytest.raises(ConfigError) as invalid:
        load_settings(env={}, overrides={"kafka_password": ["hunter2-as-a-list"]})
    assert "kafka_password='**********'" in str(invalid.value) and "hunter2" not in str(invalid.value)
