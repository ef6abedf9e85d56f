"""Builds the Spark drivers' class archive (runtime/class_archive.py) on this machine: a real
pipeline of every job, on a broker of its own with a few hundred simulated records, in a
driver that writes the archive of the classes it loaded as it exits."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import tenacity

from spark_jobs.config import Settings, load_settings
from spark_jobs.errors import SigflowError
from spark_jobs.local import broker, simulate
from spark_jobs.runtime import class_archive
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.kafka.producer import produce_records
from spark_jobs.runtime.spark import ensure_java
from spark_jobs.runtime.waiting import wait_until

TRAINING_EVENTS = 300
TRIES = 2
PIPELINE_TIMEOUT_S = 900  # the training pipeline takes about a minute here


@dataclass(frozen=True)
class ArchiveResult:
    archive: Path
    seconds: float | None  # None: it was there already

    def line(self) -> str:
        size = f"{self.archive.stat().st_size / 2**20:.0f} MB"
        if self.seconds is None:
            return f"Spark drivers' class archive: already there ({size}, {self.archive})"
        return f"Spark drivers' class archive: built in {self.seconds:.0f} s ({size}, {self.archive})"


def build(settings: Settings) -> ArchiveResult:
    """The archive for this Java and pyspark, built unless a whole one is there."""
    ensure_java()
    archive = class_archive.archive_path(settings.jars_path, os.environ["JAVA_HOME"])
    if class_archive.usable(archive):
        return ArchiveResult(archive, None)
    archive.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    written = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    # A whole pipeline and a broker on a loaded machine: once more before giving up, since
    # without the archive every driver here starts a third slower. The log of the last try
    # stays beside the archive for whoever reads the failure.
    retrying = tenacity.Retrying(stop=tenacity.stop_after_attempt(TRIES), reraise=True,
                                 retry=tenacity.retry_if_exception_type(SigflowError))
    try:
        for attempt in retrying:
            with attempt, tempfile.TemporaryDirectory(prefix="sigflow-class-data-") as work:
                _train(settings, Path(work), written, build_log(archive))
        class_archive.adopt(written, archive)
    finally:
        written.unlink(missing_ok=True)
    for older in archive.parent.glob("spark-driver-*.jsa*"):  # another Java's or pyspark's
        if older.name not in (archive.name, f"{archive.name}.json") and ".partial" not in older.name:
            older.unlink()
    return ArchiveResult(archive, time.monotonic() - began)


def build_log(archive: Path) -> Path:
    """What the last build's pipeline printed."""
    return archive.with_name("build.log")


def _train(settings: Settings, work: Path, written: Path, log: Path) -> None:
    own = load_settings(env={}, overrides={"data_dir": str(work), "broker_port": 0, "jit": "quick",
                                           "jars_dir": str(settings.jars_path)})
    info = broker.start(own)
    try:
        streaming = own.streaming
        kafka_admin.create_topics(info.bootstrap_servers, [streaming.events_topic, streaming.alerts_topic],
                                   own.kafka.topic_partitions, own.kafka.topic_retention_ms)
        events = simulate.generate_events(TRAINING_EVENTS, devices=8, seed=1)
        for topic, records in ((streaming.events_topic, events), (streaming.alerts_topic,
                                                                  simulate.generate_alerts(events, every=20, seed=1))):
            produce_records(info.bootstrap_servers, topic, ((r.key, r.value) for r in records))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIGFLOW_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
        env.update(SIGFLOW_DATA_DIR=str(work), KAFKA_BOOTSTRAP_SERVERS=info.bootstrap_servers,
                   SIGFLOW_JARS_DIR=str(settings.jars_path), SIGFLOW_JIT="quick", SIGFLOW_CLASS_DATA_SHARING="false",
                   SIGFLOW_JVM_OPTIONS=class_archive.dump_options(written))
        with log.open("w") as out:
            try:
                ran = subprocess.run([sys.executable, "-m", "spark_jobs.cli", "pipeline"], env=env, stdout=out,
                                     stderr=subprocess.STDOUT, timeout=PIPELINE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                for process in _writers(written):  # its driver's JVM, which outlives the Python killed
                    process.kill()
                raise SigflowError(f"the pipeline that builds the class archive ran past {PIPELINE_TIMEOUT_S} s"
                                   f" (its output: {log})", "run `sigflow jars archive` again, or set"
                                   " SIGFLOW_CLASS_DATA_SHARING=false") from None
        if ran.returncode != 0:
            raise SigflowError(f"the pipeline that builds the class archive failed (its output: {log})",
                               "run `sigflow jars archive` again, or set SIGFLOW_CLASS_DATA_SHARING=false")
    finally:
        broker.stop(own)
    # The driver's JVM writes the archive as it exits, after the pipeline's Python has.
    if wait_until(lambda: not _writing(written), timeout_s=300, every_s=0.5) is None or not written.is_file():
        raise SigflowError(f"the driver did not write the class archive {written}",
                           "run `sigflow jars archive` again, or set SIGFLOW_CLASS_DATA_SHARING=false")


def _writing(written: Path) -> bool:
    return bool(_writers(written))


def _writers(written: Path) -> list[psutil.Process]:
    """The JVMs that write ``written`` as they exit."""
    option = f"-XX:ArchiveClassesAtExit={written}"
    return [process for process in psutil.process_iter(["cmdline"]) if option in (process.info["cmdline"] or ())]
