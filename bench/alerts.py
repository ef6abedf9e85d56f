"""`make bench`'s alert section: end-to-end latency of a critical alert, produced to
device-alerts, at a fixed offered rate, through the two paths that carry it.

* **alert-fastpath** (real-time mode) runs as it does in production, a Spark application of
  its own (`sigflow run alert-fastpath --processing-time ...` in a subprocess, with a task
  slot per partition). An alert's latency runs from its send to the broker's append of its
  record on device-alerts-critical (the topic is stamped with the broker's clock, the same
  clock as the send's on this machine).
* **alert-join** (micro-batch, 1-second trigger) in the bench's session: from an alert's
  send to the Delta commit that made its row of alert_signal_context visible (the commit's
  own timestamp). Each alert follows an event of its device at the same time, so it joins.

Alerts are sent in 10 ms slices (not a burst per second); a third are critical.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from spark_jobs.local.simulate import event_payload, iso
from spark_jobs.runtime.delta.table_access import dataset, history
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.kafka import offsets as kafka_offsets
from spark_jobs.runtime.waiting import wait_until
from tests.helpers import REPO, cli_env

SLICE_S = 0.01
SEVERITIES = ("critical", "warning", "info")


@dataclass
class Latency:
    path: str
    rate: int
    sent: int  # alerts offered (the critical ones, for the fast path; all, for alert-join)
    arrived: int
    p50_ms: float
    p95_ms: float
    p99_ms: float

    def line(self) -> str:
        return (f"{self.path} latency at {self.rate:,} alerts/s: p50 {self.p50_ms:,.0f} ms, p95 {self.p95_ms:,.0f} ms, "
                f"p99 {self.p99_ms:,.0f} ms ({self.arrived:,} of {self.sent:,} arrived)")


def _latency(path: str, rate: int, sent: dict[str, float], arrived: dict[str, float]) -> Latency:
    delays = sorted((arrived[a] - sent[a]) * 1000 for a in sent if a in arrived)
    pick = lambda q: delays[min(len(delays) - 1, int(q * len(delays)))] if delays else float("nan")  # noqa: E731
    return Latency(path, rate, len(sent), len(delays), pick(0.50), pick(0.95), pick(0.99))


def offer(bootstrap: str, alerts_topic: str, rate: int, seconds: float, events_topic: str | None = None,
          prefix: str = "a") -> dict[str, tuple[float, str]]:
    """Send ``rate`` alerts/s for ``seconds``, each after an event of its device when
    ``events_topic`` is given: alert id -> (send time, severity)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    rng = random.Random(5)
    sent: dict[str, tuple[float, str]] = {}
    per_slice = max(1, round(rate * SLICE_S))
    started = time.perf_counter()
    for n in range(int(rate * seconds / per_slice)):
        for k in range(per_slice):
            alert_id, device = f"{prefix}-{n}-{k}", f"device-{rng.randrange(200):03d}"
            now_ms = int(time.time() * 1000)
            if events_topic:
                producer.produce(events_topic, key=device.encode(),
                                 value=event_payload(f"e-{alert_id}", device, now_ms, 1.0))
            severity = rng.choice(SEVERITIES)
            body = {"alert_id": alert_id, "device_id": device, "alert_time": iso(now_ms), "severity": severity,
                    "kind": "threshold"}
            producer.produce(alerts_topic, key=device.encode(), value=json.dumps(body).encode())
            sent[alert_id] = (time.time(), severity)
        producer.poll(0)
        time.sleep(max(0.0, started + (n + 1) * SLICE_S - time.perf_counter()))
    producer.flush(30)
    return sent


def fastpath_latency(settings, rates: list[int], seconds: float, warm_up_s: float = 0, say=print) -> list[Latency]:
    """alert-fastpath in a process of its own, at each offered rate in turn, after
    ``warm_up_s`` of the highest rate not measured (the JIT compiles the parse meanwhile:
    measured, the first 15 s at 5,000 alerts/s had a p50 of seconds, the next a p50 of 5 ms)."""
    from confluent_kafka import TopicPartition

    s = settings.replace(alerts_topic="bench-fast-alerts", critical_alerts_topic="bench-fast-critical",
                         checkpoint_root=f"{settings.checkpoint_root_uri}-fast", delta_root=f"{settings.delta_root_uri}-fast")
    bootstrap = s.kafka.bootstrap_servers
    kafka_admin.create_topics(bootstrap, [s.streaming.alerts_topic, s.streaming.critical_alerts_topic],
                               s.kafka.topic_partitions, s.kafka.topic_retention_ms)
    env = cli_env(s, {"SIGFLOW_JIT": "tiered", "SIGFLOW_CRITICAL_ALERTS_TOPIC": s.streaming.critical_alerts_topic,
                      "SIGFLOW_DELTA_ROOT": s.delta_root_uri, "SIGFLOW_CHECKPOINT_ROOT": s.checkpoint_root_uri,
                      "SIGFLOW_STARTING_OFFSETS": "latest",
                      "SIGFLOW_REAL_TIME_CHECKPOINT_INTERVAL": s.streaming.real_time_checkpoint_interval})
    job = subprocess.Popen([sys.executable, "-m", "spark_jobs.cli", "run", "alert-fastpath", "--processing-time", "1s"],
                           env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    results = []
    reader = kafka_offsets.consumer(bootstrap)
    partitions = kafka_admin.topic_partitions(bootstrap, s.streaming.critical_alerts_topic)
    reader.assign([TopicPartition(s.streaming.critical_alerts_topic, p, 0) for p in partitions])
    arrived: dict[str, float] = {}
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            message = reader.poll(0.2)
            if message is not None and not message.error():
                arrived.setdefault(json.loads(message.value())["alert_id"], message.timestamp()[1] / 1000)

    reading = threading.Thread(target=read, daemon=True)
    reading.start()
    try:
        # running once a warm-up alert comes through (the query reads from "latest")
        def warmed() -> bool:
            if job.poll() is not None:
                raise RuntimeError(f"alert-fastpath ended: {job.stderr.read()[-2000:]}")
            offer(bootstrap, s.streaming.alerts_topic, 100, 0.1, prefix=f"warm-{time.time():.0f}")
            return any(a.startswith("warm-") for a in arrived)
        if not wait_until(warmed, timeout_s=120, every_s=2):
            raise RuntimeError("alert-fastpath forwarded nothing within 120 s")
        if warm_up_s:
            offer(bootstrap, s.streaming.alerts_topic, max(rates), warm_up_s, prefix="warm-up")
        for n, rate in enumerate(rates):
            sent = offer(bootstrap, s.streaming.alerts_topic, rate, seconds, prefix=f"r{n}")
            critical = {a: at for a, (at, severity) in sent.items() if severity == "critical"}
            wait_until(lambda: all(a in arrived for a in critical), timeout_s=30, every_s=0.2)
            results.append(_latency("alert-fastpath", rate, critical, arrived))
            say(f"  {results[-1].line()}")
    finally:
        stop.set()
        reading.join(5)
        reader.close()
        job.send_signal(signal.SIGTERM)
        job.communicate(timeout=120)
    return results


def alert_join_latency(spark, settings, rates: list[int], seconds: float, drain_s: float = 90,
                       say=print) -> list[Latency]:
    """alert-join with a 1-second trigger in the bench's session, at each offered rate in
    turn; after each, up to ``drain_s`` for the job to commit what was offered. A rate it
    cannot keep up with shows as alerts that had not arrived by the end: the query is then
    stopped mid-batch (measured: a 230,324-record batch at 5,000 alerts/s took 345 s)."""
    from spark_jobs.jobs.registry import get_job
    from spark_jobs.runtime.runner import JobRun

    s = settings.replace(events_topic="bench-join-events", alerts_topic="bench-join-alerts", trigger_interval="1 second",
                         checkpoint_root=f"{settings.checkpoint_root_uri}-join", delta_root=f"{settings.delta_root_uri}-join")
    bootstrap = s.kafka.bootstrap_servers
    kafka_admin.create_topics(bootstrap, [s.streaming.events_topic, s.streaming.alerts_topic],
                               s.kafka.topic_partitions, s.kafka.topic_retention_ms)
    run, stop = JobRun(get_job("alert-join"), s, spark), threading.Event()
    worker = threading.Thread(target=run.run_continuous, args=(stop,))
    worker.start()
    offered: dict[str, float] = {}
    try:
        for n, rate in enumerate(rates):
            sent = offer(bootstrap, s.streaming.alerts_topic, rate, seconds, s.streaming.events_topic, prefix=f"r{n}")
            offered.update({a: at for a, (at, _) in sent.items()})
            ends = {topic: {p: end for p, (_, end) in kafka_offsets.offset_bounds(
                bootstrap, topic, kafka_admin.topic_partitions(bootstrap, topic)).items()}
                for topic in (s.streaming.events_topic, s.streaming.alerts_topic)}
            if not wait_until(lambda: run.checkpoint.committed_through(ends), timeout_s=drain_s, every_s=1):
                say(f"  alert-join had not caught up {drain_s:.0f} s after {rate:,} alerts/s stopped")
    finally:
        stop.set()
        if run.query is not None:  # not the graceful stop: a batch far behind would take minutes
            run.query.stop()
        worker.join(120)
    arrived = _first_commit(s.table_uri("alert_signal_context"))
    results = []
    for n, rate in enumerate(rates):
        sent = {a: at for a, at in offered.items() if a.startswith(f"r{n}-")}
        results.append(_latency("alert-join", rate, sent, arrived))
        say(f"  {results[-1].line()}")
    return results


def _first_commit(uri: str) -> dict[str, float]:
    """alert id -> when the commit that first held its row was made (epoch seconds)."""
    commits = {int(c["version"]): c["timestamp"] / 1000 for c in history(uri) if "version" in c}
    seen: dict[str, float] = {}
    for version in sorted(commits):
        ids = dataset(uri, version).to_table(columns=["alert_id"]).column("alert_id").to_pylist()
        for alert_id in ids:
            seen.setdefault(alert_id, commits[version])
    return seen

