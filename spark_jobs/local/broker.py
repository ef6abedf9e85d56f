"""The embedded broker: Apache Kafka in KRaft mode (one combined broker and controller).

It runs from the pinned Maven JARs (``infra/jars/lock.txt``, set ``kafka-broker``) in a JVM
of its own, with its storage, configuration and log under ``<data_dir>/broker/``. Storage
is formatted on the first start and kept: a stopped broker keeps its topics and records, and
a restart comes back on the same ports, so clients and checkpoints find it where they left it.

The broker's address and pid are recorded in ``<data_dir>/broker/broker.json``; ``stop``
only ever signals the process recorded there, and only while it still is this broker.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import secrets
import signal
import socket
import subprocess
import uuid
from pathlib import Path

from pydantic import SecretStr

from spark_jobs.config import Settings
from spark_jobs.config.groups import GC_OPTIONS
from spark_jobs.errors import BrokerUnavailable, ConfigError, SigflowError
from spark_jobs.local import broker_tls
from spark_jobs.local.recorded import reap, terminate
from spark_jobs.runtime import classpath
from spark_jobs.runtime.kafka.address import (
    MAIN_CLASS,
    BrokerInfo,
    connection,
    embedded_ca,
    state_file,
    status,
)
from spark_jobs.runtime.kafka.connection import KafkaConnection
from spark_jobs.runtime.private_files import write_private
from spark_jobs.runtime.processes import start_time
from spark_jobs.runtime.waiting import wait_until

log = logging.getLogger("sigflow.broker")
STORAGE_TOOL = "kafka.tools.StorageTool"


def _config_file(settings: Settings) -> Path:
    return settings.broker_dir / "server.properties"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _ports(settings: Settings) -> tuple[int, int]:
    """(client port, controller port), chosen on the first start and kept in ports.json."""
    path = settings.broker_dir / "ports.json"
    if path.exists():
        saved = json.loads(path.read_text())
        if not settings.local.broker_port or settings.local.broker_port == saved["client"]:
            return saved["client"], saved["controller"]
    ports = (settings.local.broker_port or free_port(), free_port())
    path.write_text(json.dumps({"client": ports[0], "controller": ports[1]}))
    return ports


# The broker's own SASL user: it authenticates between brokers and creates the clients'
# SCRAM users at start. Defined in the broker's configuration (PLAIN), so it exists before
# any metadata does; its password is generated and kept under broker/tls/.
BROKER_USER = "sigflow_broker"


def _broker_password(settings: Settings) -> str:
    path = settings.broker_dir / "tls" / "broker-user.pass"
    if not path.exists():
        broker_tls.ensure(path.parent)
        write_private(path, secrets.token_urlsafe(24).encode())
    return path.read_text()


def _jaas(module: str, **options: str) -> str:
    """A JAAS line whose option values are quoted and escaped (Kafka's JAAS parser takes
    backslash escapes in quoted strings): a quote in a password cannot end it and add a
    user. Names are sigflow's or a checked username, never quoted."""
    for name, value in options.items():
        if not re.fullmatch(r"[A-Za-z0-9_.@-]+", name):
            raise ConfigError(f"the broker cannot take the user name in {name!r}",
                              "kafka_username: letters, digits and _ . @ - only")
        if any(ord(char) < 32 or ord(char) == 127 for char in value):
            raise ConfigError(f"a Kafka password of the embedded broker ({name}) has a control character "
                              "(a newline?), which the broker's configuration cannot hold",
                              "set kafka_password (or the file kafka_password_file names) without one")
    quoted = " ".join(f'{k}="{_jaas_escaped(v)}"' for k, v in options.items())
    return f"org.apache.kafka.common.security.{module} required {quoted};"


def _jaas_escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _security_properties(settings: Settings) -> dict[str, str]:
    """The client listener's security, as kafka_security_protocol asks: TLS from the
    generated CA, SASL with PLAIN and SCRAM (the client user's SCRAM credentials are
    created at start, see _create_client_user)."""
    protocol = settings.kafka.security_protocol
    listener = protocol.lower()
    props: dict[str, str] = {}
    if protocol in ("SSL", "SASL_SSL"):
        tls = broker_tls.ensure(settings.broker_dir / "tls")
        props.update({
            "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(tls.keystore),
            "ssl.keystore.password": tls.keystore_password, "ssl.key.password": tls.keystore_password,
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls.ca_file),
        })
    if protocol.startswith("SASL_"):
        own = _broker_password(settings)
        plain_users = {f"user_{BROKER_USER}": own,
                       f"user_{settings.kafka.username}": settings.kafka.secret.get_secret_value()}
        props.update({
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            f"listener.name.{listener}.plain.sasl.jaas.config": _jaas(
                "plain.PlainLoginModule", username=BROKER_USER, password=own, **plain_users),
            f"listener.name.{listener}.scram-sha-256.sasl.jaas.config": _jaas("scram.ScramLoginModule"),
            f"listener.name.{listener}.scram-sha-512.sasl.jaas.config": _jaas("scram.ScramLoginModule"),
        })
    return props


def server_properties(settings: Settings, client_port: int, controller_port: int) -> str:
    data = settings.broker_dir / "data"
    protocol = settings.kafka.security_protocol
    lines = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        # The controller listener stays PLAINTEXT: loopback only, and only this JVM uses it.
        "listeners": f"{protocol}://127.0.0.1:{client_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"{protocol}://127.0.0.1:{client_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": protocol,
        "listener.security.protocol.map": f"{protocol}:{protocol},CONTROLLER:PLAINTEXT",
        **_security_properties(settings),
        "log.dirs": str(data),
        # As in production (docker-compose.yml): topics come from `sigflow topics create`.
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "log.retention.check.interval.ms": "5000",
    }
    # java.util.Properties reads a backslash as an escape: each one written doubled
    return "".join(f"{k}={v.replace(chr(92), chr(92) * 2)}\n" for k, v in lines.items())


LOG4J2 = """\
status = error
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log}
appender.file.filePattern = {log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 10MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""


def java_binary() -> str:
    from spark_jobs.runtime.spark import ensure_java

    ensure_java()
    return str(Path(os.environ["JAVA_HOME"], "bin", "java"))


def jvm_command(settings: Settings, main: str, *args: str, jar_sets: tuple[str, ...] = ("kafka-broker",)) -> list[str]:
    """A JVM running ``main`` from the pinned Kafka JARs: the broker, its storage tool, or
    with the kafka-tools set one of Kafka's own tools (ConsumerPerformance)."""
    jvm_classpath = ":".join(str(p) for p in classpath.verified_paths(jar_sets, settings.jars_path))
    return [
        java_binary(), f"-Xmx{settings.local.broker_heap}", f"-Xms{settings.local.broker_heap}",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={settings.broker_dir / 'log4j2.properties'}",
        # G1, as Kafka's own scripts start a broker, unless jvm_options names a collector
        *settings.spark.java_options_with(GC_OPTIONS["g1"]).split(), "-cp", jvm_classpath, main, *args,
    ]


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64, as `random-uuid` prints; like
    Kafka's own, never one starting with '-', which the tool would read as an option."""
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):
            return candidate


def _format_storage(settings: Settings) -> None:
    if (settings.broker_dir / "data" / "meta.properties").exists():
        return
    result = subprocess.run(
        jvm_command(settings, STORAGE_TOOL, "format", "-t", _cluster_id(), "-c", str(_config_file(settings))),
        capture_output=True, text=True, timeout=120,
    )
    if result.returncode != 0:
        printed = (result.stderr or result.stdout).strip().splitlines() or [f"exit status {result.returncode}"]
        # the exception's own line says why; the stack under it only where
        cause = next((line for line in printed if not line.lstrip().startswith("at ")), printed[-1])
        log.debug("kafka-storage format printed:\n%s", "\n".join(printed))
        raise BrokerUnavailable(
            f"formatting the embedded broker's storage failed: {cause.strip()[:300]}",
            f"remove {settings.broker_dir} to start afresh, or see {settings.broker_dir}/kafka.log",
        )


def start(settings: Settings, timeout_s: float = 60.0) -> BrokerInfo:
    """Start the embedded broker (idempotent: a live recorded broker is returned as is)."""
    from spark_jobs.runtime.kafka import admin as kafka_admin
    running = status(settings)
    if running:
        return running
    settings.broker_dir.mkdir(parents=True, exist_ok=True)
    client_port, controller_port = _ports(settings)
    for port in (client_port, controller_port):
        if port_open("127.0.0.1", port):
            raise BrokerUnavailable(
                f"port {port} on 127.0.0.1 is already taken by another process",
                f"set SIGFLOW_BROKER_PORT to a free port, or 0 to pick one (and remove "
                f"{settings.broker_dir / 'ports.json'})",
            )
    log_file = settings.broker_dir / "kafka.log"
    # It may hold the keystore's and users' passwords: the owner's only.
    write_private(_config_file(settings), server_properties(settings, client_port, controller_port).encode())
    (settings.broker_dir / "log4j2.properties").write_text(
        LOG4J2.format(log=log_file, level=settings.local.broker_log_level)
    )
    _format_storage(settings)
    address = f"127.0.0.1:{client_port}"
    with open(settings.broker_dir / "kafka.out", "ab") as out:
        proc = subprocess.Popen(
            jvm_command(settings, MAIN_CLASS, str(_config_file(settings))),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # survives the CLI that started it; stopped by pid
        )
    own = _own_connection(settings, address)
    if not wait_until(lambda: port_open("127.0.0.1", client_port) and kafka_admin.is_reachable(own, 2),
                      timeout_s=timeout_s, every_s=0.2, give_up=lambda: proc.poll() is not None):
        proc.kill()
        raise BrokerUnavailable(
            f"embedded Kafka did not start on {address} within {timeout_s:g}s",
            f"see {log_file} and {settings.broker_dir / 'kafka.out'}",
        )
    if settings.kafka.security_protocol.startswith("SASL_"):
        _create_client_user(settings, own)
    info = BrokerInfo(pid=proc.pid, bootstrap_servers=address, log_file=str(log_file),
                      security_protocol=own.security_protocol, ca_file=own.ca_file,
                      process_started=start_time(proc.pid))
    state_file(settings).write_text(json.dumps(info.__dict__))
    return info


def _own_connection(settings: Settings, address: str) -> KafkaConnection:
    """How the project reaches its own broker: as the broker user when SASL is on."""
    protocol = settings.kafka.security_protocol
    ca = embedded_ca(settings)
    if not protocol.startswith("SASL_"):
        return KafkaConnection(address, protocol, ca_file=ca)
    return KafkaConnection(address, protocol, "PLAIN", BROKER_USER, SecretStr(_broker_password(settings)), ca)


def _create_client_user(settings: Settings, own: KafkaConnection, timeout_s: float = 30.0) -> None:
    """Set the client user's SCRAM credentials (both hashes) to the configured password on
    every start, so a changed password takes effect with a restart; PLAIN reads it from the
    broker's configuration."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    from spark_jobs.runtime.kafka import admin as kafka_admin
    password = settings.kafka.secret.get_secret_value().encode()
    admin = kafka_admin.admin(own)  # kept referenced: a collected client fails its futures
    # One request per mechanism: Kafka refuses two changes to one user in a request.
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        upsert = UserScramCredentialUpsertion(settings.kafka.username, ScramCredentialInfo(mechanism, 8192), password)
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=timeout_s)
    client = connection(settings.replace(kafka_bootstrap_servers=own.bootstrap_servers,
                                         kafka_ca_file=settings.kafka.ca_file or own.ca_file))
    # the credential reaches the broker through the metadata log, shortly after
    wait_until(lambda: kafka_admin.check_reachable(client, timeout_s=3) or True, timeout_s=timeout_s, every_s=0,
               not_yet=(BrokerUnavailable,), reraise=True)


def stop(settings: Settings, timeout_s: float = 30.0) -> bool:
    """Stop the recorded broker (SIGTERM: a controlled shutdown). False when none was running."""
    path = state_file(settings)
    info = status(settings)
    if info is None:
        path.unlink(missing_ok=True)
        return False
    terminate(info.pid, lambda: info.alive, timeout_s)
    path.unlink(missing_ok=True)
    return True


def kill(settings: Settings) -> int:
    """SIGKILL the recorded broker, as a crash would (fault tests). Returns its pid."""
    info = status(settings)
    if info is None:
        raise SigflowError("no embedded broker is running")
    os.kill(info.pid, signal.SIGKILL)
    if not wait_until(lambda: not info.alive, timeout_s=30, every_s=0.05):
        raise SigflowError(f"the broker (pid {info.pid}) outlived SIGKILL for 30 s", "check the host: a process in D state")
    reap(info.pid)
    return info.pid
