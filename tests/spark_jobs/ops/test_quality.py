"""Great Expectations suites: real pipeline output passes, injected bad rows fail by name."""

import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_jobs.contracts.tables import ALL_TABLES
from spark_jobs.local.simulate import generate_events
from spark_jobs.ops import quality
from spark_jobs.runtime.delta.schema import arrow_schema, create_table
from spark_jobs.runtime.kafka import admin as kafka_admin
from tests.conftest import make_settings
from tests.dags.chromium import screenshot
from tests.helpers import REPO, produce, run_job, sigflow, table

ARTIFACTS = REPO / ".test-artifacts"  # kept by CI, ignored by git

JOBS = ("ingest", "dedup", "windowed-averages", "sessions")


@pytest.fixture(scope="module")
def good_tables(tmp_path_factory, embedded_broker, spark):
    """Settings whose Delta tables hold one real run of the jobs over simulated traffic."""
    s = make_settings(tmp_path_factory.mktemp("quality") / "data", embedded_broker.bootstrap_servers)
    kafka_admin.create_topics(s.kafka.bootstrap_servers, [s.streaming.events_topic, s.streaming.alerts_topic], 2, s.kafka.topic_retention_ms)
    produce(s, generate_events(600, devices=6, seed=11))
    for job in JOBS:
        run_job(spark, s, job)
    return s


def _copy(settings, tmp_path, **changes):
    """The same tables in a directory of this test's own, to damage freely; no quality run
    has checked them yet."""
    target = tmp_path / "data"
    shutil.copytree(Path(settings.data_dir) / "delta", target / "delta", ignore=shutil.ignore_patterns("dq_results"))
    return settings.replace(data_dir=str(target), **changes)


def _append(settings, name: str, rows: list[dict]) -> None:
    schema = arrow_schema(ALL_TABLES[name])
    write_deltalake(settings.table_uri(name), pa.Table.from_pylist(rows, schema=schema), mode="append")


def test_pipeline_output_meets_every_critical_expectation_and_its_data_docs_render_offline(good_tables):
    reports = quality.run(good_tables)
    assert {r.table for r in reports} >= {"device_events", "device_events_deduplicated", "device_signal_averages"}
    assert [r.table for r in reports if not r.outcomes or r.failed_critical] == []
    # one dq_results row per expectation the suites declare, table by table, and the check
    # of the table's columns against its schema that every table gets
    results = table(good_tables, "dq_results")
    declared = {name: len(checks) + 1 for name, checks in quality.suites(good_tables).items()
                if name in {r.table for r in reports}}
    assert results.groupby("table_name").size().to_dict() == declared
    schema_checks = results[results.expectation == "expect_table_columns_to_match_set"]
    assert sorted(schema_checks.table_name) == sorted(declared)
    critical = results[results.severity == "critical"]
    assert len(critical) > 0 and critical["success"].all()

    # the site needs nothing from the internet: its results list is drawn by its own JS
    index = Path(quality.data_docs_index(good_tables))
    for page in index.parent.rglob("*.html"):
        loaded = re.findall(r"(?:src=\"|url\(')(https?://[^\"')]+)", page.read_text())
        assert loaded == [], f"{page.name} loads {loaded}"
    ARTIFACTS.mkdir(exist_ok=True)
    picture = ARTIFACTS / "data-docs-offline.png"
    text = screenshot(index.as_uri(), None, picture, wait_for_text="sigflow.device_events", offline=True)
    assert "sigflow.device_events_deduplicated" in text and picture.read_bytes().startswith(b"\x89PNG")


def test_two_devices_that_number_their_events_alike_meet_the_dedup_key(good_tables, tmp_path):
    """The deduplicated table's key is (device_id, event_id): another device's event with the
    same id is a row of its own, not a repeat."""
    s = _copy(good_tables, tmp_path)
    first = table(s, "device_events_deduplicated").iloc[0].to_dict()
    _append(s, "device_events_deduplicated", [{**first, "device_id": "another-device"}])
    report = quality.run(s, ["device_events_deduplicated"])[0]
    assert report.failed_critical == []


def test_injected_bad_rows_fail_naming_the_expectation_with_a_sample(good_tables, tmp_path):
    s = _copy(good_tables, tmp_path)
    first = table(s, "device_events_deduplicated").iloc[0].to_dict()
    _append(s, "device_events_deduplicated", [first])  # the same device's event_id twice
    start = datetime(2026, 11, 22, 10, 5, tzinfo=timezone.utc)
    _append(s, "device_signal_averages", [{
        "device_id": "d-bad", "window_start": start, "window_end": start.replace(minute=0),
        "window_kind": "tumbling", "avg_signal": 1.0, "min_signal": 1.0, "max_signal": 1.0, "event_count": 1,
    }])
    with pytest.raises(quality.QualityFailed) as failed:
        quality.run(s)
    message = failed.value.message
    assert "device_events_deduplicated: expect_compound_columns_to_be_unique(device_id, event_id)" in message
    assert "device_signal_averages: expect_column_pair_values_a_to_be_greater_than_b" in message
    report = next(r for r in failed.value.reports if r.table == "device_signal_averages")
    assert [row["device_id"] for o in report.failed_critical for row in o.sample] == ["d-bad"]
    results = table(s, "dq_results")
    assert set(results[~results.success].table_name) == {"device_events_deduplicated", "device_signal_averages"}



def test_a_window_or_a_session_written_twice_fails_its_key(good_tables, tmp_path):
    """A window or a session is written once (docs/tables.md); a second copy of its rows (a
    second writer, a job started over its own output) met every expectation."""
    s = _copy(good_tables, tmp_path)
    for name in ("device_signal_averages", "device_sessions"):
        written = DeltaTable(s.table_uri(name)).to_pyarrow_table()
        assert written.num_rows
        write_deltalake(s.table_uri(name), written.slice(written.num_rows - 1), mode="append")
    with pytest.raises(quality.QualityFailed) as failed:
        quality.run(s, ["device_signal_averages", "device_sessions", "device_events_deduplicated"])
    found = {(r.table, o.expectation, o.column, o.unexpected_count) for r in failed.value.reports for o in r.failed_critical}
    assert found == {  # no run checked the copy before: both rows of each pair are new, and count
        ("device_signal_averages", "expect_compound_columns_to_be_unique", "device_id, window_kind, window_start", 2),
        ("device_sessions", "expect_compound_columns_to_be_unique", "device_id, session_start", 2)}


def test_a_table_an_earlier_run_checked_and_now_gone_fails_where_it_was_skipped(good_tables, tmp_path):
    """A table deleted after a run had checked it was skipped as "no table yet", and the run
    said every critical expectation was met."""
    s = _copy(good_tables, tmp_path)
    quality.run(s, ["device_sessions", "device_events_deduplicated"])
    checked = DeltaTable(s.table_uri("device_sessions")).version()
    shutil.rmtree(s.table_uri("device_sessions"))
    with pytest.raises(quality.QualityFailed) as failed:
        quality.run(s, ["device_sessions", "device_events_deduplicated"])
    assert failed.value.message == "data quality failed: device_sessions: gone"
    assert failed.value.details[-1] == (f"device_sessions: GONE: no table at {s.table_uri('device_sessions')}, where a "
                                        f"run checked it at version {checked:,} (docs/runbooks/table-damaged.md)")
    shutil.rmtree(s.table_uri("fleet_signal_rollups"), ignore_errors=True)  # never checked: not yet made, skipped
    assert [r.table for r in quality.run(s, ["fleet_signal_rollups", "device_events_deduplicated"])] == [
        "device_events_deduplicated"]

def test_a_table_from_before_the_key_constraint_with_a_null_key_is_named_by_deploy_and_by_quality(
        good_tables, tmp_path):
    """What the constraint cannot hold: a row written before it existed. Deploy's migration
    leaves such a table without it and says how many rows; quality names the key column."""
    s = _copy(good_tables, tmp_path)
    uri = s.table_uri("device_events")
    DeltaTable(uri).alter.drop_constraint("key_not_null")  # as made before keys were constrained
    row = table(s, "device_events").iloc[0].to_dict()
    _append(s, "device_events", [{**row, "event_id": "e-no-offset", "offset": None}])
    assert create_table(uri, ALL_TABLES["device_events"]).endswith(
        ", key constraint not added: 1 row(s) with a null key in topic, partition, offset")
    with pytest.raises(quality.QualityFailed) as failed:
        quality.run(s, ["device_events"])
    assert "device_events: expect_column_values_to_not_be_null(offset)" in failed.value.message


def test_a_signal_outside_the_device_range_fails_and_the_cli_says_so(good_tables, tmp_path):
    s = _copy(good_tables, tmp_path)
    row = table(s, "device_events_deduplicated").iloc[0].to_dict()
    _append(s, "device_events_deduplicated", [{**row, "event_id": "e-out-of-range", "signal": 5000.0}])
    out = sigflow(s, "quality", "run", "device_events_deduplicated")
    assert out.returncode == 2
    assert "FAIL [critical] expect_column_values_to_be_between(signal): 1 of " in out.stdout
    assert "e-out-of-range" in out.stdout and "runbooks/dq-failure.md" in out.stderr


def test_an_empty_and_a_stale_table_are_findings_in_words(good_tables, tmp_path):
    """fleet-rollup never ran: its table exists and is empty. ingest last wrote when the fixture
    ran, before three more jobs, so longer ago than a one-second quality_freshness:
    device_events is stale since then."""
    s = _copy(good_tables, tmp_path).replace(quality_freshness="1 second")
    create_table(s.table_uri("fleet_signal_rollups"), ALL_TABLES["fleet_signal_rollups"])
    lines = quality.check(s, ["fleet_signal_rollups", "device_events"])
    newest = table(s, "device_events").ingest_time.max().tz_convert("UTC")
    assert "  warn [warning] the table is empty: expected at least one row once events flow" in lines
    stale = next(line for line in lines if "newest ingest_time" in line)
    assert stale.startswith("  warn [warning] ") and f"is {newest:%Y-%m-%dT%H:%M:%SZ}: expected after " in stale
    assert lines[-1].startswith("all critical expectations met, 2 warnings; Data Docs: ")


def test_every_suite_is_for_a_table_sigflow_writes():
    settings = make_settings("/nonexistent", "localhost:1")
    suite = quality.suites(settings)
    assert set(suite) <= set(ALL_TABLES)  # every suite is for a table sigflow writes


def test_data_docs_keep_a_page_per_run_and_the_index_links_every_one(good_tables, tmp_path):
    s = _copy(good_tables, tmp_path)
    for _ in range(3):
        quality.run(s, ["device_events"])
    site = Path(quality.data_docs_index(s)).parent
    pages = sorted(site.glob("validations/sigflow/device_events/**/*.html"))
    assert len(pages) == 3  # earlier runs' pages stay when a run renders its own
    index = (site / "index.html").read_text()
    assert all(str(page.relative_to(site)) in index for page in pages)
    assert (site / "expectations" / "sigflow" / "device_events.html").exists()
    runs = {f"sigflow-{run}" for run in table(s, "dq_results").run_id}
    named = {page.relative_to(site).parts[3] for page in pages}
    assert len(named) == 3 and named <= runs  # each page under the name of its dq_results run


def _checked(reports, name: str) -> int:
    return next(r.rows for r in reports if r.table == name)


def test_a_run_checks_the_rows_added_since_the_last_passing_one_and_failed_rows_until_repaired(good_tables, tmp_path):
    s = _copy(good_tables, tmp_path)
    name = "device_events_deduplicated"
    rows = table(s, name)
    assert _checked(quality.run(s, [name]), name) == len(rows)
    assert _checked(quality.run(s, [name]), name) == 0  # nothing new
    fresh = [{**rows.iloc[i].to_dict(), "event_id": f"e-new-{i}"} for i in range(3)]
    _append(s, name, fresh)
    assert _checked(quality.run(s, [name]), name) == 3

    _append(s, name, [{**fresh[0], "event_id": "e-too-high", "signal": 5000.0}])
    for _ in range(2):  # a failed run does not move the mark: the bad row is found again
        with pytest.raises(quality.QualityFailed) as failed:
            quality.run(s, [name])
        report = failed.value.reports[0]
        assert report.rows == 1 and [row["event_id"] for o in report.failed_critical for row in o.sample] == ["e-too-high"]
    DeltaTable(s.table_uri(name)).delete("event_id = 'e-too-high'")
    report = quality.run(s, [name])[0]
    assert report.failed_critical == []
    # a compaction's files are read again, and their rows are not taken for repeats of the
    # rows they were compacted from
    DeltaTable(s.table_uri(name)).optimize.compact()
    report = quality.run(s, [name])[0]
    assert report.rows == len(rows) + 3 and report.failed_critical == []
    # what was checked, run by run, is in dq_results with the version it reached
    results = table(s, "dq_results")
    schema = results[results.expectation == "expect_table_columns_to_match_set"].sort_values("run_time")
    assert schema.rows_checked.tolist() == [len(rows), 0, 3, 1, 1, 0, len(rows) + 3]
    assert schema.table_version.tolist() == sorted(schema.table_version.tolist())


def test_chunks_find_what_one_frame_finds_and_a_repeat_across_chunks_or_history(good_tables, tmp_path):
    """Small chunks: row checks count over every chunk; an event_id repeated in another
    chunk, or repeating a row a passing run checked before, fails as the whole table read
    at once would."""
    s = _copy(good_tables, tmp_path, quality_chunk_rows=40)
    name = "device_events_deduplicated"
    rows = table(s, name)
    assert len(rows) > 80
    report = quality.run(s, [name])[0]
    assert report.rows == len(rows) and report.failed_critical == []
    # row checks count over every chunk; table checks over the file statistics
    assert {o.rows for o in report.outcomes} == {len(rows)}
    s = s.replace(quality_chunk_rows=4)

    repeats = [rows.iloc[0].to_dict(), rows.iloc[len(rows) - 1].to_dict()]  # first and last checked chunks
    out_of_range = [{**rows.iloc[1].to_dict(), "event_id": f"e-high-{i}", "signal": 5000.0} for i in range(6)]
    _append(s, name, out_of_range[:3] + repeats[:1] + out_of_range[3:] + repeats[1:])
    with pytest.raises(quality.QualityFailed) as failed:
        quality.run(s, [name])
    report = failed.value.reports[0]
    assert report.rows == 8
    found = {o.expectation: o for o in report.failed_critical}
    assert {(name, o.column) for name, o in found.items()} == {
        ("expect_compound_columns_to_be_unique", "device_id, event_id"), ("expect_column_values_to_be_between", "signal")}
    assert found["expect_column_values_to_be_between"].unexpected_count == 6
    repeated = found["expect_compound_columns_to_be_unique"]
    assert repeated.unexpected_count == 2  # each new row repeating an older one
    assert sorted(row["event_id"] for row in repeated.sample) == sorted(r["event_id"] for r in repeats)

    full = _copy(good_tables, tmp_path / "full")
    _append(full, name, out_of_range + repeats)
    with pytest.raises(quality.QualityFailed) as whole:
        quality.run(full, [name], full=True)
    at_once = {o.column: o.unexpected_count for o in whole.value.reports[0].failed_critical}
    # every row of a repeated pair is new here: both count
    assert at_once == {"signal": 6, "device_id, event_id": 4}


