"""The alert rules (infra/prometheus/sigflow-alerts.yml) fire on what on-call acts on, tested
by Prometheus's own `promtool test rules` on series recorded from a real run: the exporter
(`sigflow metrics`) scraped after each step of a scenario on the embedded stack."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from spark_jobs.local.simulate import generate_events
from spark_jobs.ops import prometheus
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.lease import Lease
from tests.helpers import REPO, delete_from_kafka, produce, run_job, system_tool

RULES = REPO / "infra" / "prometheus" / "sigflow-alerts.yml"
JOBS = ("ingest", "windowed-averages")
# Prometheus's time() starts at 0 in a rules test: times are kept relative to the first scrape
TIMESTAMPS = ("sigflow_last_batch_timestamp_seconds", "sigflow_watermark_timestamp_seconds")


def _scrape(settings) -> tuple[float, dict[str, float]]:
    """One scrape of the exporter: its wall time and each series of the scenario's jobs."""
    text, at = prometheus.exposition(settings), time.time()
    series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get(prometheus.JOB_LABEL, JOBS[0]) in JOBS:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                series[f"{sample.name}{{{labels}}}"] = sample.value
    return at, series


def _input_series(scrapes: list[tuple[int, float, dict[str, float]]], until: int) -> list[dict]:
    """promtool input series at one sample a minute: each scrape holds from its minute to the next."""
    first_wall = scrapes[0][1]
    names = sorted({name for _, _, series in scrapes for name in series})
    out = []
    for name in names:
        values = []
        for n, (minute, wall, series) in enumerate(scrapes):
            end = scrapes[n + 1][0] if n + 1 < len(scrapes) else until + 1
            value = series.get(name)
            if value is not None and name.startswith(TIMESTAMPS):
                value -= first_wall
            values += ["_" if value is None else repr(value)] * (end - minute)
        out.append({"series": name, "values": " ".join(values)})
    return out


def _expected(rules: dict, alert: str, **labels) -> dict:
    """An alert as the rules file says it fires: its labels and its annotations for these labels."""
    rule = next(r for group in rules["groups"] for r in group["rules"] if r.get("alert") == alert)
    annotations = {key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda label: labels.get(label[1], ""), text)
                   for key, text in rule["annotations"].items()}
    return {"exp_labels": {**rule["labels"], **labels}, "exp_annotations": annotations}


@pytest.mark.slow  # two jobs run twice, eight scrapes
def test_each_alert_fires_on_series_recorded_from_a_real_run(spark, settings, tmp_path):
    promtool = system_tool("promtool", "prometheus")
    scrapes = []

    def step(minute: int) -> None:
        scrapes.append((minute, *_scrape(settings)))

    produce(settings, generate_events(100, seed=1, late_ratio=0, malformed_ratio=0))
    for job in JOBS:
        run_job(spark, settings, job)
    step(0)
    # a burst of malformed records, and events half an hour behind the watermark
    produce(settings, generate_events(100, seed=2, late_ratio=0.3, malformed_ratio=0.2))
    for job in JOBS:
        run_job(spark, settings, job)
    step(5)
    for minute in (10, 15, 20):  # records keep coming; nothing runs the jobs
        produce(settings, generate_events(100, seed=minute, late_ratio=0, malformed_ratio=0))
        step(minute)
    hung = Lease(Checkpoint(settings.checkpoint_uri("ingest")), "ingest", settings.operations.lease_ttl.seconds)  # a run that holds ingest's checkpoint and commits nothing
    hung.acquire()
    try:
        step(40)
    finally:
        hung.release()
    crash = ("from spark_jobs.runtime.checkpoint.directory import Checkpoint; from spark_jobs.runtime.checkpoint.lease import Lease; "
             f"import os; Lease(Checkpoint({settings.checkpoint_uri('ingest')!r}), 'ingest', 60).acquire(); os._exit(9)")
    subprocess.run([sys.executable, "-c", crash], cwd=REPO)  # a run that dies holding its lease
    step(50)
    assert scrapes[-1][2]['sigflow_job_status{sigflow_job="ingest",status="FAILED"}'] == 1.0
    delete_from_kafka(settings, settings.streaming.events_topic)  # retention passes what neither job read
    step(60)
    # runs that will be refused: a table of ingest's own deleted, and windowed-averages' window
    # changed in the settings the exporter reads, where its state was built with another
    shutil.rmtree(settings.table_uri("device_events_raw"))
    scrapes.append((70, *_scrape(settings.replace(tumbling_window="7 minutes"))))

    rules = yaml.safe_load(RULES.read_text())
    ingest, averages = {"sigflow_job": "ingest"}, {"sigflow_job": "windowed-averages"}
    alerts = {
        # the burst: 20% quarantined, 30% late, both well over the thresholds
        (12, "SigflowQuarantineJump"): [_expected(rules, "SigflowQuarantineJump")],
        (12, "SigflowLateEventsJump"): [_expected(rules, "SigflowLateEventsJump", **averages)],
        (12, "SigflowJobDown"): [],  # records wait, but for 2 minutes, not 15
        # behind grew at 10, 15 and 20: for 15 minutes by 27
        (27, "SigflowLagGrowing"): [_expected(rules, "SigflowLagGrowing", **labels) for labels in (ingest, averages)],
        (27, "SigflowJobDown"): [_expected(rules, "SigflowJobDown", **labels) for labels in (ingest, averages)],
        (35, "SigflowLagGrowing"): [],  # behind stopped growing at 20
        (35, "SigflowQuarantineJump"): [],
        # the hung run: up, records waiting, no batch since the start
        (45, "SigflowNoBatch"): [_expected(rules, "SigflowNoBatch", **ingest)],
        (45, "SigflowJobDown"): [_expected(rules, "SigflowJobDown", **averages)],
        (45, "SigflowJobFailed"): [],
        # the crashed run
        (55, "SigflowJobFailed"): [_expected(rules, "SigflowJobFailed", **ingest, status="FAILED")],
        (55, "SigflowNoBatch"): [],
        (55, "SigflowDataLoss"): [],
        (55, "SigflowRunRefused"): [],  # a crashed run is re-run, not refused
        # records gone before either job read them
        (65, "SigflowDataLoss"): [_expected(rules, "SigflowDataLoss", **labels, status="DATA LOSS")
                                  for labels in (ingest, averages)],
        (75, "SigflowRunRefused"): [_expected(rules, "SigflowRunRefused", **ingest, status="TABLE LOST"),
                                    _expected(rules, "SigflowRunRefused", **averages, status="SETTINGS CHANGED")],
        (75, "SigflowDataLoss"): [],  # the refusal is what the next run meets first
    }
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": _input_series(scrapes, until=80),
            "alert_rule_test": [{"eval_time": f"{minute}m", "alertname": name, "exp_alerts": expected}
                                for (minute, name), expected in alerts.items()],
        }],
    }
    test_file = tmp_path / "sigflow-alerts.test.yml"
    test_file.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    tested = {name for _, name in alerts}
    assert tested == {r["alert"] for group in rules["groups"] for r in group["rules"]}  # every rule


def test_the_compose_prometheus_configuration_and_its_rules_are_valid():
    promtool = system_tool("promtool", "prometheus")
    result = subprocess.run([promtool, "check", "config", str(RULES.parent / "prometheus.yml")],
                            capture_output=True, text=True)
    assert result.returncode == 0 and "8 rules found" in result.stdout, result.stdout + result.stderr
