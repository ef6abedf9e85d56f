import json
from pathlib import Path

from spark_jobs.config import load_settings
from spark_jobs.jobs.registry import get_job
from spark_jobs.runtime.kafka.source import (
    DELTA_SPARK_CLASS,
    KAFKA_PROVIDER_CLASS,
    kafka_options,
)
from spark_jobs.runtime.runner import JobRun
from spark_jobs.runtime.spark import class_available
from tests.helpers import at, send
from tests.oracle import Event


def test_production_settings_yield_spark_kafka_options():
    s = load_settings(env={
        "KAFKA_BOOTSTRAP_SERVERS": "kafka:9092", "SIGFLOW_MAX_OFFSETS_PER_TRIGGER": "50000",
        "SIGFLOW_DELTA_ROOT": "s3a://sigflow/delta", "SIGFLOW_STARTING_OFFSETS": "latest",
    })
    assert kafka_options(s, s.kafka.bootstrap_servers, [s.streaming.events_topic]) == {
        "kafka.bootstrap.servers": "kafka:9092",
        "kafka.security.protocol": "PLAINTEXT",
        "subscribe": "device-events",
        "startingOffsets": "latest",
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        "maxOffsetsPerTrigger": "50000",
    }
    assert s.table_uri("device_events") == "s3a://sigflow/delta/device_events"


def test_the_test_session_has_the_kafka_source_and_delta_spark(spark):
    # The pinned JARs are installed by make install: everything the suite proves is on them.
    assert class_available(spark, KAFKA_PROVIDER_CLASS) and class_available(spark, DELTA_SPARK_CLASS)


def test_a_running_job_reads_with_sparks_kafka_source_and_commits_each_batch_with_its_ids(spark, settings):
    """A batch the run planned itself is new: its commit carries (app id, batch id) in its
    metadata, without Delta's transaction lookup (replays: tests/spark_jobs/runtime/delta/test_sink.py)."""
    send(settings, [Event("e1", "d1", at(10, 0), 1.0), Event("e2", "d2", at(10, 1), 2.0)])
    run = JobRun(get_job("ingest"), settings, spark)
    query = run.start("0 seconds")
    try:
        query.processAllAvailable()
        sources = [s["description"] for p in query.recentProgress for s in p["sources"]]
    finally:
        query.stop()
    assert sources and all(d.startswith("KafkaV2[Subscribe[") for d in sources)
    log = sorted(Path(settings.table_uri("device_events"), "_delta_log").glob("*.json"))
    actions = [json.loads(line) for path in log for line in path.read_text().splitlines()]
    tagged = [json.loads(a["commitInfo"]["userMetadata"])["sigflow"] for a in actions
              if "commitInfo" in a and "userMetadata" in a["commitInfo"]]
    engines = {a["commitInfo"].get("engineInfo", "") for a in actions if "commitInfo" in a}
    assert [(m["app_id"], m["batch_id"]) for m in tagged] == [(run.app_id, 0)]
    assert not [a for a in actions if "txn" in a]
    assert any(e.startswith("Apache-Spark/") and "Delta-Lake/" in e for e in engines)
