"""Sending to Kafka from `sigflow produce` and `sigflow simulate`'s fleet when Kafka goes away
while they send: what was not delivered is the run's error, counted, in one line."""

from __future__ import annotations

import logging
import re
import threading

import pytest

from spark_jobs.errors import SigflowError
from spark_jobs.local import broker as embedded
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.kafka import producer
from tests.conftest import make_settings
from tests.helpers import records_in

BROKER_START_S = 180


@pytest.fixture
def lost_broker(tmp_path, monkeypatch):
    """A broker of the test's own with a topic ``sent``, stopped 2 s after ``stop_soon()``; the
    wait for deliveries at the end shortened to 3 s. Started again after the test, to count."""
    broker_settings = make_settings(tmp_path / "broker", "", broker_port=0)
    info = embedded.start(broker_settings, timeout_s=BROKER_START_S)
    kafka_admin.create_topics(info.bootstrap_servers, ["sent"], 3, 3_600_000)
    monkeypatch.setattr(producer, "FLUSH_S", 3)
    stopped = threading.Timer(2.0, embedded.stop, args=(broker_settings,))
    try:
        yield info.bootstrap_servers, stopped.start, lambda: embedded.start(broker_settings, timeout_s=BROKER_START_S)
    finally:
        stopped.cancel()
        embedded.stop(broker_settings)


def _counts(message: str, pattern: str) -> tuple[int, int]:
    found = re.fullmatch(pattern, message)
    assert found, message
    return tuple(int(n.replace(",", "")) for n in found.groups())


@pytest.mark.timeout(300)
def test_records_a_fleet_could_not_deliver_are_its_error_not_left_out_of_its_count(lost_broker, caplog, capfd):
    """The fleet's send ended as a success that counted only what Kafka acknowledged, saying
    nothing of the records still waiting in the producer, after a console of librdkafka's own
    lines (a refused connection several times a second). The outage is said once."""
    servers, stop_soon, start_again = lost_broker
    made = 0

    def records():
        nonlocal made
        while True:
            made += 1
            yield "sent", None, b"{}"

    stop_soon()
    with caplog.at_level(logging.WARNING, logger="sigflow.kafka"), pytest.raises(SigflowError) as failed:
        producer.send_paced(servers, records(), 100, "sent", duration_s=8)
    undelivered, delivered = _counts(
        failed.value.message, r"([\d,]+) records were not delivered to Kafka at .*; ([\d,]+) to sent delivered in \d+ s")
    assert 0 < delivered and 0 < undelivered and delivered + undelivered == made
    assert len([r for r in caplog.records if "does not answer" in r.getMessage()]) == 1, caplog.records
    assert "rdkafka" not in capfd.readouterr().err

    start_again()
    assert delivered <= records_in(servers, "sent") <= delivered + undelivered


@pytest.mark.timeout(300)
def test_records_produce_could_not_deliver_are_its_error_and_it_ends(lost_broker):
    """`sigflow produce` waited for ever on a broker gone mid-file, even after Ctrl-C: its
    client (kafka-python 3.0) never fails a record whose partition leader it lost, and its
    close raised rather than gave up. It ends once Kafka has not answered for a while, saying
    how many of the file's records were not delivered."""
    servers, stop_soon, start_again = lost_broker
    stop_soon()
    with pytest.raises(SigflowError) as failed:
        producer.produce_records(servers, "sent", ((None, b"{}") for _ in range(2000)), rate_per_s=250)
    undelivered, total, delivered = _counts(
        failed.value.message, r"([\d,]+) of ([\d,]+) records were not delivered to sent at Kafka .*; ([\d,]+) delivered")
    assert total == 2000 and 0 < delivered and delivered + undelivered == total

    start_again()
    assert delivered <= records_in(servers, "sent") <= total
