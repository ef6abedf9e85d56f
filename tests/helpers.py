"""Helpers the tests share: produce, run a job in the shared session, read Delta tables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
from deltalake import DeltaTable

from spark_jobs.config import Settings
from spark_jobs.jobs import get_job
from spark_jobs.runner import JobRun, RunSummary
from spark_jobs.simulate import SimRecord, produce_records

REPO = Path(__file__).resolve().parent.parent


def produce(settings: Settings, records: list[SimRecord] | list[tuple[bytes | None, bytes]], topic: str | None = None) -> int:
    pairs = [(r.key, r.value) if isinstance(r, SimRecord) else r for r in records]
    return produce_records(settings.kafka_bootstrap_servers, topic or settings.events_topic, pairs)


def run_job(spark, settings: Settings, job: str = "ingest") -> RunSummary:
    return JobRun(get_job(job), settings, spark).run_available_now()


def table(settings: Settings, name: str) -> pd.DataFrame:
    return DeltaTable(settings.table_uri(name)).to_pandas()


def sigflow(settings: Settings | None, *args: str, extra_env: dict | None = None, timeout: float = 300):
    """Run the real CLI in a subprocess, as an operator would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGFLOW_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
    if settings is not None:
        env.update({
            "SIGFLOW_DATA_DIR": settings.data_dir,
            "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
            "SIGFLOW_EVENTS_TOPIC": settings.events_topic,
            "SIGFLOW_ALERTS_TOPIC": settings.alerts_topic,
            "SIGFLOW_SHUFFLE_PARTITIONS": str(settings.shuffle_partitions),
            "SIGFLOW_MAX_OFFSETS_PER_TRIGGER": str(settings.max_offsets_per_trigger),
        })
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", *args],
        env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO,
    )
