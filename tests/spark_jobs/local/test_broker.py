import os
import signal
import subprocess
import time

import pytest

from spark_jobs.config import load_settings
from spark_jobs.local import broker
from spark_jobs.runtime.kafka import address as kafka_address
from spark_jobs.runtime.processes import start_time
from tests.helpers import sigflow

pytestmark = pytest.mark.slow  # brokers of its own


def test_start_status_stop_manage_only_the_recorded_broker(tmp_path):
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "broker_port": 0})
    bystander = subprocess.Popen(["sleep", "60"])  # some other process must survive
    try:
        info = broker.start(s)
        assert broker.start(s) == info  # idempotent
        assert info.process_started == start_time(info.pid)  # recorded, so a reused pid is not taken for it
        assert kafka_address.status(s).bootstrap_servers == info.bootstrap_servers
        assert kafka_address.bootstrap_servers(s) == info.bootstrap_servers
        assert broker.stop(s) is True
        assert kafka_address.status(s) is None and broker.stop(s) is False
        assert bystander.poll() is None
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait()


def test_cli_broker_lifecycle(tmp_path):
    env = {"SIGFLOW_DATA_DIR": str(tmp_path), "SIGFLOW_BROKER_PORT": "0"}
    assert sigflow(None, "broker", "status", extra_env=env).returncode == 1
    started = sigflow(None, "broker", "start", extra_env=env)
    assert started.returncode == 0 and "broker running at 127.0.0.1:" in started.stdout
    assert sigflow(None, "broker", "status", extra_env=env).returncode == 0
    assert "broker stopped" in sigflow(None, "broker", "stop", extra_env=env).stdout
    assert not any(p for p in os.listdir(tmp_path / "broker") if p == "broker.json")


def test_end_offsets_count_every_record_and_a_consumer_group_resumes_where_it_committed(settings):
    from confluent_kafka import Consumer

    from spark_jobs.local.simulate import generate_events
    from spark_jobs.runtime.kafka import offsets as kafka_offsets
    from tests.helpers import produce

    sent = produce(settings, generate_events(1234, seed=8, malformed_ratio=0))
    topic = settings.streaming.events_topic
    bounds = kafka_offsets.offset_bounds(settings.kafka.bootstrap_servers, topic, range(settings.kafka.topic_partitions))
    assert sum(end - start for start, end in bounds.values()) == sent == 1234

    def group_consumer() -> Consumer:
        c = Consumer({"bootstrap.servers": settings.kafka.bootstrap_servers, "group.id": f"g-{topic}",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe([topic])
        return c

    first, seen = group_consumer(), []
    deadline = time.monotonic() + 60
    while len(seen) < 500 and time.monotonic() < deadline:
        seen += [m for m in first.consume(500 - len(seen), timeout=2) if not m.error()]
    assert len(seen) == 500
    first.commit(asynchronous=False)
    first.close()
    second, rest = group_consumer(), []
    deadline = time.monotonic() + 60  # a fresh member joins the group, then reads
    while len(seen) + len(rest) < sent and time.monotonic() < deadline:
        rest += [m for m in second.consume(1000, timeout=2) if not m.error()]
    second.close()
    positions = [(m.partition(), m.offset()) for m in seen + rest]
    assert len(rest) == sent - 500 and len(set(positions)) == sent  # resumed: nothing twice, nothing missed


@pytest.mark.parametrize("jvm_options, collector", [("", "G1"), ("-XX:+UseSerialGC", "Serial")])
def test_the_brokers_jvm_starts_with_one_collector_the_operators_when_jvm_options_names_one(tmp_path, jvm_options,
                                                                                            collector):
    """The JVM refuses two collectors ("Multiple garbage collectors selected"): a collector in
    jvm_options replaces the broker's G1 rather than joining it."""
    from spark_jobs.runtime.spark import ensure_java

    ensure_java()
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "jvm_options": jvm_options})
    s.broker_dir.mkdir(parents=True, exist_ok=True)
    (s.broker_dir / "log4j2.properties").write_text("rootLogger.level = error\n")
    command = broker.jvm_command(s, broker.STORAGE_TOOL, "random-uuid")
    ran = subprocess.run([command[0], "-Xlog:gc:stdout", *command[1:]], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr + ran.stdout
    assert f"Using {collector}" in ran.stdout
