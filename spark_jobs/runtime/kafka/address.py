"""Where Kafka is: the configured cluster, else the embedded broker recorded under
``<data_dir>/broker/broker.json`` by ``spark_jobs.local.broker``, and how to speak to it.
Here, below the local layer, so a job run finds its broker without reaching up into it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.config import Settings
from spark_jobs.errors import BrokerUnavailable
from spark_jobs.runtime.kafka.connection import KafkaConnection
from spark_jobs.runtime.processes import is_recorded_process

MAIN_CLASS = "kafka.Kafka"  # the embedded broker's JVM main class


@dataclass(frozen=True)
class BrokerInfo:
    pid: int
    bootstrap_servers: str
    log_file: str
    security_protocol: str = "PLAINTEXT"
    ca_file: str = ""  # the CA clients trust, when the listener speaks TLS
    process_started: float | None = None  # so a reused pid is not taken for the broker

    @property
    def alive(self) -> bool:
        return is_recorded_process(self.pid, self.process_started, MAIN_CLASS)


def state_file(settings: Settings) -> Path:
    return settings.broker_dir / "broker.json"


def status(settings: Settings) -> BrokerInfo | None:
    """The broker recorded under data_dir if its process is alive, else None."""
    path = state_file(settings)
    if not path.exists():
        return None
    info = BrokerInfo(**json.loads(path.read_text()))
    return info if info.alive else None


def embedded_ca(settings: Settings) -> str:
    """The embedded broker's CA file when its listener speaks TLS (made by broker_tls)."""
    return str(settings.broker_dir / "tls" / "ca.pem") if settings.kafka.security_protocol in ("SSL", "SASL_SSL") else ""


def connection(settings: Settings) -> KafkaConnection:
    """The Kafka to use and how to speak to it (docs/security.md)."""
    ca = settings.kafka.ca_file or ("" if settings.kafka.bootstrap_servers else embedded_ca(settings))
    return KafkaConnection(
        bootstrap_servers(settings), settings.kafka.security_protocol, settings.kafka.sasl_mechanism,
        settings.kafka.username, settings.kafka.secret, ca,
    )


def bootstrap_servers(settings: Settings) -> str:
    """The Kafka to use: the configured cluster, else the embedded broker, else a clear error."""
    if settings.kafka.bootstrap_servers:
        return settings.kafka.bootstrap_servers
    info = status(settings)
    if info is None:
        raise BrokerUnavailable(
            "no Kafka configured and the embedded broker is not running",
            "start it with `sigflow broker start`, or set KAFKA_BOOTSTRAP_SERVERS",
        )
    return info.bootstrap_servers
