"""Every runbook step exists and works: bash blocks run in order against a real embedded
stack, and each DAG trigger's JSON is valid for that DAG's parameters.

The blocks' commands go through the real CLI entry point, in this process: a subprocess
per command would start a JVM per `sigflow run` (about 20 s each on 2 cores). The blocks
use only what `_run_block` understands (variables, `export`, `VAR=value cmd`, comments),
and only `sigflow` commands: that is what keeps them honest.
"""

import contextlib
import copy
import io
import json
import re
import shlex
import shutil
from collections import Counter
from pathlib import Path

import pytest

from spark_jobs.local.simulate import event_payload, generate_alerts, generate_events
from spark_jobs.ops import status
from spark_jobs.runtime.kafka import admin as kafka_admin
from tests.conftest import make_settings
from tests.helpers import REPO, cli_env, produce, run_job, sigflow_here, table

pytestmark = pytest.mark.slow  # every runbook block against a stack with three jobs run twice

RUNBOOKS = sorted((REPO / "docs" / "runbooks").glob("*.md"))
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def _blocks(path: Path, language: str) -> list[tuple[str, str]]:
    """(text before the block, block) for each fenced block of that language."""
    text = path.read_text()
    return [(text[:m.start()], m.group(2)) for m in BLOCK.finditer(text) if m.group(1) == language]


@pytest.fixture(scope="module")
def incident(tmp_path_factory, embedded_broker, spark):
    """A stack mid-life: traffic in Kafka, three jobs with two committed runs each."""
    s = make_settings(tmp_path_factory.mktemp("runbooks") / "data", embedded_broker.bootstrap_servers)
    kafka_admin.create_topics(s.kafka.bootstrap_servers, [s.streaming.events_topic, s.streaming.alerts_topic], 2, s.kafka.topic_retention_ms)
    records = generate_events(400, devices=5, seed=21, malformed_ratio=0.05)
    alerts = generate_alerts(records, every=40, seed=21)
    produce(s, alerts, s.streaming.alerts_topic)
    for half in (records[:200], records[200:]):
        produce(s, half)
        for job in ("ingest", "dedup", "windowed-averages"):
            run_job(spark, s, job)
    return s, Counter(r.value for r in records) + Counter(r.value for r in alerts)


# Before a given bash block: put the stack in the state the runbook is about.
def _lose_ingest_checkpoint(settings):
    shutil.rmtree(settings.checkpoint_uri("ingest"))


def _damage_a_dedup_table_log(settings):
    newest = max((Path(settings.table_uri("device_events_deduplicated")) / "_delta_log").glob("*.json"))
    newest.write_bytes(newest.read_bytes()[:100])


def _lose_device_status(settings):
    shutil.rmtree(settings.table_uri("device_status"))


SETUP = {("checkpoint-lost-or-corrupt.md", 1): _lose_ingest_checkpoint,
         ("table-damaged.md", 0): _damage_a_dedup_table_log,
         ("table-damaged.md", 1): _lose_device_status}


def _ingest_runs_again(settings):
    verdict = {st.job: st.verdict.word for st in status.all_status(settings)}["ingest"]
    assert Path(settings.checkpoint_uri("ingest")).is_dir() and verdict not in ("NEVER RUN", "FAILED"), verdict


def _dedup_table_and_device_status_back(settings):
    rows = table(settings, "device_events_deduplicated")
    assert len(rows) > 0 and rows.event_id.is_unique
    devices = set(table(settings, "device_events").device_id) | set(table(settings, "device_alerts").device_id)
    status = table(settings, "device_status")
    assert status.device_id.is_unique and set(status.device_id) == devices


# After a runbook's last block: the incident it is about is over.
FIXED = {"checkpoint-lost-or-corrupt.md": _ingest_runs_again, "table-damaged.md": _dedup_table_and_device_status_back}


def _nothing_lost_or_doubled(settings, sent: Counter) -> None:
    """Whatever a runbook did, the raw table still holds each record as many times as it was
    sent (a re-sent duplicate twice), and no job is left stopped mid-way."""
    raw = Counter(table(settings, "device_events_raw")["value"])
    assert {value: raw[value] for value in sent} == dict(sent)
    assert [st.job for st in status.all_status(settings, with_lag=False) if st.verdict.word == "FAILED"] == []


def _run_block(block: str, env: dict[str, str], monkeypatch) -> str:
    """Run a runbook's bash block line by line through sigflow's CLI; returns its output."""
    out = io.StringIO()
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        words = [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], w) for w in words]
        if words[:1] == ["export"]:
            words = words[1:]
        scoped = {}
        while words and re.match(r"^[A-Z_]+=", words[0]):
            name, value = words.pop(0).split("=", 1)
            scoped[name] = value
        if not words:
            env.update(scoped)  # an assignment (or export) alone sets it for the lines after
            continue
        assert words[0] == "sigflow", f"not a sigflow command: {line}"
        with monkeypatch.context() as m:
            for name, value in {**env, **scoped}.items():
                m.setenv(name, value)
            with contextlib.redirect_stdout(out):
                code = sigflow_here(words[1:])
        assert code == 0, f"{line!r} exited {code}:\n{out.getvalue()}"
    return out.getvalue()


@pytest.mark.parametrize("runbook", [p for p in RUNBOOKS if _blocks(p, "bash")], ids=lambda p: p.name)
def test_runbook_commands_run(runbook, incident, tmp_path, monkeypatch):
    stack, sent = incident
    s = stack.replace(data_dir=str(tmp_path / "data"))
    shutil.copytree(stack.data_dir, s.data_dir)  # this runbook's own copy of the incident
    (tmp_path / "fixed.jsonl").write_bytes(event_payload("fixed-1", "d1", 1_700_000_000_000, 1.0) + b"\n")
    monkeypatch.chdir(tmp_path)
    env = {k: v for k, v in cli_env(s).items() if k.startswith("SIGFLOW_") or k == "KAFKA_BOOTSTRAP_SERVERS"}
    for index, (_, block) in enumerate(_blocks(runbook, "bash")):
        if (runbook.name, index) in SETUP:
            SETUP[(runbook.name, index)](s)
        output = _run_block(block, env, monkeypatch)
        assert "REFUSED" not in output, f"{runbook.name} block {index}:\n{output}"
    FIXED.get(runbook.name, lambda settings: None)(s)
    _nothing_lost_or_doubled(s, sent)


def test_runbook_dag_triggers_match_the_dags_parameters(airflow_home):  # noqa: F811
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    triggers = 0
    for runbook in RUNBOOKS:
        for before, block in _blocks(runbook, "json"):
            dag_id = re.findall(r"`(sigflow_\w+)`", before)[-1]
            conf = json.loads(block)
            params = copy.deepcopy(bag.get_dag(dag_id).params)
            assert set(conf) <= set(params), f"{runbook.name}: {dag_id} has no {set(conf) - set(params)}"
            params.update(conf)
            params.validate()
            triggers += 1
    assert triggers >= 3


def test_every_runbook_is_indexed_and_every_hint_points_at_one():
    index = (REPO / "docs" / "runbooks" / "README.md").read_text()
    assert all(p.name in index for p in RUNBOOKS if p.name != "README.md")
    code = "\n".join(p.read_text() for p in (REPO / "spark_jobs").rglob("*.py"))
    for named in set(re.findall(r"docs/runbooks/([\w-]+\.md)", code)):
        assert (REPO / "docs" / "runbooks" / named).exists(), named
