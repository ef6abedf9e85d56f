"""Job alert-fastpath in Spark's real-time mode against the embedded Apache Kafka: what it
forwards is what the alert contract and the critical rule imply, the same alerts ingest
keeps, and a run stopped before its commit sends its alerts again (at-least-once)."""

import json
import threading
from collections import Counter

import pytest

from spark_jobs.config import load_settings
from spark_jobs.errors import ConfigError
from spark_jobs.jobs.alert_fastpath import ALERT_FASTPATH, critical_rule
from spark_jobs.ops import status
from spark_jobs.runtime.kafka import admin as kafka_admin
from spark_jobs.runtime.real_time import RealTimeRun
from tests.helpers import DAY_MS, produce, run_job, table, topic_records, wait_for

# The test session has 2 task slots: real-time mode holds one per partition.
PARTITIONS = 2


@pytest.fixture
def fast_settings(settings):
    s = settings.replace(
        alerts_topic=settings.streaming.alerts_topic + "-rt", topic_partitions=PARTITIONS,
        critical_alerts_topic=settings.streaming.alerts_topic + "-critical", critical_kinds="smoke",
    )
    kafka_admin.create_topics(s.kafka.bootstrap_servers, [s.streaming.alerts_topic, s.streaming.critical_alerts_topic],
                               PARTITIONS, s.kafka.topic_retention_ms)
    return s


def alert(alert_id: str, device: str = "dev-1", severity: str = "critical", kind: str = "threshold",
          alert_time=None) -> tuple[bytes, bytes]:
    body = {"alert_id": alert_id, "device_id": device, "severity": severity, "kind": kind,
            "alert_time": DAY_MS if alert_time is None else alert_time}
    return device.encode(), json.dumps(body).encode()


def forwarded(settings) -> list[dict]:
    return [json.loads(value) | {"_key": key.decode()}
            for key, value in topic_records(settings.kafka.bootstrap_servers, settings.streaming.critical_alerts_topic)]


def test_forwards_exactly_the_valid_critical_alerts_ingest_keeps(spark, fast_settings):
    s = fast_settings
    critical = [alert(f"crit-{n}", device=f"dev-{n % 3}") for n in range(12)]
    by_kind = [alert("smoke-1", severity="info", kind="smoke")]  # critical_kinds
    ordinary = [alert(f"warn-{n}", severity="warning") for n in range(5)] + [alert("info-1", severity="info")]
    malformed = [
        (b"dev-1", b"not json {"),
        (b"dev-1", json.dumps({"alert_id": "m-missing", "device_id": "dev-1", "severity": "critical",
                               "alert_time": DAY_MS}).encode()),  # no kind
        alert("m-severity", severity="catastrophic"),
        (b"dev-1", json.dumps({"alert_id": 7, "device_id": "dev-1", "severity": "critical", "kind": "threshold",
                               "alert_time": DAY_MS}).encode()),  # alert_id not a string
        alert("m-time", alert_time="yesterday"),
        alert("m-ahead", alert_time=4102444800000),  # 2100: far past its Kafka timestamp (max_clock_ahead)
        (b"dev-1", b"[1, 2]"),
    ]
    produce(s, critical + by_kind + ordinary + malformed, topic=s.streaming.alerts_topic)

    summary = RealTimeRun(ALERT_FASTPATH, s, spark).run_available_now()

    sent = forwarded(s)
    expected = {json.loads(v)["alert_id"] for _, v in critical + by_kind}
    assert Counter(m["alert_id"] for m in sent) == Counter(expected)  # each once in a run that did not fail
    assert all(m["_key"] == m["device_id"] for m in sent)  # one device's alerts stay in one partition
    assert {m["alert_id"]: m["critical_because"] for m in sent if m["alert_id"] == "smoke-1"} == {
        "smoke-1": "kind smoke"}
    assert {m["critical_because"] for m in sent if m["alert_id"] != "smoke-1"} == {"severity critical"}
    assert all(m["alert_time"] == "2026-11-22T00:00:00.000Z" for m in sent)
    assert summary.rows_written == {s.streaming.critical_alerts_topic: len(expected)}

    # the same contract as ingest: what it keeps as alerts, by the same rule, is what was forwarded
    run_job(spark, s)
    kept = table(s, "device_alerts")
    rule = kept["severity"].eq("critical") | kept["kind"].eq("smoke")
    assert set(kept[rule]["alert_id"]) == {m["alert_id"] for m in sent}
    assert len(table(s, "quarantined_events")) == len(malformed)

    # status and pipeline_metrics know the job like any other
    metrics = table(s, "pipeline_metrics")
    mine = metrics[metrics["job"] == "alert-fastpath"]
    assert mine["output_rows"].sum() == len(expected) and mine["input_rows"].sum() == len(critical + by_kind
                                                                                           + ordinary + malformed)
    fast = status.job_status(s, "alert-fastpath", status.read_metrics(s))
    assert fast.verdict.word == "OK" and fast.behind == 0 and fast.last_batch is not None


def test_a_run_stopped_before_its_commit_sends_its_alerts_again(spark, fast_settings):
    """Real-time mode's Kafka sink is at-least-once: consumers deduplicate by alert_id."""
    s = fast_settings.replace(real_time_checkpoint_interval="5 minutes")  # no commit before the stop
    first = [alert(f"first-{n}") for n in range(6)]
    produce(s, first, topic=s.streaming.alerts_topic)
    stop = threading.Event()
    running = RealTimeRun(ALERT_FASTPATH, s, spark)
    thread = threading.Thread(target=running.run_continuous, args=(stop,))
    thread.start()
    try:
        wait_for(lambda: len(forwarded(s)) >= len(first), timeout_s=60, what="the first alerts forwarded")
    finally:
        stop.set()
        thread.join(60)
    assert running.checkpoint.last_committed() is None

    second = [alert(f"second-{n}") for n in range(4)]
    produce(s, second, topic=s.streaming.alerts_topic)
    RealTimeRun(ALERT_FASTPATH, s, spark).run_available_now()

    counts = Counter(m["alert_id"] for m in forwarded(s))
    assert counts == Counter({**{f"first-{n}": 2 for n in range(6)}, **{f"second-{n}": 1 for n in range(4)}})


def test_a_run_real_time_mode_cannot_serve_is_refused_before_its_query_starts(spark, fast_settings):
    """Each refusal names the fix and leaves the checkpoint's lease free for the next run."""
    s = fast_settings
    with pytest.raises(ConfigError, match="shorter than Spark's minimum of 5 seconds"):
        RealTimeRun(ALERT_FASTPATH, s.replace(real_time_checkpoint_interval="2 seconds"), spark)
    with pytest.raises(ConfigError, match="does not exist") as missing:
        RealTimeRun(ALERT_FASTPATH, s.replace(critical_alerts_topic=s.streaming.critical_alerts_topic + "-none"), spark)
    assert "sigflow topics create" in missing.value.hint
    wide = s.replace(alerts_topic=s.streaming.alerts_topic + "-wide", checkpoint_root=s.checkpoint_root_uri + "-wide")
    kafka_admin.create_topics(s.kafka.bootstrap_servers, [wide.streaming.alerts_topic], PARTITIONS + 1,
                               s.kafka.topic_retention_ms)
    with pytest.raises(ConfigError, match=f"have {PARTITIONS + 1} partitions and this session has "
                                          f"{PARTITIONS} slots"):
        RealTimeRun(ALERT_FASTPATH, wide, spark)
    RealTimeRun(ALERT_FASTPATH, s, spark).lease.release()  # the lease was free


def test_the_critical_rule_names_only_what_the_alert_contract_allows():
    with pytest.raises(ConfigError, match="critical_severities names catastrophic"):
        critical_rule(load_settings(env={"SIGFLOW_CRITICAL_SEVERITIES": "critical,catastrophic"}).streaming)
    with pytest.raises(ConfigError, match="would forward nothing"):
        critical_rule(load_settings(env={"SIGFLOW_CRITICAL_SEVERITIES": ""}).streaming)
    with pytest.raises(ConfigError, match="critical_kinds"):
        load_settings(env={"SIGFLOW_CRITICAL_KINDS": "smoke;rm -rf"})
    rule = critical_rule(load_settings(env={"SIGFLOW_CRITICAL_SEVERITIES": " warning , critical",
                                            "SIGFLOW_CRITICAL_KINDS": "smoke"}).streaming)
    assert rule == (("warning", "critical"), ("smoke",))
