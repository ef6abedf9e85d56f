"""The fallback engine (Python Kafka source + delta-rs) against the JVM engine (Spark's
Kafka source + delta-spark): the same stream, in several micro-batches with late,
out-of-order, duplicate and malformed events, then a replayed batch, must give the same
tables. One shared SparkSession serves both: the engine is chosen per run by the setting."""

from pathlib import Path

import pytest

from spark_jobs.jobs.registry import JOBS
from spark_jobs.local.simulate import generate_alerts, generate_events
from spark_jobs.runtime import kafka_client
from spark_jobs.runtime.checkpoint import Checkpoint
from tests.conftest import make_settings
from tests.helpers import contents, produce, run_job, single_partition, table

PARITY_JOBS = ["ingest", "dedup", "windowed-averages", "sessions", "alert-join"]
def _undo_last_commit(settings, job) -> int:
    """As a crash after the Delta commit but before Spark's: the batch runs again."""
    checkpoint = Checkpoint(settings.checkpoint_uri(job))
    last = checkpoint.last_committed()
    commits = Path(settings.checkpoint_uri(job), "commits")
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


@pytest.fixture(scope="module")
def runs(tmp_path_factory, embedded_broker, spark):
    """Each parity job run twice (two halves of the stream), then its last batch replayed,
    once per engine; returns the settings of each engine's data directory."""
    root = tmp_path_factory.mktemp("parity")
    base = single_partition(make_settings(root / "topics", embedded_broker.bootstrap_servers))
    kafka_client.create_topics(base.kafka_bootstrap_servers, [base.alerts_topic], 1, base.topic_retention_ms)
    events = generate_events(240, devices=6, seed=41, late_ratio=0.05, duplicate_ratio=0.05, malformed_ratio=0.03)
    alerts = generate_alerts(events, every=25, seed=41)
    engines = {name: base.replace(data_dir=str(root / name), engine=name, max_offsets_per_trigger=80)
               for name in ("jvm", "python")}
    replayed: dict[str, dict[str, int]] = {name: {} for name in engines}
    for part in (0, 1):
        produce(base, events[part * 120:(part + 1) * 120])
        produce(base, alerts[part * len(alerts) // 2:(part + 1) * len(alerts) // 2], base.alerts_topic)
        for name, s in engines.items():
            for job in PARITY_JOBS:
                run_job(spark, s, job)
    for name, s in engines.items():
        for job in PARITY_JOBS:
            replayed[name][job] = _undo_last_commit(s, job)
            run_job(spark, s, job)
    return engines, replayed


@pytest.mark.parametrize("job", PARITY_JOBS)
def test_both_engines_write_the_same_tables(runs, job):
    engines, _ = runs
    tables = [spec.name for spec in JOBS[job].tables] + (["late_events"] if JOBS[job].late_rule else [])
    for name in tables:
        assert contents(engines["jvm"], name) == contents(engines["python"], name), f"{job}: {name}"


def test_the_runs_had_several_batches_late_rows_and_a_replay_that_wrote_nothing(runs):
    engines, replayed = runs
    for s in engines.values():
        # several micro-batches per run, so state crossed batch boundaries
        assert Checkpoint(s.checkpoint_uri("dedup")).last_committed() >= 4
        assert len(table(s, "late_events")) > 0
        raw = table(s, "device_events_raw")
        assert len(raw) == len(set(zip(raw.topic, raw.partition, raw.offset)))  # replay skipped
    assert replayed["jvm"] == replayed["python"]
