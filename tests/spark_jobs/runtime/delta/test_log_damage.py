"""A Delta table whose log is damaged: named, with its entry, wherever it is read; the other
tables still shown; rebuilt by the runbook's steps (docs/runbooks/table-damaged.md)."""

import json
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.local.simulate import MALFORMED_KINDS, generate_events
from spark_jobs.ops import report, restart
from spark_jobs.runtime.delta.log_damage import TableUnreadable
from tests.helpers import produce, run_job, sigflow, table


def test_a_table_whose_log_is_damaged_is_named_with_its_entry_and_rebuilt_by_its_runbook(spark, settings, tmp_path):
    """A commit entry of device_events_deduplicated cut short: `sigflow tables`, the report and
    the job's next run ended in delta-rs' "Kernel error: Json error: Truncated record whilst reading
    object", naming neither the table nor the entry."""
    records = generate_events(300, seed=12, late_ratio=0.0)  # duplicates and malformed kept
    produce(settings, records)
    run_job(spark, settings, "ingest")
    run_job(spark, settings, "dedup")
    uri = settings.table_uri("device_events_deduplicated")
    newest = max((Path(uri) / "_delta_log").glob("*.json"))
    damaged = newest.read_bytes()[:100]
    newest.write_bytes(damaged)

    shown = sigflow(settings, "tables")
    assert shown.returncode == 0, shown.stderr
    lines = {line.split(":")[0]: line for line in shown.stdout.splitlines()}
    assert lines["device_events_deduplicated"].startswith(
        f"device_events_deduplicated: CANNOT BE READ: its log entry {newest.name} is not what Delta wrote (")
    assert lines["device_events_deduplicated"].endswith("(see docs/runbooks/table-damaged.md)")
    assert lines["device_events_raw"].startswith("device_events_raw: version ")  # the others answer
    page = report.write(settings, tmp_path / "report.html").read_text()  # it ended in the same error
    assert f"<td>CANNOT BE READ: its log entry {newest.name} is not what Delta wrote (" in page
    with pytest.raises(TableUnreadable) as stopped:
        run_job(spark, settings, "dedup")
    assert stopped.value.message.startswith(
        f"table device_events_deduplicated cannot be read: its log entry {newest.name} is not what Delta wrote")
    assert stopped.value.hint == "see docs/runbooks/table-damaged.md"

    # the runbook: a recover from device_events_raw, which sets the table aside, then a run;
    # from the damaged log's metadata, refused
    assert "cannot be read" in restart.plan_recover(settings, "dedup", "delta").describe()
    recover = restart.plan_recover(settings, "dedup", "raw")
    assert recover.steps[1].startswith(f"move device_events_deduplicated aside to {uri}.damaged-"), recover.describe()
    recover.apply()
    run_job(spark, settings, "dedup")
    kept = [path for path in Path(uri).parent.iterdir() if path.name.startswith("device_events_deduplicated.damaged-")]
    assert len(kept) == 1 and (kept[0] / "_delta_log" / newest.name).read_bytes() == damaged
    valid = {json.loads(r.value)["event_id"] for r in records if r.kind not in MALFORMED_KINDS}
    rebuilt = table(settings, "device_events_deduplicated").event_id
    assert rebuilt.is_unique and set(rebuilt) == valid


def test_a_damaged_entry_is_named_only_where_a_reader_reads_it(tmp_path):
    """The log is read from its newest checkpoint on: an entry damaged before it is not why a
    table fails, and naming it would send on-call after the wrong file."""
    from spark_jobs.runtime.delta import log_damage, table_access

    uri = str(tmp_path / "readings")
    table_access.create(uri, pa.schema([("n", pa.int64())]), None, {})
    for n in range(3):
        table_access.append(uri, pa.table({"n": [n]}))
    log = tmp_path / "readings" / "_delta_log"
    table_access.open_table(uri).create_checkpoint()  # at version 3
    (log / "00000000000000000001.json").write_bytes(b'{"add": {"pa')
    assert log_damage.damaged_entry(uri) is None
    (log / "00000000000000000004.json").write_bytes(b'{"commitInfo": {"timestamp": 1')  # a commit cut short
    assert log_damage.damaged_entry(uri) == "00000000000000000004.json"
