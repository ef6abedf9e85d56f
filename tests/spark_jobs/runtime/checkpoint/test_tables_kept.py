"""A table a job has written, deleted or created again under its path: the job carried on from
its checkpoint into an empty table, which `sigflow tables` then called complete up to the
job's newest records though every row of its earlier batches was gone."""

import json
import logging
import shutil
from pathlib import Path

import pytest

from spark_jobs.contracts.tables import DEVICE_EVENTS_DEDUPLICATED
from spark_jobs.errors import SigflowError
from spark_jobs.local.simulate import MALFORMED_KINDS, generate_events
from spark_jobs.ops import report, restart
from spark_jobs.ops.deploy import ensure_tables
from spark_jobs.ops.status import job_status
from spark_jobs.runtime.checkpoint.tables_kept import CheckpointMissing, TableLost
from spark_jobs.runtime.delta.schema import create_table
from tests.helpers import produce, run_job, sigflow, table


def test_a_table_gone_or_made_anew_since_its_job_wrote_it_is_refused_until_rebuilt(spark, settings, caplog):
    first, second = generate_events(300, seed=21, late_ratio=0.0), generate_events(200, devices=3, seed=22, late_ratio=0.0)
    produce(settings, first)
    run_job(spark, settings, "ingest")
    run_job(spark, settings, "dedup")
    uri = Path(settings.table_uri("device_events_deduplicated"))

    # a hand (or a bucket's lifecycle rule) deletes it: the run stops before making it again
    shutil.rmtree(uri)
    produce(settings, second)
    with pytest.raises(TableLost) as refused:
        run_job(spark, settings, "dedup")
    assert refused.value.message.startswith("dedup: table device_events_deduplicated is gone since dedup wrote it")
    assert refused.value.hint == ("if the tables moved, set delta_root to where they are; else restore it as it "
                                  "was, or rebuild it: `sigflow checkpoint recover dedup --from raw` "
                                  "(docs/runbooks/table-damaged.md)")
    assert not uri.exists()
    verdict = job_status(settings, "dedup").verdict  # it was OK: not running, nothing waiting
    assert (verdict.word, verdict.reason) == ("TABLE LOST", refused.value.message.removeprefix("dedup: "))
    for plan in (restart.plan_resume(settings, "dedup"), restart.plan_rewind(settings, "dedup", to_batch=0)):
        assert ("device_events_deduplicated is gone since dedup wrote it: rebuild it with "
                "`sigflow checkpoint recover dedup --from raw` instead") in plan.refusals, plan.describe()
        assert plan.runbook == "docs/runbooks/table-damaged.md"
    shown = sigflow(settings, "tables")  # it said "not created yet (... the job's first run creates it)"
    lost = "LOST: it is gone since dedup wrote it, its rows with it (see docs/runbooks/table-damaged.md)"
    assert f"device_events_deduplicated: {lost}" in shown.stdout.splitlines(), shown.stdout
    assert f"<td>{lost}</td>" in report.build(settings)  # the report left it out

    # sigflow_deploy's step does not make it again, saying why; another hand does, empty
    with pytest.raises(SigflowError) as not_made:
        ensure_tables(settings)
    assert not_made.value.message == "not made again: device_events_deduplicated is gone since dedup wrote it"
    assert "table device_events: exists" in not_made.value.details and not uri.exists()
    create_table(str(uri), DEVICE_EVENTS_DEDUPLICATED)
    with pytest.raises(TableLost) as refused:
        run_job(spark, settings, "dedup")
    assert "device_events_deduplicated was deleted and created again since dedup wrote it" in refused.value.message
    assert table(settings, "device_events_deduplicated").empty

    # device_status, which three jobs write, is not rebuilt by one's recover: said, and ingest goes on
    shutil.rmtree(settings.table_uri("device_status"))
    with caplog.at_level(logging.WARNING, logger="sigflow.runner"):
        run_job(spark, settings, "ingest")
    assert any(r.getMessage().startswith("ingest: table device_status is gone since this job last wrote it: the "
                                         "rows written before are not in it; write them again with `sigflow "
                                         "tables rebuild device_status`") for r in caplog.records), caplog.text
    devices_since = {json.loads(r.value)["device_id"] for r in second if r.kind not in MALFORMED_KINDS}
    assert set(table(settings, "device_status").device_id) == devices_since
    caplog.clear()  # the table made again is the one recorded now: said once
    with caplog.at_level(logging.WARNING, logger="sigflow.runner"):
        run_job(spark, settings, "ingest")
    assert not any("device_status" in r.getMessage() for r in caplog.records), caplog.text

    # the refusal's hint, followed: every valid event once (from the Delta metadata: refused)
    assert "device_events_deduplicated was deleted and created again since dedup wrote it" in " ".join(
        restart.plan_recover(settings, "dedup", "delta").refusals)
    recover = restart.plan_recover(settings, "dedup", "raw")
    assert any(step.startswith("device_events_deduplicated was deleted and created again since dedup wrote it: "
                               "the job rebuilds it") for step in recover.steps), recover.describe()
    recover.apply()
    run_job(spark, settings, "dedup")
    valid = {json.loads(r.value)["event_id"] for r in first + second if r.kind not in MALFORMED_KINDS}
    rebuilt = table(settings, "device_events_deduplicated").event_id
    assert rebuilt.is_unique and set(rebuilt) == valid


def test_a_job_whose_checkpoint_is_gone_and_whose_tables_hold_rows_is_refused_until_recovered(spark, settings):
    """dedup's checkpoint deleted: its next run read Kafka from the earliest offset again and
    appended every event a second time."""
    records = generate_events(300, seed=23, late_ratio=0.0)
    produce(settings, records)
    run_job(spark, settings, "dedup")
    written = table(settings, "device_events_deduplicated")
    shutil.rmtree(settings.checkpoint_uri("dedup"))
    with pytest.raises(CheckpointMissing) as refused:
        run_job(spark, settings, "dedup")
    assert refused.value.message == (
        f"dedup: no checkpoint at {settings.checkpoint_uri('dedup')}, yet device_events_deduplicated holds "
        f"{len(written):,} rows an earlier checkpoint of it wrote: a new one would read Kafka from earliest again, "
        "writing what it had written a second time")
    assert "`sigflow checkpoint recover dedup`" in refused.value.hint
    assert len(table(settings, "device_events_deduplicated")) == len(written)
    verdict = job_status(settings, "dedup").verdict  # it was NEVER RUN, with `sigflow run dedup` to do
    assert (verdict.word, verdict.next_step) == ("CHECKPOINT LOST", refused.value.hint)

    restart.plan_recover(settings, "dedup", "earliest").apply()
    run_job(spark, settings, "dedup")
    valid = {json.loads(r.value)["event_id"] for r in records if r.kind not in MALFORMED_KINDS}
    rebuilt = table(settings, "device_events_deduplicated").event_id
    assert rebuilt.is_unique and set(rebuilt) == valid


def _deleted(uri: str) -> None:
    shutil.rmtree(uri)


def _created_again(uri: str) -> None:
    shutil.rmtree(uri)
    create_table(uri, DEVICE_EVENTS_DEDUPLICATED)


@pytest.mark.parametrize(("hand", "stopped_with"), [
    # made again by the next batch's append, holding that batch's rows alone (its version 0)
    (_deleted, "table device_events_deduplicated was gone when batch "),
    # made again by another hand first: the batch's append is its version 1, another table's
    (_created_again, "table device_events_deduplicated was deleted and created again while dedup ran: batch "),
], ids=["deleted", "created-again"])
def test_a_table_lost_while_its_job_runs_stops_the_job_at_the_batch_that_wrote_into_another(
        spark, settings, monkeypatch, hand, stopped_with):
    """Deleted between two batches of a running job, or deleted and created again, the table
    took the next batch's rows without its earlier batches' ones, and the job went on writing
    into it until its next start."""
    from spark_jobs.runtime.checkpoint import tables_kept

    first, second = generate_events(200, seed=24, late_ratio=0.0), generate_events(100, seed=25, late_ratio=0.0)
    produce(settings, first)
    run_job(spark, settings, "dedup")
    produce(settings, second)
    uri = settings.table_uri("device_events_deduplicated")
    recorded = tables_kept.record_tables

    def then_lost(checkpoint, tables):  # the run's tables exist and are recorded; then a hand
        recorded(checkpoint, tables)
        hand(uri)
    monkeypatch.setattr(tables_kept, "record_tables", then_lost)
    with pytest.raises(TableLost) as stopped:
        run_job(spark, settings, "dedup")
    assert stopped.value.message.startswith(stopped_with), stopped.value.message
    assert "`sigflow checkpoint recover dedup --from raw`" in stopped.value.hint
    monkeypatch.undo()
    with pytest.raises(TableLost, match="was deleted and created again since dedup wrote it"):
        run_job(spark, settings, "dedup")  # and so it stays stopped until rebuilt
