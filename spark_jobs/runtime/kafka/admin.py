"""Kafka's administration outside Spark, with confluent-kafka's ``AdminClient``: whether a
broker answers (and, when one refuses us, why, in one line naming the setting to fix), which
topics and partitions exist, creating topics and adding partitions, and a topic's timestamp
type.

Why confluent-kafka: librdkafka reports why a connection failed (its error callback and its
log), which ``check_reachable`` turns into that one line, and its admin calls answer per topic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

import tenacity
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from spark_jobs.config import ENV_PREFIX
from spark_jobs.errors import BrokerUnavailable, KafkaRefused, SigflowError
from spark_jobs.runtime.kafka.connection import KafkaConnection, Target


class QuietLogger:
    """librdkafka logs connection refusals many times a second; we report once, clearly."""

    def log(self, *args, **kwargs):
        pass

    def debug(self, *args, **kwargs):
        pass

    info = warning = error = exception = critical = debug


quiet_logger = QuietLogger()


def admin(target: Target, **extra) -> AdminClient:
    return AdminClient({**KafkaConnection.of(target).confluent(), "logger": quiet_logger, **extra})


def is_reachable(target: Target, timeout_s: float = 5.0) -> bool:
    try:
        admin(target).list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    return True


@dataclass(frozen=True)
class Answer:
    """What a broker answered ``check_reachable``: the client it answered, for the caller's
    next questions (a new client connects anew), and its listing of the topics."""

    client: AdminClient
    listing: ClusterMetadata


def check_reachable(target: Target, timeout_s: float = 5.0) -> Answer:
    """Fail fast with one actionable line: no broker answers, or one refuses us (the
    credentials, the certificate, the protocol), naming the setting to fix."""
    conn = KafkaConnection.of(target)
    seen: list[KafkaError] = []
    heard = _Recorder()
    client = admin(conn, error_cb=seen.append, logger=heard)
    deadline = time.monotonic() + timeout_s
    # Short tries, so a refusal is reported as soon as librdkafka reports it (the error
    # callbacks are served between calls), not after the whole timeout.
    while time.monotonic() < deadline:
        try:
            return Answer(client, client.list_topics(timeout=min(0.5, max(0.05, deadline - time.monotonic()))))
        except KafkaException:
            client.poll(0)
        refusal = _refusal(conn, seen, heard.lines)
        if refusal:
            raise refusal
    raise BrokerUnavailable(
        f"Kafka at {conn} did not answer within {timeout_s:g}s",
        "start the embedded broker with `sigflow broker start`, "
        "or point KAFKA_BOOTSTRAP_SERVERS at a running cluster",
    )


class _Recorder(QuietLogger):
    """Keeps librdkafka's log lines: a listener that closes a connection of the wrong
    protocol shows up there only, not as an error."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level, fmt, *args, **kwargs):
        self.lines.append(fmt % args if args else str(fmt))


def _refusal(conn: KafkaConnection, errors: list[KafkaError], log_lines: list[str]) -> KafkaRefused | None:
    """librdkafka reports why a connection failed through its error callback and its log;
    the cases an operator fixes in the settings become one line."""
    # librdkafka 2.x: "Disconnected: connection closed by peer ... in state APIVERSION_QUERY"
    # (older: "Disconnected while requesting ApiVersion"): the first request met a listener
    # that does not speak this protocol (TLS, most often) and hung up.
    if any("Disconnected" in line and ("APIVERSION_QUERY" in line or "requesting ApiVersion" in line)
           for line in log_lines):
        return KafkaRefused(
            f"Kafka at {conn} hung up on a {conn.security_protocol} connection: the listener speaks another protocol",
            "check kafka_security_protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)",
        )
    for error in errors:
        text = error.str()
        if error.code() == KafkaError._AUTHENTICATION and "SSL" not in text.split(":")[0]:
            return KafkaRefused(
                f"Kafka at {conn} refused the credentials of user {conn.username!r} ({conn.sasl_mechanism}): "
                "check kafka_username and kafka_password",
                f"the password comes from {ENV_PREFIX}KAFKA_PASSWORD or the file kafka_password_file names; "
                "the mechanism from kafka_sasl_mechanism",
            )
        if error.code() == KafkaError._SSL or "SSL handshake failed" in text or "certificate" in text:
            return KafkaRefused(
                f"Kafka at {conn}: TLS handshake failed ({text.split(': ', 1)[-1][:160]})",
                "check kafka_ca_file (the PEM CA of the brokers' certificates) and kafka_security_protocol",
            )
    return None


class TopicMissing(SigflowError):
    """A topic the broker does not list; the hint fits one of sigflow's own topics, which
    `sigflow topics create` makes."""

    def __init__(self, topic: str, target: Target):
        super().__init__(f"Kafka topic {topic!r} does not exist at {target}",
                         "create it with `sigflow topics create` (or the sigflow_deploy DAG)")


def topic_partitions(target: Target, topic: str, timeout_s: float = 10.0,
                     listing: ClusterMetadata | None = None) -> list[int]:
    return topics_partitions(target, [topic], timeout_s, listing)[topic]


def topics_partitions(target: Target, topics: Iterable[str], timeout_s: float = 10.0,
                      listing: ClusterMetadata | None = None) -> dict[str, list[int]]:
    """Each topic's partitions, from one listing of the topics: ``listing`` when given (the
    one ``check_reachable`` got from ``target``), else asked for. A second listing through
    the same client took 55 ms here, where its first took 15 (docs/streaming-facts.md)."""
    # Listing all topics, not asking for these: a named metadata request makes brokers
    # with auto-creation (Tansu, default Apache Kafka) create the topic behind our back.
    metadata = listing or admin(target).list_topics(timeout=timeout_s)
    found = {}
    for topic in topics:
        meta = metadata.topics.get(topic)
        if not _listed(meta):
            raise TopicMissing(topic, target)
        found[topic] = sorted(meta.partitions)
    return found


# Which clock stamps a record: the broker's when it appends it (LogAppendTime), or the
# producer's (CreateTime, Kafka's default, which a broker accepts up to an hour ahead). The
# contract bounds event time by this stamp, so only the broker's clock keeps one producer's
# clock from moving every job's watermark (docs/semantics.md).
TIMESTAMP_TYPE = "message.timestamp.type"
BROKER_TIME = "LogAppendTime"


def timestamp_types(target: Target, topics: Iterable[str], timeout_s: float = 15.0,
                    client: AdminClient | None = None) -> dict[str, str]:
    """topic -> its ``message.timestamp.type`` (CreateTime or LogAppendTime), asked through
    ``client`` when given."""
    resources = [ConfigResource(ConfigResource.Type.TOPIC, topic) for topic in topics]
    found, client = {}, client or admin(target)  # held: the futures fail once the client is collected
    for resource, future in client.describe_configs(resources).items():
        try:
            found[resource.name] = future.result(timeout=timeout_s)[TIMESTAMP_TYPE].value
        except KafkaException as exc:
            raise SigflowError(f"could not read the configuration of topic {resource.name}: {exc}") from None
    return found


def use_broker_time(target: Target, topic: str) -> str:
    """Stamp the topic's records with the broker's clock from now on: what happened."""
    before = timestamp_types(target, [topic])[topic]
    if before == BROKER_TIME:
        return f"{topic}: timestamps from the broker's clock already ({BROKER_TIME})"
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(TIMESTAMP_TYPE, BROKER_TIME, incremental_operation=AlterConfigOpType.SET)])
    client = admin(target)
    try:
        client.incremental_alter_configs([resource])[resource].result(timeout=15)
    except KafkaException as exc:
        raise SigflowError(f"could not change the timestamps of topic {topic}: {exc}") from None
    return f"{topic}: timestamps {before} -> {BROKER_TIME} (the broker's clock, from the next record on)"


def create_topics(
    target: Target, topics: Iterable[str], partitions: int, retention_ms: int,
    replication_factor: int = 1, min_insync_replicas: int = 1,
) -> dict[str, str]:
    """Create missing topics, stamped with the broker's clock; existing ones are left alone,
    and one stamped by its producers is reported. Returns topic -> what happened."""
    client = admin(target)
    existing = client.list_topics(timeout=10).topics
    outcome: dict[str, str] = {}
    wanted, existing_names = [], []
    for topic in topics:
        if topic in existing:
            have = len(existing[topic].partitions)
            short = f"; configured {partitions}: Kafka never shrinks, add more with kafka-topics --alter" \
                if have < partitions else ""
            outcome[topic] = f"exists ({have} partitions{short})"
            existing_names.append(topic)
        else:
            wanted.append(
                NewTopic(topic, partitions, replication_factor, config={
                    "retention.ms": str(retention_ms), "min.insync.replicas": str(min_insync_replicas),
                    TIMESTAMP_TYPE: BROKER_TIME})
            )
    for topic, future in client.create_topics(wanted).items() if wanted else []:
        try:
            future.result(timeout=15)
            outcome[topic] = f"created ({partitions} partitions)"
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                outcome[topic] = "exists"
            else:
                raise SigflowError(f"could not create topic {topic}: {exc}") from None
    _await_listed(client, [t.topic for t in wanted])
    for topic, kind in (timestamp_types(target, existing_names) if existing_names else {}).items():
        if kind != BROKER_TIME:
            outcome[topic] += (f"; WARNING: timestamps from the producer's clock ({kind}), which bounds event "
                               f"time: switch to the broker's with `sigflow topics use-broker-time`")
    return outcome


def add_partitions(target: Target, topic: str, total: int) -> str:
    """Grow a topic to ``total`` partitions (Kafka never shrinks one): what happened.

    Running jobs pick the new partitions up at their next batch, from their earliest offset.
    Keyed records of a device may land in another partition from now on, so a device's
    records are in order per partition only (docs/runbooks/topic-scale-up.md)."""
    client = admin(target)
    have = len(topic_partitions(target, topic))
    if have >= total:
        return f"{topic} has {have} partitions already; Kafka cannot shrink a topic"
    try:
        client.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=15)
    except KafkaException as exc:
        raise SigflowError(f"could not add partitions to {topic}: {exc}") from None
    _await_listed(client, [topic])
    waiting = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda n: n < total), wait=tenacity.wait_fixed(0.2),
        stop=tenacity.stop_after_delay(60), retry_error_callback=lambda state: state.outcome.result(),
    )
    listed = waiting(lambda: len(topic_partitions(target, topic)))
    if listed < total:
        raise SigflowError(f"Kafka accepted {total} partitions for {topic} but lists {listed} after 60 s",
                           "check the broker's log (`sigflow broker status`) and run the command again")
    return f"{topic}: {have} -> {total} partitions"


def _listed(meta) -> bool:
    """A topic's metadata says it exists with partitions."""
    return meta is not None and meta.error is None and bool(meta.partitions)


def _await_listed(client: AdminClient, topics: list[str], timeout_s: float = 60.0) -> None:
    """Return once every topic is listed with partitions, each with a leader.

    CreateTopics answers when the controller has the topic; the broker that serves metadata
    may list it later. CI saw a producer, called right after creation on a loaded machine,
    told the topic did not exist.
    """
    if not topics:
        return

    def unlisted() -> list[str]:
        listed = client.list_topics(timeout=10).topics
        return [t for t in topics if not _listed(listed.get(t))
                or any(p.leader < 0 for p in listed[t].partitions.values())]

    waiting = tenacity.Retrying(
        retry=tenacity.retry_if_result(bool), wait=tenacity.wait_fixed(0.2),
        stop=tenacity.stop_after_delay(timeout_s), retry_error_callback=lambda state: state.outcome.result(),
    )
    missing = waiting(unlisted)
    if missing:
        raise SigflowError(
            f"Kafka accepted topic(s) {', '.join(missing)} but did not list them within {timeout_s:.0f} s",
            "check the broker's log (`sigflow broker status`) and run the command again",
        )


