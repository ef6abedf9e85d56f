"""Helpers the tests share: produce, run a job in the shared session, read Delta tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest

from spark_jobs.config import Settings
from spark_jobs.jobs.base import StreamingJob
from spark_jobs.jobs.registry import get_job
from spark_jobs.local.simulate import SimRecord, event_payload
from spark_jobs.runtime.delta import table_access
from spark_jobs.runtime.delta.table_access import read_pandas
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.kafka import offsets as kafka_offsets
from spark_jobs.runtime.kafka.producer import produce_records
from spark_jobs.runtime.metrics.summary import RunSummary
from spark_jobs.runtime.runner import JobRun
from spark_jobs.runtime.waiting import wait_until

# The files that start several heavy processes of their own (a Spark cluster, Airflow's
# components beside PostgreSQL, drivers at once on S3, a JVM per kill) carry this mark:
# xdist's loadgroup mode sends them to one worker, one after the other, beside the other
# worker's single-session files. Two of them at once on 2 cores slowed each three to four
# times over (docs/streaming-facts.md, "The test suite").
MULTI_PROCESS = pytest.mark.xdist_group("multi-process")

REPO = Path(__file__).resolve().parent.parent
DAY_MS = int(datetime(2026, 11, 22, tzinfo=timezone.utc).timestamp() * 1000)


def at(hh: int, mm: int, ss: int = 0) -> int:
    """Epoch milliseconds of a time of day on the scenario day."""
    return DAY_MS + ((hh * 60 + mm) * 60 + ss) * 1000


def single_partition(settings: Settings) -> Settings:
    """Settings on a one-partition topic, so that batch splits are exactly predictable."""
    s = settings.replace(events_topic=settings.streaming.events_topic + "-p1", topic_partitions=1)
    kafka_admin.create_topics(s.kafka.bootstrap_servers, [s.streaming.events_topic], 1, s.kafka.topic_retention_ms)
    return s


def single_partition_topics(settings: Settings, **overrides) -> Settings:
    """Settings on one-partition events and alerts topics, with ``overrides``."""
    s = settings.replace(
        events_topic=settings.streaming.events_topic + "-p1", alerts_topic=settings.streaming.alerts_topic + "-p1",
        topic_partitions=1, **overrides,
    )
    kafka_admin.create_topics(s.kafka.bootstrap_servers, [s.streaming.events_topic, s.streaming.alerts_topic], 1,
                              s.kafka.topic_retention_ms)
    return s


def send_alert(settings: Settings, alert_id: str, device: str, t_ms: int, severity: str = "critical") -> int:
    """Produce one contract-conforming alert, keyed by device."""
    from spark_jobs.local.simulate import iso

    body = {"alert_id": alert_id, "device_id": device, "alert_time": iso(t_ms), "severity": severity, "kind": "overheat"}
    return produce(settings, [(device.encode(), json.dumps(body).encode())], settings.streaming.alerts_topic)


def send(settings: Settings, events, topic: str | None = None) -> int:
    """Produce oracle Events as contract-conforming JSON, keyed by device."""
    return produce(settings, [
        (e.device_id.encode(), event_payload(e.event_id, e.device_id, e.t_ms, e.signal)) for e in events
    ], topic)


def produce(settings: Settings, records: list[SimRecord] | list[tuple[bytes | None, bytes]], topic: str | None = None) -> int:
    pairs = [(r.key, r.value) if isinstance(r, SimRecord) else r for r in records]
    return produce_records(settings.kafka.bootstrap_servers, topic or settings.streaming.events_topic, pairs)


def sigflow_here(args: list[str]) -> int:
    """`sigflow ARGS` in this process: its exit code. The command sets logging up as for a
    process of its own (cli/console.py): every library's records from INFO, or DEBUG with
    -v, to a handler on the stderr the test captured. Left so, every later test of the worker
    captured that chatter, each record an error trace of its own once that stream was
    closed: two Kafka tests after `sigflow -v report` printed 31 MB. Each logger's level,
    handlers and propagation are put back as the command found them."""
    import logging

    from spark_jobs.cli.main import main

    loggers = [logging.getLogger(), *(logger for logger in logging.Logger.manager.loggerDict.values()
                                      if isinstance(logger, logging.Logger))]
    found = [(logger, logger.level, logger.handlers[:], logger.propagate) for logger in loggers]
    try:
        return main(args)
    finally:
        for logger, level, handlers, propagate in found:
            if logger.level != level:
                logger.setLevel(level)
            logger.handlers[:], logger.propagate = handlers, propagate


def delete_from_kafka(settings: Settings, topic: str, before: dict[int, int] | None = None) -> None:
    """What retention does: each partition's records before an offset gone (``before``:
    partition -> offset; by default every record so far)."""
    from confluent_kafka import TopicPartition

    if before is None:
        before = {p: end for p, (_, end) in kafka_offsets.topic_bounds(settings.kafka.bootstrap_servers, topic).items()}
    admin = kafka_admin.admin(settings.kafka.bootstrap_servers)
    for future in admin.delete_records([TopicPartition(topic, p, offset) for p, offset in before.items()]).values():
        future.result(30)


def confluent_produce(bootstrap: str, topic: str, pairs) -> int:
    """Send (key, value) pairs with librdkafka: for volumes kafka-python takes long over
    (it sends about 6 MB/s here)."""
    from confluent_kafka import Producer

    from spark_jobs.runtime.kafka.producer import hand_over

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    for key, value in pairs:
        hand_over(producer, topic, key, value)
    producer.flush(60)
    return len(pairs)


def records_in(bootstrap: str, topic: str) -> int:
    """How many records a topic holds now (confirmed end minus earliest offset, all partitions)."""
    partitions = kafka_admin.topic_partitions(bootstrap, topic)
    return sum(end - start for start, end in kafka_offsets.offset_bounds(bootstrap, topic, partitions).values())


def topic_records(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes]]:
    """Every (key, value) a topic holds now, all partitions, each in its partition's order."""
    from confluent_kafka import TopicPartition

    partitions = kafka_admin.topic_partitions(bootstrap, topic)
    bounds = kafka_offsets.offset_bounds(bootstrap, topic, partitions)
    reader = kafka_offsets.consumer(bootstrap)
    reader.assign([TopicPartition(topic, p, start) for p, (start, _) in bounds.items()])
    wanted = sum(end - start for start, end in bounds.values())
    out: list[tuple[bytes | None, bytes]] = []
    try:
        deadline = time.monotonic() + 30
        while len(out) < wanted and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is not None and not message.error():
                out.append((message.key(), message.value()))
    finally:
        reader.close()
    return out


def run_job(spark, settings: Settings, job: "str | StreamingJob" = "ingest") -> RunSummary:
    """One available-now run in the shared session: a restart from the job's checkpoint."""
    job = job if isinstance(job, StreamingJob) else get_job(job)
    return JobRun(job, settings, spark).run_available_now()


def another_commit_after_the_first_read(monkeypatch, commit) -> None:
    """Another writer's ``commit`` lands right after the first read of a table through
    ``table_access.open_table``, before the commit built on that read: the window between a
    writer's read and its commit. Later reads (the commit's own among them) go through."""
    reads = []

    def read_then_another_commit(*args, **kwargs):
        read = real_open(*args, **kwargs)
        if not reads:
            reads.append(read)
            commit()
        return read

    real_open = table_access.open_table
    monkeypatch.setattr(table_access, "open_table", read_then_another_commit)


def table(settings: Settings, name: str) -> pd.DataFrame:
    return read_pandas(settings.table_uri(name))


# The columns that say when and by which checkpoint's batch a row was written, not what it holds.
WRITE_STAMPS = frozenset({"ingest_time", "checkpoint_id", "batch_id"})


def contents(settings: Settings, name: str, ignore: frozenset[str] = WRITE_STAMPS) -> Counter:
    """A table's rows as a multiset, without the columns that say when a row was written:
    what two runs that should agree are compared by."""
    frame = table(settings, name)
    columns = sorted(set(frame.columns) - ignore)
    return Counter(tuple(map(repr, row)) for row in frame[columns].itertuples(index=False))


def wait_for(ready, *, timeout_s: float, what: str, every_s: float = 0.5, watched: tuple = (),
             not_yet: tuple[type[BaseException], ...] = ()):
    """A test's wait: ``ready``'s first true answer, else a failed assertion saying what was
    awaited and, when a watched process ended first, what it printed."""
    answer = wait_until(ready, timeout_s=timeout_s, every_s=every_s, not_yet=not_yet,
                        give_up=lambda: any(p.poll() is not None for p in watched))
    ended = [p for p in watched if p.poll() is not None]
    if not answer and ended:
        printed = ended[0].communicate()[0] if ended[0].stdout else ""
        raise AssertionError(f"waiting for {what}, a process ended (code {ended[0].returncode}):\n{printed}")
    assert answer, f"no {what} within {timeout_s:g} s"
    return answer


def processes_with_env(variable: str, value) -> list[int]:
    """Live processes whose environment has variable=value: what a command left running."""
    marker = f"{variable}={value}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


# Every JVM a test starts beside the session's own (a CLI run's driver, a broker, a cluster
# daemon, spark-submit) lives seconds to minutes: with the quick JIT such a run costs a
# third less CPU (docs/streaming-facts.md), and the suite is CPU-bound. The session's JVM
# lives the whole run and keeps the tiered JIT.
QUICK_JIT = {"jit": "quick"}


def cli_env(settings: Settings | None, extra_env: dict | None = None) -> dict[str, str]:
    """The environment an operator's shell would have for these settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGFLOW_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
    env["SIGFLOW_JIT"] = QUICK_JIT["jit"]
    if settings is not None:
        env.update({
            "SIGFLOW_DATA_DIR": settings.data_dir,
            "KAFKA_BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers,
            "SIGFLOW_EVENTS_TOPIC": settings.streaming.events_topic,
            "SIGFLOW_ALERTS_TOPIC": settings.streaming.alerts_topic,
            "SIGFLOW_CRITICAL_ALERTS_TOPIC": settings.streaming.critical_alerts_topic,
            "SIGFLOW_SHUFFLE_PARTITIONS": str(settings.spark.shuffle_partitions),
            "SIGFLOW_MAX_OFFSETS_PER_TRIGGER": str(settings.kafka.max_offsets_per_trigger),
        })
    env.update(extra_env or {})
    return env


def sigflow(settings: Settings | None, *args: str, extra_env: dict | None = None, timeout: float = 300):
    """Run the real CLI in a subprocess, as an operator would."""
    return subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", *args],
        env=cli_env(settings, extra_env), capture_output=True, text=True, timeout=timeout, cwd=REPO,
    )


def system_tool(name: str, debian_package: str) -> str:
    """Path of a Debian-packaged tool a test needs. `.ci/run` installs these; elsewhere a
    missing tool skips the test, but under CI it fails it, so CI never passes by skipping."""
    import shutil

    path = shutil.which(name)
    if path:
        return path
    message = f"{name} not found: apt-get install {debian_package} (.ci/run does)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def assert_private(secret_files: list[Path], data_dir: Path) -> None:
    """Each secret file is its owner's only (0600) in a folder only its owner enters (0700),
    and no log or other text file under the data directory holds any of the secrets."""
    import stat

    secrets = {path: path.read_text().strip() for path in secret_files}
    for path in secret_files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, f"{path}: {oct(path.stat().st_mode)}"
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700, f"{path.parent}: {oct(path.parent.stat().st_mode)}"
    values = {value for text in secrets.values() for value in
              ([*json.loads(text).values()] if text.startswith("{") else [text])}
    for log in data_dir.rglob("*"):
        if (log.is_file() and log not in secrets and log.suffix in (".log", ".txt", ".json", "")
                and log.stat().st_size < 5_000_000):
            text = log.read_bytes().decode("utf-8", "replace")
            assert not [value for value in values if value in text], f"{log} holds a secret"


def jars_with(name: str, folder: str) -> Path:
    """A JAR directory with the spark set and the optional set ``name``, apart from the default
    one so the rest of the suite runs without it; kept beside the default one across runs."""
    from spark_jobs.install import jars

    directory = jars.default_dir().parent / folder
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "spark").exists():
        (directory / "spark").symlink_to(jars.default_dir() / "spark")
    jars.fetch((name,), directory)  # verifies what is there, fetches what is missing
    return directory


def json_lines(path: Path) -> list[dict]:
    """A JSON-lines file's records (lineage events, progress lines)."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def committed_checkpoint(settings: Settings, job: str, read_to: int, watermark_ms: int = 0,
                         identity: dict | None = None) -> None:
    """A checkpoint of ``job`` written by hand, as Spark and sigflow lay it out: one committed
    batch that read the events topic's partition 0 up to ``read_to`` and left ``watermark_ms``."""
    folder = Path(settings.checkpoint_uri(job))
    (folder / "offsets").mkdir(parents=True)
    (folder / "commits").mkdir()
    meta = {"batchWatermarkMs": watermark_ms, "batchTimestampMs": int(time.time() * 1000), "conf": {}}
    read = {settings.streaming.events_topic: {"0": read_to}}
    (folder / "offsets" / "0").write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(read)}")
    (folder / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    (folder / "sigflow.json").write_text(json.dumps({"app_id": f"{job}-app", "checkpoint_id": f"{job}-cp",
                                                    "job": job, **(identity or {})}))


class StorageDown:
    """Storage that fails reads for a while (an object store's 503s, a GET that times out):
    each file read in that time fails with OSError, as pyarrow raises it, while listings
    still answer. ``filesystem()`` is the local disk seen through it."""

    def __init__(self, seconds: float):
        self.until = time.monotonic() + seconds
        self.refused = 0

    def filesystem(self):
        from fsspec.implementations.local import LocalFileSystem
        from pyarrow import fs as pafs

        outage = self

        class Handler(pafs.FSSpecHandler):
            def open_input_stream(self, path):
                outage.answer(path)
                return super().open_input_stream(path)

        return pafs.PyFileSystem(Handler(LocalFileSystem()))

    def answer(self, path: str) -> None:
        if time.monotonic() < self.until:
            self.refused += 1
            raise OSError(f"When reading information for key '{path}': AWS Error SLOW_DOWN (HTTP status code: 503)")

