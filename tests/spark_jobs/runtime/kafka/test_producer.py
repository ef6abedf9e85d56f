"""A paced send (`sigflow simulate`'s fleet) whose Kafka goes away while it runs."""

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


@pytest.mark.timeout(300)
def test_records_a_paced_send_could_not_deliver_are_its_error_not_left_out_of_its_count(
        tmp_path, monkeypatch, caplog, capfd):
    """The broker stops while a fleet sends. The send ended as a success that counted only
    what Kafka acknowledged, saying nothing of the records still waiting in the producer,
    after a console of librdkafka's own lines (a refused connection several times a second).
    Now the records not delivered are the run's error, with how many were; the outage is said
    once."""
    broker_settings = make_settings(tmp_path / "broker", "", broker_port=0)
    info = embedded.start(broker_settings, timeout_s=BROKER_START_S)
    try:
        kafka_admin.create_topics(info.bootstrap_servers, ["paced"], 3, 3_600_000)
        monkeypatch.setattr(producer, "FLUSH_S", 3)  # the wait for deliveries at the end, shortened
        handed_over = 0

        def records():
            nonlocal handed_over
            while True:
                handed_over += 1
                yield "paced", None, b"{}"

        threading.Timer(2.0, embedded.stop, args=(broker_settings,)).start()
        with caplog.at_level(logging.WARNING, logger="sigflow.kafka"), pytest.raises(SigflowError) as failed:
            producer.send_paced(info.bootstrap_servers, records(), 100, "paced", duration_s=8)
        counts = re.fullmatch(r"([\d,]+) records were not delivered to Kafka at .*; ([\d,]+) to paced delivered in \d+ s",
                              failed.value.message)
        assert counts, failed.value.message
        undelivered, delivered = (int(n.replace(",", "")) for n in counts.groups())
        assert 0 < delivered and 0 < undelivered and delivered + undelivered == handed_over
        said = [r for r in caplog.records if "does not answer" in r.getMessage()]
        assert len(said) == 1, [r.getMessage() for r in caplog.records]
        assert "rdkafka" not in capfd.readouterr().err

        embedded.start(broker_settings, timeout_s=BROKER_START_S)
        assert records_in(info.bootstrap_servers, "paced") == delivered
    finally:
        embedded.stop(broker_settings)
