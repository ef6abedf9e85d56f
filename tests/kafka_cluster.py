"""A three-broker Apache Kafka cluster in KRaft mode on loopback ports, for failover tests.

Each node is broker and controller (three voters, so the quorum survives one lost node),
runs from the same pinned JARs as the embedded broker, and keeps its storage under its own
directory, so a killed node restarts with its log and catches up as a follower.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from spark_jobs.config import Settings, load_settings
from spark_jobs.local import broker
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.waiting import wait_until
from tests.helpers import QUICK_JIT


@dataclass
class Node:
    node_id: int
    settings: Settings  # data_dir is this node's directory; the broker's JVM options
    port: int
    controller_port: int
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class KafkaCluster:
    nodes: list[Node]
    cluster_id: str

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    def properties(self, node: Node) -> str:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        lines = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.settings.broker_dir / "data"),
            "auto.create.topics.enable": "false",
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "unclean.leader.election.enable": "false",
            "offsets.topic.replication.factor": "3",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "group.initial.rebalance.delay.ms": "0",
        }
        return "".join(f"{k}={v}\n" for k, v in lines.items())

    def launch(self, node: Node) -> None:
        config = node.settings.broker_dir / "server.properties"
        if node.process is None:  # first start: configure and format
            node.settings.broker_dir.mkdir(parents=True, exist_ok=True)
            config.write_text(self.properties(node))
            (node.settings.broker_dir / "log4j2.properties").write_text(
                broker.LOG4J2.format(log=node.settings.broker_dir / "kafka.log", level="INFO"))
            subprocess.run(broker.jvm_command(node.settings, broker.STORAGE_TOOL, "format", "-t", self.cluster_id,
                                       "-c", str(config)), check=True, capture_output=True, timeout=120)
        out = open(node.settings.broker_dir / "kafka.out", "ab")
        node.process = subprocess.Popen(broker.jvm_command(node.settings, broker.MAIN_CLASS, str(config)),
                                        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def kill(self, node_id: int) -> None:
        """SIGKILL, as a crashed host would."""
        node = self.node(node_id)
        node.process.kill()
        node.process.wait()

    def restart(self, node_id: int) -> None:
        self.launch(self.node(node_id))

    def stop(self) -> None:
        for node in self.nodes:
            if node.process and node.process.poll() is None:
                node.process.terminate()
        for node in self.nodes:
            if node.process:
                try:
                    node.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    node.process.kill()

    def leader(self, topic: str, partition: int) -> int:
        return kafka_admin.admin(self.bootstrap_servers).list_topics(topic, timeout=10).topics[topic] \
            .partitions[partition].leader

    def in_sync(self, topic: str) -> dict[int, list[int]]:
        """partition -> its in-sync replicas."""
        meta = kafka_admin.admin(self.bootstrap_servers).list_topics(timeout=10).topics[topic]
        return {p: sorted(m.isrs) for p, m in meta.partitions.items()}


def start(base: Path, nodes: int = 3, heap: str = "384m", timeout_s: float = 120) -> KafkaCluster:
    members = [
        Node(i, load_settings(env={}, overrides={"data_dir": str(base / f"node-{i}"), "broker_heap": heap,
                                                **QUICK_JIT}),
             broker.free_port(), broker.free_port())
        for i in range(1, nodes + 1)
    ]
    cluster = KafkaCluster(members, broker._cluster_id())
    for node in members:
        cluster.launch(node)
    def formed() -> bool:  # every node answers, and the cluster's metadata lists them all
        registered = kafka_admin.admin(cluster.bootstrap_servers).list_topics(timeout=5).brokers
        return len(registered) == nodes and all(kafka_admin.is_reachable(n.address, 2) for n in members)

    if not wait_until(formed, timeout_s=timeout_s, every_s=0.5, not_yet=(Exception,),
                      give_up=lambda: any(n.process.poll() is not None for n in members)):
        cluster.stop()
        raise RuntimeError(f"the {nodes}-node Kafka cluster did not form; see {base}/node-*/broker/kafka.log")
    return cluster
