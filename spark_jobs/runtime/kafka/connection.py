"""How to reach Kafka: the bootstrap servers and the security to speak there, built once from
the settings and rendered for each client library sigflow uses.

Every Kafka client in the project (Spark's Kafka source, the Python source, the admin and
offset helpers on confluent-kafka, the kafka-python producers) takes one of these, so a
SASL_SSL cluster is configured in one place (docs/security.md). The password is a pydantic
``SecretStr``: it prints as ``**********`` and leaves this object only inside a client
configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from pydantic import SecretStr

# librdkafka (2.16) drops its bootstrap connection once the first answer names the cluster's
# brokers, failing the question in flight there, and holds the next connection back for half
# of reconnect.backoff.ms: at its default of 100 ms a new client's first question took 55 ms
# here, at 20 ms 15 ms (docs/streaming-facts.md). A broker that stays down is still retried
# with exponential backoff, up to reconnect.backoff.max.ms.
RECONNECT_BACKOFF_MS = 20

# The Java client names a JAAS login module per SASL mechanism.
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


@dataclass(frozen=True)
class KafkaConnection:
    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "SCRAM-SHA-512"
    username: str = ""
    password: SecretStr = field(default_factory=lambda: SecretStr(""), repr=False)
    ca_file: str = ""

    def __str__(self) -> str:  # messages name the servers, never the credentials
        return self.bootstrap_servers

    @classmethod
    def of(cls, target: "KafkaConnection | str") -> "KafkaConnection":
        """A plain bootstrap string means PLAINTEXT (tests, the bench, an open broker)."""
        return target if isinstance(target, KafkaConnection) else cls(target)

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def describe(self) -> str:
        """One line for people: where, how, as whom (no secret)."""
        who = f", {self.sasl_mechanism} as {self.username}" if self.uses_sasl else ""
        return f"{self.bootstrap_servers} ({self.security_protocol}{who})"

    # ---- one rendering per client library -------------------------------------------
    def confluent(self) -> dict[str, Any]:
        """librdkafka's configuration (confluent-kafka admin and consumers)."""
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers,
                                  "security.protocol": self.security_protocol,
                                  "reconnect.backoff.ms": RECONNECT_BACKOFF_MS}
        if self.uses_sasl:
            config.update({"sasl.mechanisms": self.sasl_mechanism, "sasl.username": self.username,
                           "sasl.password": self.password.get_secret_value()})
        if self.uses_tls and self.ca_file:
            config["ssl.ca.location"] = self.ca_file
        return config

    def kafka_python(self) -> dict[str, Any]:
        """kafka-python's keyword arguments (the producers of simulate and produce)."""
        config: dict[str, Any] = {"bootstrap_servers": self.bootstrap_servers,
                                  "security_protocol": self.security_protocol}
        if self.uses_sasl:
            config.update({"sasl_mechanism": self.sasl_mechanism, "sasl_plain_username": self.username,
                           "sasl_plain_password": self.password.get_secret_value()})
        if self.uses_tls and self.ca_file:
            config["ssl_cafile"] = self.ca_file
        return config

    def spark_options(self) -> dict[str, str]:
        """The Java client's properties, "kafka."-prefixed as Spark's Kafka source takes them.
        Spark redacts sasl.jaas.config where it logs Kafka parameters."""
        options = {"kafka.bootstrap.servers": self.bootstrap_servers,
                   "kafka.security.protocol": self.security_protocol}
        if self.uses_sasl:
            options["kafka.sasl.mechanism"] = self.sasl_mechanism
            options["kafka.sasl.jaas.config"] = (
                f'{_LOGIN_MODULES[self.sasl_mechanism]} required '
                f'username="{_jaas_quote(self.username)}" '
                f'password="{_jaas_quote(self.password.get_secret_value())}";'
            )
        if self.uses_tls and self.ca_file:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = self.ca_file
        return options

    @classmethod
    def from_spark_options(cls, options: Mapping[str, str]) -> "KafkaConnection":
        """The inverse of ``spark_options``, for the Python source (its options arrive as
        Spark hands them to a data source, keys in any case)."""
        lower = {k.lower(): v for k, v in options.items()}
        protocol = lower.get("kafka.security.protocol", "PLAINTEXT")
        username = password = ""
        jaas = lower.get("kafka.sasl.jaas.config", "")
        if jaas:
            username, password = _jaas_field(jaas, "username"), _jaas_field(jaas, "password")
        return cls(
            bootstrap_servers=lower["kafka.bootstrap.servers"], security_protocol=protocol,
            sasl_mechanism=lower.get("kafka.sasl.mechanism", "SCRAM-SHA-512"), username=username,
            password=SecretStr(password), ca_file=lower.get("kafka.ssl.truststore.location", ""),
        )


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _jaas_field(jaas: str, name: str) -> str:
    marker = f'{name}="'
    start = jaas.index(marker) + len(marker)
    out, i = [], start
    while jaas[i] != '"':
        if jaas[i] == "\\":
            i += 1
        out.append(jaas[i])
        i += 1
    return "".join(out)


# Where Kafka is and how to speak to it; a bare bootstrap string means PLAINTEXT.
Target = KafkaConnection | str
