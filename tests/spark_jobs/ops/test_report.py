"""sigflow report: one offline HTML page whose figures come from the Delta tables."""

import re

import pytest

from spark_jobs.local.simulate import generate_events
from spark_jobs.ops import report
from tests.helpers import produce, run_job, table


def _sections(page: str) -> dict[str, str]:
    parts = re.split(r"<h2>(.*?)</h2>", page)[1:]
    return dict(zip(parts[::2], parts[1::2]))


@pytest.mark.slow  # three jobs over four batches and more
def test_report_draws_every_section_from_the_tables_after_a_run(spark, settings, tmp_path):
    s = settings.replace(max_offsets_per_trigger=150)  # 4+ batches: late drops start at the third
    produced = produce(s, generate_events(600, seed=3, late_ratio=0.05))
    for job in ("ingest", "dedup", "windowed-averages"):
        run_job(spark, s, job)

    page = report.write(s, tmp_path / "report.html").read_text()

    sections = _sections(page)
    assert list(sections) == ["Tables", "Per-device signal averages", "Late data", "Late events counted by reconcile",
                              "Quarantine", "Batch durations", "Watermark", "Kafka lag", "State size"]
    reconciled = "Late events counted by reconcile"  # no reconcile ran: drawn in tests/spark_jobs/ops/test_reconcile.py
    assert "data:image/png;base64," not in sections[reconciled]
    for title in [title for title in list(sections)[1:] if title != reconciled]:
        assert "data:image/png;base64," in sections[title], f"{title} has no plot"
    shown = {name: int(rows.replace(",", "")) for name, rows in
             re.findall(r"<td>(\w+)</td>\s*<td>([\d,]+)</td>", sections["Tables"])}
    for name in ("device_events", "quarantined_events", "late_events", "device_signal_averages"):
        assert shown[name] == len(table(s, name))
    assert "https://" not in page and "http://" not in page  # opens offline

    # The lag plotted: what Kafka held past each batch's end, i.e. what was produced less
    # what the batches so far read (Spark's row count, not the offsets the lag comes from).
    ingest = report.batches(table(s, "pipeline_metrics")).query("job == 'ingest'").sort_values("batch_id")
    assert len(ingest) >= 4 and ingest.records_behind.iloc[0] > 0
    assert ingest.records_behind.tolist() == (produced - ingest.input_rows.cumsum()).tolist()
    assert ingest.records_behind.iloc[-1] == 0
    watermarks = report.batches(table(s, "pipeline_metrics")).query("job == 'windowed-averages'").sort_values("batch_id").watermark
    assert watermarks.dropna().is_monotonic_increasing and watermarks.notna().any()

    # state per operator: dedup keeps its ids, the aggregation its open tumbling windows (the
    # sliding ones merge from them); together what the job reports as its state rows after
    # every batch
    metrics = table(s, "pipeline_metrics")
    state = report.state_by_operator(metrics)
    averages = state[state.operator.str.startswith("windowed-averages ")]
    assert any("dedupe" in name for name in averages.operator.unique())
    assert sum("stateStoreSave" in name for name in averages.operator.unique()) == 1
    per_batch = averages.groupby("batch_time").state_rows.sum().sort_index()
    reported = metrics[metrics.job == "windowed-averages"].set_index("batch_time").state_rows.sort_index()
    assert per_batch.tolist() == reported.tolist()
    assert not state.operator.str.startswith("ingest ").any()  # stateless


def test_report_on_a_fresh_install_says_there_is_no_data_yet(settings, tmp_path):
    page = report.write(settings, tmp_path / "report.html").read_text()
    assert page.count("no data yet") == 8  # every chart


def test_a_device_id_with_dollar_signs_is_drawn_as_written(settings, tmp_path):
    """matplotlib reads text between two "$" as a formula; a device id is not one."""
    from datetime import datetime, timezone

    import pandas as pd
    from deltalake import write_deltalake

    from spark_jobs.contracts.tables import DEVICE_SIGNAL_AVERAGES
    from spark_jobs.runtime.delta.schema import create_table

    uri = settings.table_uri("device_signal_averages")
    create_table(uri, DEVICE_SIGNAL_AVERAGES)
    start = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
    rows = pd.DataFrame({
        "device_id": ["pump-$\\frac$-7", "pump-$\\frac$-7"], "window_start": [start, start.replace(minute=5)],
        "window_end": [start.replace(minute=5), start.replace(minute=10)], "window_kind": ["tumbling"] * 2,
        "avg_signal": [1.0, 2.0], "min_signal": [1.0, 2.0], "max_signal": [1.0, 2.0], "event_count": [1, 1],
        "checkpoint_id": ["c1", "c1"], "batch_id": [0, 1], "revision": pd.Series([0, 0], dtype="int32"),
        "corrected_at": pd.Series([None, None], dtype="datetime64[us, UTC]"),
    })
    write_deltalake(uri, rows, mode="append")

    page = report.write(settings, tmp_path / "report.html").read_text()
    assert "data:image/png;base64," in _sections(page)["Per-device signal averages"]


def test_a_metrics_row_whose_progress_is_not_json_loses_its_figures_not_the_report(settings, tmp_path):
    """Measured: one such row made `sigflow report` end in a JSONDecodeError traceback."""
    from datetime import datetime, timezone

    import pyarrow as pa
    from deltalake import write_deltalake

    from spark_jobs.contracts.tables import PIPELINE_METRICS
    from spark_jobs.runtime.delta.schema import arrow_schema, create_table

    uri = settings.table_uri("pipeline_metrics")
    create_table(uri, PIPELINE_METRICS)
    schema = arrow_schema(PIPELINE_METRICS)
    row = {field.name: None for field in schema}
    row.update(job="dedup", checkpoint_id="checkpoint-1", batch_id=0, batch_time=datetime(2026, 11, 22, 10, tzinfo=timezone.utc), duration_ms=1500,
               input_rows=10, progress_json='{"id": "cut short')
    write_deltalake(uri, pa.Table.from_pylist([row], schema=schema), mode="append")

    frame = report.batches(report.read_pandas(uri))
    assert frame.seconds.tolist() == [1.5] and frame.records_behind.isna().all()
    assert report.state_by_operator(frame).empty
    page = report.write(settings, tmp_path / "report.html").read_text()
    assert "data:image/png;base64," in _sections(page)["Batch durations"]
