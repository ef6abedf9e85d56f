"""Kafka over SASL_SSL: the embedded broker with a TLS listener (a CA and certificate made at
start) and SCRAM/PLAIN users, and every client of the pipeline speaking it. The password is
searched for in everything the pipeline writes or prints."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import pytest

from spark_jobs.config import load_settings
from spark_jobs.errors import KafkaRefused
from spark_jobs.local import broker
from spark_jobs.local.simulate import MALFORMED_KINDS, generate_events
from spark_jobs.runtime.kafka import address as kafka_address
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.kafka.connection import KafkaConnection
from tests.conftest import SECURED_USER
from tests.helpers import sigflow, table

pytestmark = pytest.mark.slow  # a SASL_SSL broker of its own


def _env(settings, password: str, **extra: str) -> dict[str, str]:
    return {"SIGFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "SIGFLOW_KAFKA_USERNAME": SECURED_USER,
            "SIGFLOW_KAFKA_PASSWORD": password, "SIGFLOW_KAFKA_CA_FILE": settings.kafka.ca_file,
            "SIGFLOW_TOPIC_PARTITIONS": "2", **extra}


def _files_containing(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_the_pipeline_runs_end_to_end_over_sasl_ssl_and_the_password_is_never_written(secured_broker, tmp_path):
    base, password, _ = secured_broker
    s = base.replace(data_dir=str(tmp_path / "data"))
    env = _env(s, password, SIGFLOW_KAFKA_SASL_MECHANISM="SCRAM-SHA-512")
    printed = []
    for args in (["topics", "create"], ["simulate", "--events", "600", "--seed", "11"],
                 ["pipeline", "ingest", "dedup"], ["status"]):
        done = sigflow(s, *args, extra_env=env, timeout=600)
        printed.append(done.stdout + done.stderr)
        assert done.returncode == 0, printed[-1]

    records = generate_events(600, seed=11)  # what `simulate --events 600 --seed 11` sent
    valid = [r for r in records if r.kind not in MALFORMED_KINDS]
    assert len(table(s, "device_events")) == len(valid)
    quarantined = table(s, "quarantined_events")
    assert (quarantined.topic == s.streaming.events_topic).sum() == len(records) - len(valid)
    deduplicated = table(s, "device_events_deduplicated").event_id
    assert deduplicated.is_unique and set(deduplicated) == {json.loads(r.value)["event_id"] for r in valid}

    # Nowhere: not in the console, the job logs and progress files, the checkpoints, the
    # tables' files, nor in any cell of pipeline_metrics.
    assert not [text for text in printed if password in text]
    assert _files_containing(Path(s.data_dir), password.encode()) == []
    metrics = table(s, "pipeline_metrics")
    assert len(metrics) > 0 and not metrics.astype(str).apply(lambda col: col.str.contains(password)).any().any()


def test_the_plain_and_scram_sha_256_mechanisms_are_accepted_too(secured_broker):
    s, _, _ = secured_broker
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        kafka_admin.check_reachable(kafka_address.connection(s.replace(kafka_sasl_mechanism=mechanism)))


def test_a_wrong_password_fails_fast_with_one_line_naming_the_setting(secured_broker, tmp_path):
    base, password, _ = secured_broker
    s = base.replace(data_dir=str(tmp_path / "data"))
    wrong = "not-" + password
    started = time.monotonic()
    done = sigflow(s, "run", "ingest", extra_env=_env(s, wrong))
    elapsed = time.monotonic() - started

    assert done.returncode == 2
    error, hint = (done.stdout + done.stderr).strip().splitlines()  # no traceback, no Spark start
    assert error == (f"sigflow: error: Kafka at {s.kafka.bootstrap_servers} refused the credentials of user "
                     f"'{SECURED_USER}' (SCRAM-SHA-512): check kafka_username and kafka_password")
    assert "SIGFLOW_KAFKA_PASSWORD" in hint and "kafka_password_file" in hint
    assert wrong not in done.stdout + done.stderr
    print(f"wrong password refused after {elapsed:.1f} s, CLI start-up included")


def test_a_plaintext_client_is_refused_by_the_sasl_ssl_listener(secured_broker):
    s, password, info = secured_broker
    with pytest.raises(KafkaRefused, match="hung up on a PLAINTEXT connection"):
        kafka_admin.check_reachable(KafkaConnection(info.bootstrap_servers))
    # Right credentials without TLS are refused the same way: the listener speaks TLS first.
    with pytest.raises(KafkaRefused, match="hung up on a SASL_PLAINTEXT connection"):
        kafka_admin.check_reachable(kafka_address.connection(s.replace(kafka_security_protocol="SASL_PLAINTEXT")))


def test_a_client_that_does_not_trust_the_brokers_ca_is_refused(secured_broker):
    s, _, _ = secured_broker
    with pytest.raises(KafkaRefused, match="TLS handshake failed.*certificate verify failed"):
        kafka_admin.check_reachable(kafka_address.connection(s.replace(kafka_ca_file="/etc/ssl/certs/ca-certificates.crt")))


def test_the_password_file_and_a_restart_with_a_changed_password(secured_broker, tmp_path):
    s, password, _ = secured_broker
    home = load_settings(env={}, overrides={**s.flat(), "kafka_bootstrap_servers": ""})
    new = "pw2-" + secrets.token_urlsafe(18)
    secret_file = tmp_path / "kafka.pass"
    secret_file.write_text(new + "\n")
    changed = home.replace(kafka_password="", kafka_password_file=str(secret_file))
    broker.stop(home)
    broker.start(changed)  # the SCRAM credential follows the configured password
    try:
        kafka_admin.check_reachable(kafka_address.connection(changed))
        with pytest.raises(KafkaRefused, match="refused the credentials"):
            kafka_admin.check_reachable(kafka_address.connection(home))
    finally:
        broker.stop(changed)
        broker.start(home)


def test_a_password_with_quotes_and_backslashes_is_one_password_not_a_second_user(secured_broker):
    """The embedded broker writes the client's password into its JAAS line: a quote in it
    once ended the value and could add a user. Quoted and escaped, the whole text is the
    password (PLAIN and SCRAM take it), no user is added, and a newline is refused."""
    from spark_jobs.errors import ConfigError

    s, _, _ = secured_broker
    home = load_settings(env={}, overrides={**s.flat(), "kafka_bootstrap_servers": ""})
    tricky = home.replace(kafka_password='pw\\" user_mallory="stolen" x="' + secrets.token_urlsafe(8))
    broker.stop(home)
    try:
        broker.start(tricky)
        for mechanism in ("PLAIN", "SCRAM-SHA-512"):
            kafka_admin.check_reachable(kafka_address.connection(tricky.replace(kafka_sasl_mechanism=mechanism)))
        mallory = tricky.replace(kafka_username="mallory", kafka_password="stolen", kafka_sasl_mechanism="PLAIN")
        with pytest.raises(KafkaRefused, match="refused the credentials"):
            kafka_admin.check_reachable(kafka_address.connection(mallory))
        broker.stop(tricky)
        with pytest.raises(ConfigError, match="control character"):
            broker.start(home.replace(kafka_password="first\nuser_mallory=stolen"))
    finally:
        broker.stop(tricky)
        broker.start(home)
