"""A partition leader is lost while devices produce and a job streams: nothing is lost and
nothing is written twice. Three brokers (replication factor 3, min.insync.replicas 2),
producers with acks=all and idempotence, `sigflow run ingest` on a processing-time trigger."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from tests import kafka_cluster
from tests.conftest import make_settings
from tests.helpers import (
    REPO,
    cli_env,
    records_in,
    sigflow,
    table,
    topic_records,
    wait_for,
)

pytestmark = pytest.mark.slow  # a three-broker cluster

RATE, SECONDS, SEED = 90, 16, 21  # long enough to kill a leader with records still to come


def _wait(condition, timeout_s: float, what: str, *watched: subprocess.Popen) -> None:
    wait_for(condition, timeout_s=timeout_s, what=what, watched=watched)


@pytest.mark.timeout(600)  # 120 s in a clean-clone make test
def test_a_partition_leader_killed_mid_stream_loses_and_duplicates_nothing_and_rejoins(tmp_path):
    cluster = kafka_cluster.start(tmp_path / "kafka")
    try:
        s = make_settings(tmp_path / "data", cluster.bootstrap_servers, topic_partitions=3,
                          topic_replication_factor=3, topic_min_insync_replicas=2, max_offsets_per_trigger=400)
        env = {"SIGFLOW_TOPIC_PARTITIONS": "3", "SIGFLOW_TOPIC_REPLICATION_FACTOR": "3",
               "SIGFLOW_TOPIC_MIN_INSYNC_REPLICAS": "2"}
        created = sigflow(s, "topics", "create", extra_env=env)
        assert created.returncode == 0, created.stderr
        assert all(len(isr) == 3 for isr in cluster.in_sync(s.streaming.events_topic).values())

        def start(*args: str) -> subprocess.Popen:
            return subprocess.Popen([sys.executable, "-m", "spark_jobs.cli", *args], env=cli_env(s, env), cwd=REPO,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        producer = start("simulate", "--rate", str(RATE), "--duration", str(SECONDS), "--seed", str(SEED),
                         "--malformed", "0")
        job = start("run", "ingest", "--processing-time", "2 seconds")
        _wait(lambda: records_in(cluster.bootstrap_servers, s.streaming.events_topic) >= RATE * SECONDS // 3, 120, "a third of the records",
              producer, job)

        victim = cluster.leader(s.streaming.events_topic, 0)
        cluster.kill(victim)  # SIGKILL, mid-stream
        killed = time.monotonic()
        _wait(lambda: cluster.leader(s.streaming.events_topic, 0) not in (victim, -1), 60, "a new leader", producer, job)
        print(f"broker {victim} killed; partition 0 led by broker {cluster.leader(s.streaming.events_topic, 0)} "
              f"after {time.monotonic() - killed:.1f} s")

        produced, _ = producer.communicate(timeout=300)
        assert producer.returncode == 0, produced
        sent = int(re.search(r"produced ([\d,]+) records to", produced)[1].replace(",", ""))
        expected = [value for _, value in topic_records(cluster.bootstrap_servers, s.streaming.events_topic)]
        assert len(expected) == sent == RATE * SECONDS  # the producer wrote each record once

        def raw_events():
            raw = table(s, "device_events_raw")
            return raw[raw.topic == s.streaming.events_topic] if len(raw.columns) else raw  # no table yet: no columns

        _wait(lambda: len(raw_events()) >= len(expected), 300, "the job to catch up", job)
        job.send_signal(signal.SIGTERM)  # a graceful stop after the batch
        job.communicate(timeout=120)
        batches = s.progress_file("ingest").read_text().splitlines()
        print(f"ingest: {len(batches)} batches, producer: {produced.strip().splitlines()[-2]}")

        written = Counter(json.loads(v)["event_id"] for v in raw_events().value)
        assert written == Counter(json.loads(value)["event_id"] for value in expected)  # 0 lost, 0 duplicated
        assert len(table(s, "device_events")) == len(expected)

        cluster.restart(victim)  # it comes back as a follower and catches up
        _wait(lambda: all(victim in isr for isr in cluster.in_sync(s.streaming.events_topic).values()), 120,
              f"broker {victim} to rejoin every partition's in-sync replicas")
    finally:
        cluster.stop()
